//! Profiling aid: batched gets (16 keys per call) on one core over an shm table.
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
    let t = rt.block_on(async {
        let t = shm_table(2, 2 << 30).await.unwrap();
        load(&t.dht, n, 64, None, false).await.unwrap();
        t
    });
    let names: Vec<[u8; 16]> = (0..n).map(key).collect();
    let one = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let start = std::time::Instant::now();
    one.block_on(async {
        let mut k = 0u64;
        for _ in 0..gets / 16 {
            let batch: Vec<&[u8]> = (0..16)
                .map(|_| {
                    k = (k + 7919) % n;
                    &names[k as usize][..]
                })
                .collect();
            let got = t.dht.get_many(0, &batch).await.unwrap();
            assert!(got.iter().all(|e| e.is_some()));
        }
    });
    let s = start.elapsed().as_secs_f64();
    println!("{gets} gets in {s:.2}s: {:.0} gets/s", gets as f64 / s);
}
