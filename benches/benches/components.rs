//! Component benches: RESP request parsing and reply encoding, the allocator's
//! alloc/free path, and the local cache's hit, miss and admission paths.
//! Run: `cargo bench -p dmc-benches --bench components`.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dmc_engine::cache::{Fetched, LocalCache};
use dmc_engine::dht::ValueKind;
use dmc_resp::{Limits, Reply, parse_command};
use dmc_umo::alloc::Allocator;

fn resp(c: &mut Criterion) {
    let mut g = c.benchmark_group("resp");
    // 1000 pipelined `SET key:NNNNNNNNNNNN <32 bytes>` requests, as one read buffer.
    let mut wire = Vec::new();
    for i in 0..1000 {
        let key = format!("key:{i:012}");
        wire.extend_from_slice(
            format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$32\r\n", key.len()).as_bytes(),
        );
        wire.extend_from_slice(&[b'v'; 32]);
        wire.extend_from_slice(b"\r\n");
    }
    let limits = Limits::default();
    g.throughput(Throughput::Elements(1000));
    g.bench_function("parse_1000_pipelined_sets", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&wire[..]);
            let mut n = 0;
            while let Ok(Some(args)) = parse_command(&mut buf, &limits) {
                n += args.len();
            }
            assert_eq!(n, 3000);
        })
    });
    let value = Reply::Bulk(Bytes::from(vec![b'v'; 32]));
    let array = Reply::Array(
        (0..16)
            .map(|i| Reply::Bulk(Bytes::from(format!("value:{i}"))))
            .collect(),
    );
    let mut out = BytesMut::with_capacity(1 << 20);
    g.bench_function("encode_1000_bulk_replies", |b| {
        b.iter(|| {
            out.clear();
            for _ in 0..1000 {
                value.encode(2, &mut out);
            }
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode_16_element_array_resp3", |b| {
        b.iter(|| {
            out.clear();
            array.encode(3, &mut out);
        })
    });
    g.finish();
}

fn allocator(c: &mut Criterion) {
    let mut g = c.benchmark_group("allocator");
    g.throughput(Throughput::Elements(1000));
    // No grace period: frees are reusable at once, so the loop measures the free-list
    // path after the first round rather than the segment bump.
    let mut a = Allocator::new(1, 16 << 20, Duration::ZERO);
    a.add_region(1, 1 << 30, |_| false);
    let mut blocks = Vec::with_capacity(1000);
    g.bench_function("alloc_free_1000_60B_blocks", |b| {
        b.iter(|| {
            let now = Instant::now();
            for _ in 0..1000 {
                let (block, _) = a.alloc(60, false, now).expect("room");
                blocks.push(block);
            }
            for block in blocks.drain(..) {
                a.free(block, now);
            }
        })
    });
    g.finish();
}

fn local_cache(c: &mut Criterion) {
    let mut g = c.benchmark_group("local_cache");
    let cache = LocalCache::new(64 << 20);
    let keys: Vec<Vec<u8>> = (0..100_000)
        .map(|i| format!("key:{i:012}").into_bytes())
        .collect();
    let value = Bytes::from(vec![b'v'; 32]);
    for k in &keys {
        cache.put(0, k, ValueKind::String, value.clone(), None);
    }
    g.throughput(Throughput::Elements(1000));
    // The keys in the order they are asked for, side by side: a request's key is in
    // its connection's read buffer, not in one of 100 000 separate allocations (with
    // `keys[i]` read in place, each hit paid a cache miss of the bench's own).
    let asked: Vec<[u8; 16]> = (0..keys.len())
        .map(|n| {
            let mut k = [0u8; 16];
            k.copy_from_slice(&keys[n * 7919 % keys.len()]);
            k
        })
        .collect();
    let mut i = 0usize;
    g.bench_function("hit_1000", |b| {
        b.iter(|| {
            for _ in 0..1000 {
                i = (i + 1) % asked.len();
                assert!(cache.get(0, &asked[i], 0, 0.5).is_some());
            }
        })
    });
    g.bench_function("miss_1000", |b| {
        b.iter(|| {
            for n in 0..1000u32 {
                assert!(cache.get(1, &n.to_le_bytes(), 0, 0.5).is_none());
            }
        })
    });
    // Admission into a full cache: fills compete with sampled victims.
    let small = LocalCache::new(1 << 20);
    let mut n = 0u64;
    g.bench_function("admit_1000_into_full_cache", |b| {
        b.iter(|| {
            for _ in 0..1000 {
                n += 1;
                let key = n.to_le_bytes();
                let ticket = small.fill_ticket(0, &key);
                small.fill(
                    ticket,
                    0,
                    &key,
                    Fetched {
                        value: value.clone(),
                        kind: ValueKind::String,
                        expire_at: None,
                        lfu: (n % 16) as u8,
                        slot: None,
                    },
                );
            }
        })
    });
    g.finish();
}

criterion_group!(components, resp, allocator, local_cache);
criterion_main!(components);
