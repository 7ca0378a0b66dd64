//! Model-based tests: random sequences of set/get/delete/expire/evict on the table,
//! against a `HashMap`, on the `local`, `shm` and (emulated) `rdma` backends. Sets and
//! appends go through the inline paths (`set_now`, `update_now`) or the awaited ones,
//! at random, as the engine uses them: inline first, awaited when it declines.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::Backend;
use dmc_dht::{
    DhtConfig, DhtError, ManualClock, Policy, RedisPolicy, SetCond, SetExpiry, SetOptions, Ttl,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Set {
        key: u8,
        len: usize,
        cond: u8,
        ttl: Option<u64>,
        keep: bool,
        get: bool,
        /// Through `set_now` first.
        inline: bool,
    },
    /// A read-modify-write that appends `byte` to the string (`update`), keeping its
    /// expiry.
    Append {
        key: u8,
        byte: u8,
        inline: bool,
    },
    /// MSET / MSETNX: (key, value length) pairs, possibly repeating a key.
    SetMany {
        pairs: Vec<(u8, usize)>,
        nx: bool,
    },
    Get {
        key: u8,
    },
    GetMany {
        keys: Vec<u8>,
    },
    Del {
        key: u8,
    },
    Expire {
        key: u8,
        ttl: Option<u64>,
    },
    Advance {
        ms: u64,
    },
    Evict,
}

fn op(keys: u8) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..keys, 0usize..300, 0u8..3, proptest::option::of(1u64..5000), any::<bool>(), any::<bool>(), any::<bool>())
            .prop_map(|(key, len, cond, ttl, keep, get, inline)| Op::Set { key, len, cond, ttl, keep, get, inline }),
        1 => (0..keys, any::<u8>(), any::<bool>())
            .prop_map(|(key, byte, inline)| Op::Append { key, byte, inline }),
        1 => (proptest::collection::vec((0..keys, 0usize..200), 0..8), any::<bool>())
            .prop_map(|(pairs, nx)| Op::SetMany { pairs, nx }),
        3 => (0..keys).prop_map(|key| Op::Get { key }),
        1 => proptest::collection::vec(0..keys, 0..12).prop_map(|keys| Op::GetMany { keys }),
        1 => (0..keys).prop_map(|key| Op::Del { key }),
        1 => (0..keys, proptest::option::of(1u64..5000)).prop_map(|(key, ttl)| Op::Expire { key, ttl }),
        1 => (1u64..3000).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Evict),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

fn value(k: u8, len: usize, step: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (k as usize * 31 + step * 7 + i) as u8)
        .collect()
}

/// The model: key -> (value, expiry in unix ms).
#[derive(Default)]
struct Model(HashMap<Vec<u8>, (Vec<u8>, Option<u64>)>);

impl Model {
    fn live(&self, k: &[u8], now: u64) -> Option<&(Vec<u8>, Option<u64>)> {
        self.0.get(k).filter(|(_, exp)| exp.is_none_or(|e| now < e))
    }
}

fn run(backend: Backend, policy: RedisPolicy, ops: Vec<Op>) -> Result<(), TestCaseError> {
    run_grouped(backend, policy, 0, ops)
}

