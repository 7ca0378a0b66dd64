//! Profiling aid: load KEYS keys, then GETS gets in batches of 16 on one core.
//! `get_many_loop KEYS GETS [local]`.
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
        for _ in 0..gets / 16 {
            // The keys are built in a small buffer, as a server has them in its
            // input buffer: a table of all names would add a cache miss per key.
            let names: [[u8; 16]; 16] = std::array::from_fn(|_| {
                k = (k + 7919) % n;
                key(k)
            });
            let batch: Vec<&[u8]> = names.iter().map(|k| &k[..]).collect();
            assert!(
                dht.get_many(0, &batch)
                    .await
                    .unwrap()
                    .iter()
                    .all(|e| e.is_some())
            );
        }
    });
    let s = start.elapsed().as_secs_f64();
    println!("{gets} gets in {s:.2}s: {:.0} gets/s", gets as f64 / s);
}
