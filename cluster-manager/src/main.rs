//! The cluster manager (cluster-manager issue).

fn main() {
    eprintln!("cluster-manager: not built yet; see the cluster-manager issue");
    std::process::exit(2);
}
