//! The compute agent (compute-agent issue).

fn main() {
    eprintln!("compute-agent: not built yet; see the compute-agent issue");
    std::process::exit(2);
}
