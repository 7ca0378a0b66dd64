//! The cluster manager binary. Only its state model exists so far (see `lib.rs`); the
//! daemon and operator CLI are the rest of the cluster-manager issue.

fn main() {
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!(
            "cluster-manager: the DMC control plane (not built yet: its state model is in \
             cluster-manager/src/state.rs; the daemon and CLI come with the cluster-manager issue)"
        );
        return;
    }
    eprintln!("cluster-manager: not built yet; see the cluster-manager issue");
    std::process::exit(2);
}
