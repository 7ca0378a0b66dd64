//! The reply parser on arbitrary bytes (what a peer agent could send): never a panic,
//! never deeper than `MAX_DEPTH`; a reply it accepts encodes (RESP3) and parses back
//! to itself.

#![no_main]

use bytes::BytesMut;
use dmc_resp::{Limits, Reply, parse_reply};
use libfuzzer_sys::fuzz_target;

fn depth(r: &Reply) -> usize {
    // Iterative, like the parser: no recursion the input controls.
    let mut max = 0;
    let mut stack = vec![(r, 1usize)];
    while let Some((r, d)) = stack.pop() {
        max = max.max(d);
        match r {
            Reply::Array(v) | Reply::Set(v) | Reply::Push(v) => {
                stack.extend(v.iter().map(|x| (x, d + 1)))
            }
            Reply::Map(kv) => {
                for (k, v) in kv {
                    stack.push((k, d + 1));
                    stack.push((v, d + 1));
                }
            }
            _ => {}
        }
    }
    max
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_bulk: 4096,
        max_args: 256,
        max_inline: 1024,
        unauthenticated: false,
    };
    let mut buf = BytesMut::from(data);
    while let Ok(Some(reply)) = parse_reply(&mut buf, &limits) {
        assert!(depth(&reply) <= dmc_resp::MAX_DEPTH + 1);
        let mut out = BytesMut::new();
        reply.encode(3, &mut out);
        let again = parse_reply(&mut out, &Limits::default())
            .expect("our own encoding parses")
            .expect("complete");
        let mut out2 = BytesMut::new();
        again.encode(3, &mut out2);
        let mut out1 = BytesMut::new();
        reply.encode(3, &mut out1);
        assert_eq!(out1, out2, "a reply changed across a round trip");
    }
});
