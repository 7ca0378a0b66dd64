//! Checks a bulk load: load KEYS keys with IN_FLIGHT sets outstanding, then read every
//! key back. `verify_load KEYS IN_FLIGHT [local]`.
use dmc_benches::*;

fn main() {
    let rt = runtime();
    let (n, in_flight) = (arg(1, 200_000), arg(2, 64) as usize);
    let local = std::env::args().nth(3).is_some();
    let (_keep, dht) = rt.block_on(async {
        if local {
            (None, embedded_table(4 << 30).await.unwrap())
        } else {
            let t = shm_table(2, 2 << 30).await.unwrap();
            let d = t.dht.clone();
            (Some(t), d)
        }
    });
    rt.block_on(load(&dht, n, in_flight, None, false)).unwrap();
    let missing = rt.block_on(async {
        let mut missing = 0;
        for i in 0..n {
            if dht.get(0, &key(i)).await.unwrap().is_none() {
                missing += 1;
            }
        }
        missing
    });
    println!(
        "n={n} in_flight={in_flight} missing={missing} stats={:?}",
        dht.stats()
    );
}