/// [`run`] on a table whose hash slots share partitions in groups of `2^group_bits`.
fn run_grouped(
    backend: Backend,
    policy: RedisPolicy,
    group_bits: u32,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let clock = ManualClock::new(t0());
        let config = DhtConfig {
            policy,
            buckets_per_subtable: 2,
            slot_group_bits: group_bits,
            ..DhtConfig::default()
        };
        let h = common::open(
            backend,
            config,
            Arc::new(clock.clone()),
            Duration::from_millis(0),
        )
        .await;
        let dht = h.dht.clone();
        let mut model = Model::default();
        for (step, op) in ops.into_iter().enumerate() {
            let now = t0() + clock_offset(&clock);
            match op {
                Op::Set {
                    key: k,
                    len,
                    cond,
                    ttl,
                    keep,
                    get,
                    inline,
                } => {
                    let kb = key(k);
                    let v = value(k, len, step);
                    let cond =
                        [SetCond::Always, SetCond::IfAbsent, SetCond::IfPresent][cond as usize];
                    let expiry = match (ttl, keep) {
                        (Some(t), _) => SetExpiry::At(now + t),
                        (None, true) => SetExpiry::Keep,
                        (None, false) => SetExpiry::Clear,
                    };
                    let opts = SetOptions {
                        cond,
                        expiry,
                        get,
                        ..Default::default()
                    };
                    let now_out = if inline {
                        dht.set_now(0, &kb, &v, opts)
                    } else {
                        None
                    };
                    let out = match now_out {
                        Some(out) => out.unwrap(),
                        None => dht.set(0, &kb, &v, opts).await.unwrap(),
                    };
                    let prev = model.live(&kb, now).cloned();
                    if get {
                        prop_assert_eq!(
                            out.old.as_deref(),
                            prev.as_ref().map(|p| &p.0[..]),
                            "SET GET returns the old value"
                        );
                    }
                    let should = match cond {
                        SetCond::Always => true,
                        SetCond::IfAbsent => prev.is_none(),
                        SetCond::IfPresent => prev.is_some(),
                    };
                    prop_assert_eq!(out.written, should, "NX/XX semantics");
                    if should {
                        let exp = match expiry {
                            SetExpiry::At(at) => Some(at),
                            SetExpiry::Keep => prev.and_then(|p| p.1),
                            SetExpiry::Clear => None,
                        };
                        model.0.insert(kb, (v, exp));
                    }
                }
                Op::Append {
                    key: k,
                    byte,
                    inline,
                } => {
                    let kb = key(k);
                    let append = |cur: Option<&[u8]>| -> Result<Vec<u8>, ()> {
                        let mut v = cur.unwrap_or_default().to_vec();
                        v.push(byte);
                        Ok(v)
                    };
                    let now_done = if inline {
                        dht.update_now(0, &kb, append)
                    } else {
                        None
                    };
                    match now_done {
                        Some(done) => done.unwrap().unwrap(),
                        None => dht.update(0, &kb, append).await.unwrap().unwrap(),
                    }
                    let (mut v, exp) = model.live(&kb, now).cloned().unwrap_or_default();
                    v.push(byte);
                    model.0.insert(kb, (v, exp));
                }
                Op::SetMany { pairs, nx } => {
                    let owned: Vec<(Vec<u8>, Vec<u8>)> = pairs
                        .iter()
                        .enumerate()
                        .map(|(i, (k, len))| (key(*k), value(*k, *len, step * 16 + i)))
                        .collect();
                    let refs: Vec<(&[u8], &[u8])> =
                        owned.iter().map(|(k, v)| (&k[..], &v[..])).collect();
                    let written = dht.set_many(0, &refs, nx).await.unwrap();
                    let any_live = owned.iter().any(|(k, _)| model.live(k, now).is_some());
                    prop_assert_eq!(written, !(nx && any_live), "MSETNX semantics");
                    if written {
                        for (k, v) in owned {
                            model.0.insert(k, (v, None));
                        }
                    }
                }
                Op::Get { key: k } => {
                    let kb = key(k);
                    let got = dht.get(0, &kb).await.unwrap();
                    let want = model.live(&kb, now);
                    prop_assert_eq!(
                        got.as_ref().map(|e| &e.value[..]),
                        want.map(|w| &w.0[..]),
                        "get {}",
                        k
                    );
                    if let (Some(g), Some(w)) = (got, want) {
                        prop_assert_eq!(g.expire_at, w.1);
                    }
                    let ttl = dht.ttl(0, &kb).await.unwrap();
                    let want_ttl = match model.live(&kb, now) {
                        None => Ttl::Missing,
                        Some((_, None)) => Ttl::Persistent,
                        Some((_, Some(at))) => Ttl::ExpiresAt(*at),
                    };
                    prop_assert_eq!(ttl, want_ttl);
                    // The owner reclaims an expired key it reads (lazy expiry).
                    if model.live(&kb, now).is_none() {
                        model.0.remove(&kb);
                    }
                }
                Op::GetMany { keys } => {
                    let names: Vec<Vec<u8>> = keys.iter().map(|k| key(*k)).collect();
                    let refs: Vec<&[u8]> = names.iter().map(|n| &n[..]).collect();
                    let got = dht.get_many(0, &refs).await.unwrap();
                    prop_assert_eq!(got.len(), names.len());
                    for (name, g) in names.iter().zip(&got) {
                        let want = model.live(name, now).map(|w| &w.0[..]);
                        prop_assert_eq!(g.as_ref().map(|e| &e.value[..]), want, "get_many");
                    }
                    for name in &names {
                        if model.live(name, now).is_none() {
                            model.0.remove(name);
                        }
                    }
                }
                Op::Del { key: k } => {
                    let kb = key(k);
                    let removed = dht.delete(0, &kb).await.unwrap();
                    prop_assert_eq!(removed, model.live(&kb, now).is_some());
                    model.0.remove(&kb);
                }
                Op::Expire { key: k, ttl } => {
                    let kb = key(k);
                    let existed = dht.expire(0, &kb, ttl.map(|t| now + t)).await.unwrap();
                    prop_assert_eq!(existed, model.live(&kb, now).is_some());
                    if existed {
                        if let Some(e) = model.0.get_mut(&kb) {
                            e.1 = ttl.map(|t| now + t);
                        }
                    } else {
                        model.0.remove(&kb);
                    }
                }
                Op::Advance { ms } => clock.advance(ms),
                Op::Evict => {
                    let victim = dht.evict_one().await.unwrap();
                    match victim {
                        Some((db, k)) => {
                            prop_assert_eq!(db, 0);
                            let entry = model.0.get(&k[..]).cloned();
                            prop_assert!(entry.is_some(), "evicted a key the model never had");
                            let (_, exp) = entry.unwrap();
                            let expired = exp.is_some_and(|e| now >= e);
                            let meta_has_ttl = if exp.is_some() { 1 } else { 0 };
                            prop_assert!(
                                expired
                                    || policy.eligible(dmc_dht::layout::SlotMeta::new(
                                        meta_has_ttl,
                                        0,
                                        0
                                    )),
                                "{} evicted a key it must not",
                                policy.name()
                            );
                            model.0.remove(&k[..]);
                        }
                        None => {
                            let evictable = model.0.values().any(|(_, exp)| {
                                exp.is_some_and(|e| now >= e)
                                    || policy.eligible(dmc_dht::layout::SlotMeta::new(
                                        exp.is_some() as u64,
                                        0,
                                        0,
                                    ))
                            });
                            prop_assert!(
                                !(policy.evicts() && evictable),
                                "{} found nothing to evict among {} keys",
                                policy.name(),
                                model.0.len()
                            );
                        }
                    }
                }
            }
        }
        // The counts INFO reports (keys= and expires=) match the keys the table holds.
        prop_assert_eq!(dht.key_count_db(0), model.0.len() as i64, "key count");
        prop_assert_eq!(
            dht.volatile_count_db(0),
            model.0.values().filter(|(_, exp)| exp.is_some()).count() as i64,
            "keys with a TTL"
        );
        // The table holds exactly the model's live keys.
        let now = t0() + clock_offset(&clock);
        for k in 0..=255u8 {
            let kb = key(k);
            let got = dht.get(0, &kb).await.unwrap();
            prop_assert_eq!(
                got.map(|e| e.value.to_vec()),
                model.live(&kb, now).map(|w| w.0.clone())
            );
        }
        // Visiting every slot's partition (KEYS, SCAN) finds every live key once, and a
        // slot's own scan (CLUSTER GETKEYSINSLOT) finds exactly its keys.
        let mut scanned = Vec::new();
        for slot in 0..dmc_dht::layout::HASH_SLOTS as u16 {
            scanned.extend(
                dht.scan_partition(slot)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|(_, k)| k.to_vec()),
            );
        }
        scanned.sort();
        let mut live: Vec<Vec<u8>> = (0..=255u8)
            .map(key)
            .filter(|k| model.live(k, now).is_some())
            .collect();
        live.sort();
        prop_assert_eq!(&scanned, &live, "every partition's keys");
        for k in &live {
            let slot = dmc_dht::hash::key_slot(k);
            let in_slot = dht.scan_slot(slot).await.unwrap();
            prop_assert!(
                in_slot
                    .iter()
                    .all(|(_, x)| dmc_dht::hash::key_slot(x) == slot)
            );
            prop_assert!(
                in_slot.iter().any(|(_, x)| x[..] == k[..]),
                "a key in its slot"
            );
        }
        Ok(())
    })
}

