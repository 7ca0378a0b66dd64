//! Pool bytes per key: loads N keys (16-byte keys, 32-byte values) into a table and
//! reports (index + object bytes allocated in one copy) / N, without and with a TTL.
//!
//! `cargo run --release -p dmc-benches --bin pool-footprint -- --keys 1000000`
//! `benches/footprint.sh` runs it next to redis-server with the same data.

use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use dmc_benches::{embedded_table, load};

/// Measure pool bytes per key for the benchmark data set.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Keys to load.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Also load with a TTL on every key.
    #[arg(long, default_value_t = true)]
    with_ttl: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut runs = vec![("no TTL", None)];
        if args.with_ttl {
            runs.push(("with TTL", Some(Duration::from_secs(3600))));
        }
        println!("keys,ttl,pool_bytes,bytes_per_key,load_secs");
        for (name, ttl) in runs {
            let dht = embedded_table(4 << 30).await?;
            let base = dht.used_memory();
            let took = load(&dht, args.keys, 64, ttl, true).await?;
            let used = dht.used_memory() - base;
            println!(
                "{},{},{},{:.1},{:.2}",
                args.keys,
                name,
                used,
                used as f64 / args.keys as f64,
                took.as_secs_f64()
            );
        }
        Ok(())
    })
}
