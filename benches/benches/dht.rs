//! Hash-table throughput per backend with 1 M keys (16-byte keys, 32-byte values):
//! `shm` (two in-process memory nodes reached through mapped region files, `r = 2`) and
//! `local` (the embedded pool, `r = 1`). Gets on one core, one key or 16 keys per call,
//! pipelined sets on one core (16 at a time: as they come, with their keys loaded
//! first, and loaded first and written without futures), and sets with 64 in flight
//! (batched commits).
//! Run: `cargo bench -p dmc-benches --bench dht`.

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dmc_benches::{embedded_table, key, load, shm_table, value};
use dmc_dht::SetOptions;
use futures::StreamExt;

const KEYS: u64 = 1_000_000;
const GETS_PER_ITER: u64 = 1000;
const IN_FLIGHT: usize = 64;
const SETS_PER_ITER: u64 = 6400;

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let table = rt.block_on(async {
        let t = shm_table(2, 2 << 30).await.unwrap();
        let took = load(&t.dht, KEYS, IN_FLIGHT, None, true).await.unwrap();
        eprintln!(
            "shm: loaded {KEYS} keys in {took:?}; bytes per key (one copy): {:.1}",
            t.dht.used_memory() as f64 / KEYS as f64
        );
        t
    });
    backend(c, &rt, "dht_shm", "set_r2_64_in_flight", table.dht.clone());
    drop(table);
    let local = rt.block_on(async {
        let dht = embedded_table(2 << 30).await.unwrap();
        let took = load(&dht, KEYS, IN_FLIGHT, None, true).await.unwrap();
        eprintln!("local: loaded {KEYS} keys in {took:?}");
        dht
    });
    backend(c, &rt, "dht_local", "set_r1_64_in_flight", local);
}

/// The names of the 16 keys after `next` in the benches' stride, in a small buffer, as
/// a server has them in its input buffer (a table of all names would add a miss per
/// key).
fn batch16(next: &mut u64) -> [[u8; 16]; 16] {
    std::array::from_fn(|_| {
        *next = (*next + 7919) % KEYS;
        key(*next)
    })
}

/// Gets (one key and 16 keys per call, on one core) and sets (64 in flight) on one
/// loaded table.
fn backend(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    group: &str,
    set_name: &str,
    dht: Arc<dmc_dht::Dht>,
) {
    // Gets run on a current-thread runtime: one core, no task hand-offs.
    let one_core = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group(group);
    g.measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(GETS_PER_ITER));
    let mut next = 0u64;
    g.bench_function("get_1M_keys_one_core", |b| {
        b.iter(|| {
            one_core.block_on(async {
                for _ in 0..GETS_PER_ITER {
                    next = (next + 7919) % KEYS;
                    let e = dht.get(0, &key(next)).await.unwrap();
                    assert!(e.is_some());
                }
            })
        })
    });

    // Batches of 16 make 992 of the 1000 per iteration.
    g.throughput(Throughput::Elements(GETS_PER_ITER / 16 * 16));
    // The same gets, 16 keys per call (a pipelined client's batch): the buckets and then
    // the objects of all 16 are read together so their memory latencies overlap.
    let mut next = 0u64;
    g.bench_function("get_many16_1M_keys_one_core", |b| {
        b.iter(|| {
            one_core.block_on(async {
                for _ in 0..GETS_PER_ITER / 16 {
                    let names = batch16(&mut next);
                    let batch: Vec<&[u8]> = names.iter().map(|k| &k[..]).collect();
                    let got = dht.get_many(0, &batch).await.unwrap();
                    assert!(got.iter().all(|e| e.is_some()));
                }
            })
        })
    });

    // Pipelined sets as an agent runs a client's batch of 16 on one core: one after
    // another (over in-process memory nothing waits), as they come; with every key's
    // directory words, buckets and old object loaded first (`Dht::prefetch_buckets`);
    // and loaded first and written without futures (`Dht::set_now`, falling back to
    // `set`), which is what the agent does for a pipeline.
    for (name, prefetch, inline) in [
        ("set16_one_core", false, false),
        ("set16_prefetched_one_core", true, false),
        ("set16_inline_one_core", true, true),
    ] {
        let mut next = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                one_core.block_on(async {
                    for _ in 0..GETS_PER_ITER / 16 {
                        let names = batch16(&mut next);
                        if prefetch {
                            dht.prefetch_buckets(0, names.iter().map(|k| &k[..]));
                        }
                        for (i, k) in names.iter().enumerate() {
                            let v = value(i as u64);
                            let opts = SetOptions::default();
                            let done = if inline {
                                dht.set_now(0, k, &v, opts)
                            } else {
                                None
                            };
                            match done {
                                Some(done) => done.map(|_| ()).unwrap(),
                                None => dht.set(0, k, &v, opts).await.map(|_| ()).unwrap(),
                            }
                        }
                    }
                })
            })
        });
    }

    // Sets keep 64 in flight continuously (a pipelined client): each iteration streams
    // SETS_PER_ITER overwrites through a window of 64, so the group committer batches.
    g.throughput(Throughput::Elements(SETS_PER_ITER));
    let mut base = 0u64;
    g.bench_function(set_name, |b| {
        b.iter(|| {
            let start = base;
            base += SETS_PER_ITER;
            rt.block_on(async {
                let mut sets = futures::stream::iter(0..SETS_PER_ITER)
                    .map(|k| {
                        let dht = dht.clone();
                        let n = (start + k * 15_485_863) % KEYS;
                        async move {
                            dht.set(0, &key(n), &value(n + 1), SetOptions::default())
                                .await
                        }
                    })
                    .buffer_unordered(IN_FLIGHT);
                while let Some(r) = sets.next().await {
                    r.unwrap();
                }
            })
        })
    });
    g.finish();
}

criterion_group!(dht, benches);
criterion_main!(dht);
