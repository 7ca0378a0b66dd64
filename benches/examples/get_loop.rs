//! Profiling aid: load KEYS keys, then GETS single-key gets on one core.
//! `get_loop KEYS GETS [local]` (shm with r = 2 unless `local`).
use dmc_benches::*;

fn main() {
    let rt = runtime();
    let (n, gets) = (arg(1, 200_000), arg(2, 2_000_000));
    let (_keep, dht) = loaded_table(&rt, n, std::env::args().nth(3).is_some());
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
