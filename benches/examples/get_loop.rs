//! Profiling aid: load keys into an shm table, then run gets in a loop on one core.
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
    let gets: u64 = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(2_000_000);
    let local = std::env::args().nth(3).is_some();
    let mut _keep = None;
    let dht = rt.block_on(async {
        let dht = if local {
            embedded_table(4 << 30).await.unwrap()
        } else {
            let t = shm_table(2, 2 << 30).await.unwrap();
            let d = t.dht.clone();
            _keep = Some(t);
            d
        };
        load(&dht, n, 64, None, false).await.unwrap();
        dht
    });
    let one = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let start = std::time::Instant::now();
    one.block_on(async {
        let mut k = 0u64;
        for _ in 0..gets {
            k = (k + 7919) % n;
            assert!(dht.get(0, &key(k)).await.unwrap().is_some());
        }
    });
    let s = start.elapsed().as_secs_f64();
    println!("{gets} gets in {s:.2}s: {:.0} gets/s", gets as f64 / s);
}
