use dmc_benches::*;
fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let n: u64 = std::env::args()
            .nth(1)
            .map(|s| s.parse().unwrap())
            .unwrap_or(200_000);
        let inflight: usize = std::env::args()
            .nth(2)
            .map(|s| s.parse().unwrap())
            .unwrap_or(64);
        let shm = std::env::args().nth(3).is_some();
        let t;
        let dht = if shm {
            t = shm_table(2, 2 << 30).await.unwrap();
            t.dht.clone()
        } else {
            embedded_table(4 << 30).await.unwrap()
        };
        load(&dht, n, inflight, None, false).await.unwrap();
        let mut missing = 0;
        for i in 0..n {
            if dht.get(0, &key(i)).await.unwrap().is_none() {
                missing += 1;
                if missing < 5 {
                    eprintln!("missing {i}");
                }
            }
        }
        println!(
            "n={n} inflight={inflight} missing={missing} stats={:?}",
            dht.stats()
        );
    });
}
