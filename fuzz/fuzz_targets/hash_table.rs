//! The hash table on an embedded pool, driven by arbitrary sequences of SET (with NX,
//! XX and GET), GET, DEL and MSET over a small key space, checked after every step
//! against a `HashMap` model: every read returns exactly the model's value, and every
//! write's outcome is the model's.

#![no_main]

use std::collections::HashMap;
use std::sync::Arc;

use dmc_dht::{Dht, DhtConfig, Ownership, SetCond, SetExpiry, SetOptions, SystemClock};
use dmc_umo::{Pool, PoolConfig};
use libfuzzer_sys::fuzz_target;

fn key(k: u8) -> Vec<u8> {
    format!("fuzz:{}", k % 24).into_bytes()
}

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let pool = Pool::embedded(
            32 << 20,
            PoolConfig {
                replicas: 1,
                region_size: 8 << 20,
                segment_size: 1 << 20,
                ..PoolConfig::default()
            },
        )
        .await
        .unwrap();
        let dht = Dht::open(pool, DhtConfig::default(), Arc::new(SystemClock), Ownership::all(0, 1))
            .await
            .unwrap();
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut ops = data.chunks_exact(3);
        for (step, op) in ops.by_ref().enumerate().take(200) {
            let (kind, k, len) = (op[0] % 8, key(op[1]), usize::from(op[2]) * 3);
            let value: Vec<u8> = (0..len).map(|i| (i + step) as u8).collect();
            match kind {
                0..=2 => {
                    let cond = match kind {
                        1 => SetCond::IfAbsent,
                        2 => SetCond::IfPresent,
                        _ => SetCond::Always,
                    };
                    let opts = SetOptions {
                        cond,
                        expiry: SetExpiry::Clear,
                        get: op[2] & 1 == 1,
                        ..Default::default()
                    };
                    let out = dht.set(0, &k, &value, opts).await.unwrap();
                    let old = model.get(&k).cloned();
                    let should = match cond {
                        SetCond::IfAbsent => old.is_none(),
                        SetCond::IfPresent => old.is_some(),
                        _ => true,
                    };
                    assert_eq!(out.written, should, "step {step}");
                    if opts.get {
                        assert_eq!(out.old.map(|b| b.to_vec()), old, "step {step}");
                    }
                    if should {
                        model.insert(k, value);
                    }
                }
                3 | 4 => {
                    let got = dht.get(0, &k).await.unwrap().map(|e| e.value.to_vec());
                    assert_eq!(got, model.get(&k).cloned(), "step {step}");
                }
                5 => {
                    let existed = dht.delete(0, &k).await.unwrap();
                    assert_eq!(existed, model.remove(&k).is_some(), "step {step}");
                }
                _ => {
                    let other = key(op[2]);
                    let got = dht
                        .get_many(0, &[&k[..], &other[..]])
                        .await
                        .unwrap()
                        .into_iter()
                        .map(|e| e.map(|e| e.value.to_vec()))
                        .collect::<Vec<_>>();
                    assert_eq!(got, vec![model.get(&k).cloned(), model.get(&other).cloned()]);
                }
            }
        }
        for (k, v) in &model {
            let got = dht.get(0, k).await.unwrap().map(|e| e.value.to_vec());
            assert_eq!(got.as_ref(), Some(v));
        }
    });
});
