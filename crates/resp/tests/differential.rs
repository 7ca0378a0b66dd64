//! Differential tests against the `redis-protocol` crate, an independent RESP
//! implementation: requests it encodes, split at random points and pipelined, parse to
//! the same arguments here; replies encoded here, in RESP2 and RESP3, decode there to
//! the frames Redis's reply rules call for, and parse back here to the same reply.

use bytes::BytesMut;
use dmc_resp::{Limits, Reply, format_double, parse_command, parse_reply};
use proptest::prelude::*;
use redis_protocol::resp2::decode::decode as decode2;
use redis_protocol::resp2::encode::encode as encode2;
use redis_protocol::resp2::types::OwnedFrame as F2;
use redis_protocol::resp3::decode::complete::decode as decode3;
use redis_protocol::resp3::types::{OwnedFrame as F3, VerbatimStringFormat};

fn request_frame(args: &[Vec<u8>]) -> F2 {
    F2::Array(args.iter().map(|a| F2::BulkString(a.clone())).collect())
}

fn encode_request(args: &[Vec<u8>]) -> Vec<u8> {
    let frame = request_frame(args);
    let mut buf = vec![0u8; 64 + args.iter().map(|a| a.len() + 32).sum::<usize>()];
    let n = encode2(&mut buf, &frame, false).expect("encodes");
    buf.truncate(n);
    buf
}

/// What a reply should decode to in RESP2.
fn as_resp2(r: &Reply) -> F2 {
    match r {
        Reply::Simple(s) => F2::SimpleString(s.as_bytes().to_vec()),
        Reply::Status(s) => F2::SimpleString(s.as_bytes().to_vec()),
        Reply::Error(e) => F2::Error(e.clone()),
        Reply::Int(i) => F2::Integer(*i),
        Reply::Bool(b) => F2::Integer(*b as i64),
        Reply::Bulk(b) | Reply::Verbatim(b) => F2::BulkString(b.to_vec()),
        Reply::Null | Reply::NullArray => F2::Null,
        Reply::Array(v) | Reply::Set(v) | Reply::Push(v) => {
            F2::Array(v.iter().map(as_resp2).collect())
        }
        Reply::Map(kv) => F2::Array(
            kv.iter()
                .flat_map(|(k, v)| [as_resp2(k), as_resp2(v)])
                .collect(),
        ),
        Reply::Double(d) => F2::BulkString(format_double(*d).into_bytes()),
        Reply::BigNumber(n) => F2::BulkString(n.as_bytes().to_vec()),
        Reply::Several(_) => unreachable!("the strategies make one frame per reply"),
    }
}

/// What a reply should decode to in RESP3.
fn as_resp3(r: &Reply) -> F3 {
    match r {
        Reply::Simple(s) => F3::SimpleString {
            data: s.as_bytes().to_vec(),
            attributes: None,
        },
        Reply::Status(s) => F3::SimpleString {
            data: s.as_bytes().to_vec(),
            attributes: None,
        },
        Reply::Error(e) => F3::SimpleError {
            data: e.clone(),
            attributes: None,
        },
        Reply::Int(i) => F3::Number {
            data: *i,
            attributes: None,
        },
        Reply::Bool(b) => F3::Boolean {
            data: *b,
            attributes: None,
        },
        Reply::Bulk(b) => F3::BlobString {
            data: b.to_vec(),
            attributes: None,
        },
        Reply::Verbatim(b) => F3::VerbatimString {
            data: b.to_vec(),
            format: VerbatimStringFormat::Text,
            attributes: None,
        },
        Reply::Null | Reply::NullArray => F3::Null,
        Reply::Array(v) => F3::Array {
            data: v.iter().map(as_resp3).collect(),
            attributes: None,
        },
        Reply::Push(v) => F3::Push {
            data: v.iter().map(as_resp3).collect(),
            attributes: None,
        },
        Reply::Set(v) => F3::Set {
            data: v.iter().map(as_resp3).collect(),
            attributes: None,
        },
        Reply::Map(kv) => F3::Map {
            data: kv.iter().map(|(k, v)| (as_resp3(k), as_resp3(v))).collect(),
            attributes: None,
        },
        Reply::Double(d) => F3::Double {
            data: format_double(*d).parse().expect("a number"),
            attributes: None,
        },
        Reply::BigNumber(n) => F3::BigNumber {
            data: n.as_bytes().to_vec(),
            attributes: None,
        },
        Reply::Several(_) => unreachable!("the strategies make one frame per reply"),
    }
}

fn leaf() -> impl Strategy<Value = Reply> {
    prop_oneof![
        Just(Reply::Simple("OK")),
        "[A-Za-z0-9]{1,12}".prop_map(Reply::Status),
        "[A-Za-z0-9 ]{0,20}".prop_map(|e| Reply::Error(format!("ERR {e}"))),
        any::<i64>().prop_map(Reply::Int),
        any::<bool>().prop_map(Reply::Bool),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| Reply::Bulk(b.into())),
        "[ -~]{0,30}".prop_map(|s| Reply::Verbatim(s.into_bytes().into())),
        Just(Reply::Null),
        Just(Reply::NullArray),
        (-1e12f64..1e12).prop_map(Reply::Double),
        "-?[1-9][0-9]{20,40}".prop_map(Reply::BigNumber),
    ]
}

