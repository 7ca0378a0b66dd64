//! `cluster-manager`: the daemon (`serve`) and the operator CLI (see `cli/`).

use clap::Parser;

fn main() {
    let cli = cluster_manager::cli::Cli::parse();
    if let Err(e) = cluster_manager::cli::run(cli) {
        eprintln!("cluster-manager: {e:#}");
        std::process::exit(1);
    }
}
