//! The memory node's frame splitter and request/response decoders on arbitrary bytes
//! (what any peer can send a node, or a node its clients): never a panic or an
//! allocation beyond the bytes present; whatever decodes encodes back to the same
//! bytes' meaning (decode(encode(x)) == x).

#![no_main]

use bytes::BytesMut;
use dmc_verbs::wire::{self, Request, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = wire::split_frame(&mut buf, 1 << 20) {
        if let Ok(req) = Request::decode(frame.tag, frame.payload.clone()) {
            let mut out = BytesMut::new();
            req.encode(frame.id, &mut out);
            let again = wire::split_frame(&mut out, u64::MAX).unwrap().unwrap();
            assert_eq!(again.id, frame.id);
            assert_eq!(Request::decode(again.tag, again.payload).unwrap(), req);
        }
        if let Ok(resp) = Response::decode(frame.tag, frame.payload) {
            let mut out = BytesMut::new();
            resp.encode(frame.id, &mut out);
            let again = wire::split_frame(&mut out, u64::MAX).unwrap().unwrap();
            assert_eq!(Response::decode(again.tag, again.payload).unwrap(), resp);
        }
    }
});