fn reply() -> impl Strategy<Value = Reply> {
    leaf().prop_recursive(3, 40, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Reply::Array),
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Reply::Push),
            // Keys and set members unique, as the decoder's map and set require.
            proptest::collection::vec(inner, 0..6).prop_map(|vals| {
                Reply::Map(
                    vals.into_iter()
                        .enumerate()
                        .map(|(i, v)| (Reply::Bulk(format!("k{i}").into()), v))
                        .collect(),
                )
            }),
            (0usize..6).prop_map(|n| Reply::Set((0..n).map(|i| Reply::Int(i as i64)).collect())),
        ]
    })
}

proptest! {
    /// Several pipelined requests, encoded by redis-protocol and delivered in random
    /// chunks, parse to the same arguments, in order, with nothing left over.
    #[test]
    fn requests_match_redis_protocol(
        requests in proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..50), 1..6),
            1..5,
        ),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let wire: Vec<u8> = requests.iter().flat_map(|r| encode_request(r)).collect();
        // redis-protocol agrees on the first request's frame and length.
        let (frame, used) = decode2(&wire).unwrap().unwrap();
        prop_assert_eq!(&frame, &request_frame(&requests[0]));
        prop_assert_eq!(used, encode_request(&requests[0]).len());

        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
        points.push(wire.len());
        points.sort_unstable();
        let mut buf = BytesMut::new();
        let mut got: Vec<Vec<Vec<u8>>> = Vec::new();
        let mut from = 0;
        for p in points {
            buf.extend_from_slice(&wire[from..p]);
            from = p;
            while let Some(args) = parse_command(&mut buf, &Limits::default()).unwrap() {
                got.push(args.iter().map(|a| a.to_vec()).collect());
            }
        }
        prop_assert_eq!(got, requests);
        prop_assert!(buf.is_empty());
    }

    /// Every reply decodes in redis-protocol to the frame Redis's rules call for, in
    /// RESP2 and in RESP3, using exactly the bytes written.
    #[test]
    fn replies_decode_in_redis_protocol(r in reply()) {
        let mut out = BytesMut::new();
        r.encode(2, &mut out);
        let (frame, used) = decode2(&out).unwrap().expect("a complete RESP2 frame");
        prop_assert_eq!(frame, as_resp2(&r));
        prop_assert_eq!(used, out.len());

        let mut out = BytesMut::new();
        r.encode(3, &mut out);
        let (frame, used) = decode3(&out).unwrap().expect("a complete RESP3 frame");
        prop_assert_eq!(frame, as_resp3(&r));
        prop_assert_eq!(used, out.len());
    }

    /// Every reply encoded here parses back here to itself in RESP3 (RESP2 loses
    /// types, so it is checked through `as_resp2`), consuming exactly its bytes, and
    /// in pieces of any size.
    #[test]
    fn replies_parse_back(r in reply(), cut in any::<prop::sample::Index>()) {
        let mut out = BytesMut::new();
        r.encode(3, &mut out);
        let wire = out.clone();
        let got = parse_reply(&mut out, &Limits::default()).unwrap();
        prop_assert_eq!(got.as_ref(), Some(&resp3_roundtrip(&r)));
        prop_assert!(out.is_empty());

        let at = cut.index(wire.len());
        let mut part = BytesMut::from(&wire[..at]);
        prop_assert_eq!(parse_reply(&mut part, &Limits::default()).unwrap(), None);
        prop_assert_eq!(part.len(), at);

        let mut out = BytesMut::new();
        r.encode(2, &mut out);
        let got = parse_reply(&mut out, &Limits::default()).unwrap().expect("complete");
        let mut again = BytesMut::new();
        got.encode(2, &mut again);
        let (frame, _) = decode2(&again).unwrap().expect("a complete RESP2 frame");
        prop_assert_eq!(frame, as_resp2(&r));
    }
}

/// What a reply reads back as after a RESP3 round trip: the statuses Redis sends
/// most are kept as static strings, and both nulls are one `_`.
fn resp3_roundtrip(r: &Reply) -> Reply {
    match r {
        Reply::Status(s) if s == "OK" => Reply::ok(),
        Reply::Status(s) if s == "PONG" => Reply::Simple("PONG"),
        Reply::Status(s) if s == "QUEUED" => Reply::Simple("QUEUED"),
        Reply::NullArray => Reply::Null,
        Reply::Array(v) => Reply::Array(v.iter().map(resp3_roundtrip).collect()),
        Reply::Set(v) => Reply::Set(v.iter().map(resp3_roundtrip).collect()),
        Reply::Push(v) => Reply::Push(v.iter().map(resp3_roundtrip).collect()),
        Reply::Map(kv) => Reply::Map(
            kv.iter()
                .map(|(k, v)| (resp3_roundtrip(k), resp3_roundtrip(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}