/// The test clock's start (after the pool's creation: `common::clock_start_ms`).
fn t0() -> u64 {
    common::clock_start_ms()
}

fn clock_offset(c: &ManualClock) -> u64 {
    use dmc_dht::Clock;
    c.now_ms() - t0()
}

fn policy() -> impl Strategy<Value = RedisPolicy> {
    proptest::sample::select(RedisPolicy::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn local_table_matches_model(policy in policy(), ops in proptest::collection::vec(op(60), 1..150)) {
        run(Backend::Local, policy, ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Hash slots sharing partitions (a small instance's table): the same model.
    #[test]
    fn grouped_table_matches_model(
        policy in policy(),
        group_bits in 1..=dmc_dht::layout::MAX_SLOT_GROUP_BITS,
        ops in proptest::collection::vec(op(60), 1..150),
    ) {
        run_grouped(Backend::Local, policy, group_bits, ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn shm_table_matches_model(policy in policy(), ops in proptest::collection::vec(op(60), 1..150)) {
        run(Backend::Shm, policy, ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    /// The same model over the `rdma` transport on the emulated fabric: every one-sided
    /// verb of the table is a work request checked against its registration.
    #[test]
    fn rdma_table_matches_model(policy in policy(), ops in proptest::collection::vec(op(60), 1..150)) {
        run(Backend::Rdma, policy, ops)?;
    }
}

/// Keys spread over 16 hash slots, so the index stays small next to the objects.
fn key16(i: u32) -> Vec<u8> {
    format!("{{t{}}}k{i}", i % 16).into_bytes()
}

/// Under `maxmemory`, sets evict what the policy allows and fail with OOM otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxmemory_evicts_or_refuses_per_policy() {
    for policy in RedisPolicy::ALL {
        let clock = ManualClock::new(t0());
        let h = common::open(
            Backend::Local,
            DhtConfig {
                policy,
                ..DhtConfig::default()
            },
            Arc::new(clock.clone()),
            Duration::ZERO,
        )
        .await;
        let dht = h.dht.clone();
        // Fill without a limit: half the keys with a TTL.
        for i in 0..2000u32 {
            let expiry = if i % 2 == 0 {
                SetExpiry::At(t0() + 3_600_000)
            } else {
                SetExpiry::Clear
            };
            dht.set(
                0,
                &key16(i),
                &[1u8; 100],
                SetOptions {
                    expiry,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        }
        // A quarter of the objects' bytes must go.
        let used = dht.used_memory();
        dht.set_maxmemory(used - 2000 * 128 / 4);
        let mut ooms = 0;
        for i in 2000..3000u32 {
            match dht
                .set(0, &key16(i), &[1u8; 100], SetOptions::default())
                .await
            {
                Ok(_) => {}
                Err(DhtError::OutOfMemory) => ooms += 1,
                Err(e) => panic!("{}: {e}", policy.name()),
            }
        }
        if policy.name().starts_with("allkeys") {
            // Like Redis, memory is checked before a write, so the last write (and a
            // subtable split it caused) may overshoot by a few KiB.
            assert!(
                dht.used_memory() <= dht.maxmemory() + (16 << 10),
                "{}: used {} stays under maxmemory {} ({:?})",
                policy.name(),
                dht.used_memory(),
                dht.maxmemory(),
                dht.stats()
            );
        }
        // Keys without a TTL survive every volatile policy.
        if policy.name().starts_with("volatile") {
            for i in (1..2000u32).step_by(2) {
                assert!(
                    dht.get(0, &key16(i)).await.unwrap().is_some(),
                    "{} evicted a persistent key",
                    policy.name()
                );
            }
        }
        match policy {
            RedisPolicy::NoEviction => assert_eq!(ooms, 1000, "noeviction refuses every write"),
            p if p.name().starts_with("allkeys") => {
                assert_eq!(ooms, 0, "{} always finds a victim", p.name())
            }
            _ => {} // volatile-*: OOM once the TTL keys are gone
        }
    }
}

/// Many keys in one table: subtables split repeatedly and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splits_keep_every_key() {
    for backend in [Backend::Local, Backend::Shm, Backend::Rdma] {
        let clock = ManualClock::new(t0());
        let h = common::open(
            backend,
            DhtConfig::default(),
            Arc::new(clock),
            Duration::from_millis(10),
        )
        .await;
        let dht = h.dht.clone();
        for i in 0..20_000u32 {
            dht.set(
                0,
                format!("{{tag}}:{i}").as_bytes(),
                format!("v{i}").as_bytes(),
                SetOptions::default(),
            )
            .await
            .unwrap();
        }
        assert!(
            dht.stats().splits > 100,
            "one hash slot holds all keys: it must split"
        );
        for i in 0..20_000u32 {
            let e = dht.get(0, format!("{{tag}}:{i}").as_bytes()).await.unwrap();
            assert_eq!(
                e.map(|e| e.value),
                Some(format!("v{i}").into()),
                "{backend:?} key {i}"
            );
        }
        assert_eq!(dht.key_count(), 20_000);
        let slot = dmc_dht::hash::key_slot(b"{tag}");
        assert_eq!(dht.count_in_slot(slot).await.unwrap(), 20_000);
        assert_eq!(dht.scan_slot(slot).await.unwrap().len(), 20_000);
    }
}

/// Sets racing splits: 64 writes in flight into one hash slot, so subtables split while
/// other sets are filling them. Every acknowledged key must be found afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sets_racing_splits_lose_nothing() {
    use futures::StreamExt;
    for backend in [Backend::Local, Backend::Shm, Backend::Rdma] {
        let h = common::open(
            backend,
            DhtConfig::default(),
            Arc::new(ManualClock::new(t0())),
            Duration::from_millis(10),
        )
        .await;
        let dht = h.dht.clone();
        let n = 30_000u32;
        let mut sets = futures::stream::iter(0..n)
            .map(|i| {
                let dht = dht.clone();
                async move {
                    dht.set(
                        0,
                        format!("{{hot}}:{i}").as_bytes(),
                        &i.to_le_bytes(),
                        SetOptions::default(),
                    )
                    .await
                }
            })
            .buffer_unordered(64);
        while let Some(r) = sets.next().await {
            if let Err(e) = r {
                panic!(
                    "{backend:?}: a set failed: {e:?} (table counters {:?})",
                    dht.stats()
                );
            }
        }
        let mut missing = Vec::new();
        for i in 0..n {
            if dht
                .get(0, format!("{{hot}}:{i}").as_bytes())
                .await
                .unwrap()
                .is_none()
            {
                missing.push(i);
            }
        }
        assert!(
            missing.is_empty(),
            "{backend:?}: {} keys lost, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
        assert_eq!(dht.key_count(), n as i64);
    }
}

/// The maintenance task reclaims expired keys nobody reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_reclaims_expired_keys() {
    let clock = ManualClock::new(t0());
    let h = common::open(
        Backend::Local,
        DhtConfig::default(),
        Arc::new(clock.clone()),
        Duration::ZERO,
    )
    .await;
    let dht = h.dht.clone();
    for i in 0..300u32 {
        let expiry = SetExpiry::At(t0() + 1000);
        dht.set(
            0,
            format!("{{m}}{i}").as_bytes(),
            b"v",
            SetOptions {
                expiry,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
    dht.set(0, b"{m}keep", b"v", SetOptions::default())
        .await
        .unwrap();
    clock.advance(2000);
    let task = dht.spawn_maintenance(Duration::from_millis(5));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while dht.key_count() > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "expired keys still present: {}",
            dht.key_count()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(dht.get(0, b"{m}keep").await.unwrap().is_some());
    task.abort();
}

/// `update` (INCR's one-probe read-modify-write): creates an absent key, sees the
/// current value, keeps the key's expiry, writes nothing when the closure refuses, and
/// keeps every key through the splits of many updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_reads_and_replaces_in_one_probe() {
    for backend in [Backend::Local, Backend::Shm] {
        let clock = ManualClock::new(t0());
        let h = common::open(
            backend,
            DhtConfig::default(),
            Arc::new(clock.clone()),
            Duration::from_millis(10),
        )
        .await;
        let dht = h.dht.clone();
        let incr = |cur: Option<&[u8]>| -> Result<Vec<u8>, &'static str> {
            let n: i64 = match cur {
                Some(v) => std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or("not a number")?,
                None => 0,
            };
            Ok((n + 1).to_string().into_bytes())
        };
        for i in 0..2000u32 {
            for _ in 0..3 {
                dht.update(0, format!("{{c}}{i}").as_bytes(), incr)
                    .await
                    .unwrap()
                    .unwrap();
            }
        }
        for i in (0..2000u32).step_by(97) {
            let v = dht.get(0, format!("{{c}}{i}").as_bytes()).await.unwrap();
            assert_eq!(
                v.map(|e| e.value.to_vec()),
                Some(b"3".to_vec()),
                "{backend:?}"
            );
        }
        // A refusal writes nothing.
        dht.set(0, b"text", b"abc", SetOptions::default())
            .await
            .unwrap();
        assert_eq!(
            dht.update(0, b"text", incr).await.unwrap(),
            Err("not a number")
        );
        assert_eq!(
            dht.get(0, b"text").await.unwrap().unwrap().value,
            &b"abc"[..]
        );
        // The expiry stays.
        dht.set(
            0,
            b"ttl",
            b"1",
            SetOptions {
                expiry: dmc_dht::SetExpiry::At(t0() + 10_000),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        dht.update(0, b"ttl", incr).await.unwrap().unwrap();
        assert_eq!(
            dht.ttl(0, b"ttl").await.unwrap(),
            dmc_dht::Ttl::ExpiresAt(t0() + 10_000)
        );
        assert_eq!(dht.get(0, b"ttl").await.unwrap().unwrap().value, &b"2"[..]);
    }
}
