//! The inline write paths (`set_now`, `update_now`): on backends whose memory is in this
//! address space they write what `set` and `update` would, without awaiting; what they
//! cannot do that way they decline with nothing written, for the awaited path. The model
//! tests (`model.rs`) mix both paths at random; these pin down when each is taken.

mod common;

use common::Backend;
use dmc_dht::{Clock, SetCond, SetOptions};

/// Keys of one hash slot (one hash tag), so one partition serves them all.
const A: &[u8] = b"{inline}a";
const B: &[u8] = b"{inline}b";

async fn value_of(h: &common::Harness, key: &[u8]) -> Option<Vec<u8>> {
    h.dht.get(0, key).await.unwrap().map(|e| e.value.to_vec())
}

fn append(byte: u8) -> impl FnMut(Option<&[u8]>) -> Result<Vec<u8>, &'static str> {
    move |cur| {
        let mut v = cur.unwrap_or_default().to_vec();
        v.push(byte);
        Ok(v)
    }
}

#[tokio::test]
async fn inline_writes_land_on_in_process_backends() {
    for backend in [Backend::Local, Backend::Shm] {
        let h = common::open_default(backend).await;
        let opts = SetOptions::default();
        // No partition for the slot yet: creating one awaits.
        assert!(h.dht.set_now(0, A, b"v1", opts).is_none(), "{backend:?}");
        h.dht.set(0, A, b"v1", opts).await.unwrap();

        let out = h
            .dht
            .set_now(0, A, b"v2", opts)
            .expect("an overwrite goes inline");
        assert!(out.unwrap().written);
        assert_eq!(value_of(&h, A).await.as_deref(), Some(&b"v2"[..]));
        let out = h
            .dht
            .set_now(0, B, b"new", opts)
            .expect("an insert goes inline");
        assert!(out.unwrap().written);

        let done = h
            .dht
            .update_now(0, A, append(b'!'))
            .expect("an update goes inline");
        assert_eq!(done.unwrap(), Ok(()));
        assert_eq!(value_of(&h, A).await.as_deref(), Some(&b"v2!"[..]));
        let done = h
            .dht
            .update_now(0, b"{inline}c", append(b'1'))
            .expect("so does a new key");
        assert_eq!(done.unwrap(), Ok(()));
        assert_eq!(value_of(&h, b"{inline}c").await.as_deref(), Some(&b"1"[..]));

        assert_eq!(
            h.dht.key_count_db(0),
            3,
            "{backend:?}: inserts are counted once"
        );
    }
}

#[tokio::test]
async fn inline_writes_decline_what_would_wait_and_write_nothing() {
    let h = common::open_default(Backend::Local).await;
    let opts = SetOptions::default();
    h.dht.set(0, A, b"old", opts).await.unwrap();

    // NX, XX and GET answer from what they find: the awaited path does them.
    for cond in [SetCond::IfAbsent, SetCond::IfPresent] {
        let opts = SetOptions {
            cond,
            ..SetOptions::default()
        };
        assert!(h.dht.set_now(0, A, b"new", opts).is_none());
    }
    let get = SetOptions {
        get: true,
        ..SetOptions::default()
    };
    assert!(h.dht.set_now(0, A, b"new", get).is_none());

    // A value longer than a block is chained over several.
    let long = vec![7u8; 4 << 20];
    assert!(h.dht.set_now(0, A, &long, opts).is_none());
    assert_eq!(value_of(&h, A).await.as_deref(), Some(&b"old"[..]));

    // Replacing a chained value frees its chunks, which reads them first.
    h.dht.set(0, A, &long, opts).await.unwrap();
    assert!(h.dht.set_now(0, A, b"short", opts).is_none());
    assert!(h.dht.update_now(0, A, append(b'x')).is_none());
    assert_eq!(value_of(&h, A).await.map(|v| v.len()), Some(long.len()));

    // What the update refuses is answered, with nothing written.
    h.dht.set(0, B, b"kept", opts).await.unwrap();
    let refused = h
        .dht
        .update_now(0, B, |_| Err::<Vec<u8>, _>("ERR no"))
        .expect("answered inline");
    assert_eq!(refused.unwrap(), Err("ERR no"));
    assert_eq!(value_of(&h, B).await.as_deref(), Some(&b"kept"[..]));
}

#[tokio::test]
async fn inline_writes_leave_remote_memory_to_the_awaited_path() {
    let h = common::open_default(Backend::Rdma).await;
    let opts = SetOptions::default();
    h.dht.set(0, A, b"v1", opts).await.unwrap();
    assert!(h.dht.set_now(0, A, b"v2", opts).is_none());
    assert!(h.dht.update_now(0, A, append(b'x')).is_none());
    assert_eq!(value_of(&h, A).await.as_deref(), Some(&b"v1"[..]));
}

#[tokio::test]
async fn a_batch_at_one_time_sees_the_time_it_started_at() {
    let clock = dmc_dht::ManualClock::new(common::clock_start_ms());
    let start = clock.now_ms();
    let h = common::open(
        Backend::Local,
        dmc_dht::DhtConfig::default(),
        std::sync::Arc::new(clock.clone()),
        std::time::Duration::ZERO,
    )
    .await;
    let expiring_at = |at| SetOptions {
        expiry: dmc_dht::SetExpiry::At(at),
        ..SetOptions::default()
    };
    h.dht
        .set(0, A, b"old", expiring_at(start + 5))
        .await
        .unwrap();
    let mut found = None;
    let seen = h.dht.at_one_time(|| {
        // Past A's expiry, but the batch started before it: the update still finds
        // the old value, as every write of the batch would.
        clock.advance(10);
        h.dht.update_now(0, A, |cur| {
            found = cur.map(<[u8]>::to_vec);
            Ok::<_, ()>(b"new".to_vec())
        })
    });
    assert_eq!(seen.expect("inline").unwrap(), Ok(()));
    assert_eq!(found.as_deref(), Some(&b"old"[..]));
    // Outside a batch the time is the clock's own: the rewritten key kept its expiry
    // and is gone.
    assert_eq!(value_of(&h, A).await, None);
}
