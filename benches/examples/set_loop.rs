//! Profiling aid: sets with 64 in flight into an shm table with r = 2.
use dmc_benches::*;
fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(200_000);
    let sets: u64 = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(1_000_000);
    rt.block_on(async {
        let t = shm_table(2, 2 << 30).await.unwrap();
        load(&t.dht, n, 64, None, false).await.unwrap();
        let start = std::time::Instant::now();
        load(&t.dht, sets.min(n), 64, None, false).await.unwrap();
        let s = start.elapsed().as_secs_f64();
        println!(
            "{} overwrites in {s:.2}s: {:.0} sets/s",
            sets.min(n),
            sets.min(n) as f64 / s
        );
    });
}
