//! Misses answer nil and count once, on each path that settles them: a slot without a
//! table (`get` stops after the root read), `get_many`'s batch (a key whose
//! fingerprint neither bucket bears), and `get`.

mod common;

use common::Backend;
use dmc_dht::SetOptions;

#[tokio::test]
async fn misses_answer_nil_and_count_once() {
    for backend in [Backend::Local, Backend::Shm] {
        let h = common::open_default(backend).await;
        let d = &h.dht;
        let misses = || d.stats().misses;
        let m0 = misses();
        // No table yet for this hash slot.
        assert!(d.get(0, b"{none}a").await.unwrap().is_none(), "{backend:?}");
        assert_eq!(misses(), m0 + 1, "{backend:?}");
        let none: [&[u8]; 3] = [b"{none}a", b"{none}b", b"{none}c"];
        let got = d.get_many(0, &none).await.unwrap();
        assert!(got.iter().all(Option::is_none), "{backend:?}");
        assert_eq!(misses(), m0 + 4, "{backend:?}");

        // A table with one key: the absent keys of its slot are settled in the batch,
        // the present one is read.
        d.set(0, b"{one}k", b"v", SetOptions::default())
            .await
            .unwrap();
        let absent: Vec<Vec<u8>> = (0..20)
            .map(|i| format!("{{one}}absent{i}").into_bytes())
            .collect();
        let mut keys: Vec<&[u8]> = absent.iter().map(|k| &k[..]).collect();
        keys.push(b"{one}k");
        let got = d.get_many(0, &keys).await.unwrap();
        assert!(got[..20].iter().all(Option::is_none), "{backend:?}");
        let present = got[20].as_ref().map(|e| &e.value[..]);
        assert_eq!(present, Some(&b"v"[..]), "{backend:?}");
        assert_eq!(misses(), m0 + 24, "{backend:?}");
        assert!(d.get(0, b"{one}absent0").await.unwrap().is_none());
        assert_eq!(misses(), m0 + 25, "{backend:?}");
    }
}
