//! The request parser on arbitrary bytes, delivered in arbitrary pieces: never a
//! panic; the resumable parser a connection uses returns exactly what the stateless
//! parser returns on the whole input; nothing is consumed by an incomplete request.

#![no_main]

use bytes::BytesMut;
use dmc_resp::{Limits, RequestParser, parse_command};
use libfuzzer_sys::fuzz_target;

fn limits(unauthenticated: bool) -> Limits {
    // Small limits, so the fuzzer reaches them; before AUTH, Redis's tighter ones.
    Limits {
        max_bulk: 4096,
        max_args: 64,
        max_inline: 1024,
        unauthenticated,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, input)) = data.split_first() else {
        return;
    };
    // The first byte's low bit picks the limits before AUTH; the byte, the piece size.
    let unauthenticated = step & 1 == 1;
    let step = usize::from(step).max(1);
    // The whole input at once, stateless.
    let mut whole = BytesMut::from(input);
    let mut expected = Vec::new();
    let mut whole_error = None;
    loop {
        let before = whole.len();
        match parse_command(&mut whole, &limits(unauthenticated)) {
            Ok(Some(args)) => expected.push(args),
            Ok(None) => {
                assert_eq!(whole.len(), before, "an incomplete request consumed bytes");
                break;
            }
            Err(e) => {
                whole_error = Some(e);
                break;
            }
        }
    }
    // The same bytes in pieces of `step`, through one resumable parser.
    let mut parser = RequestParser::default();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    let mut piece_error = None;
    'feed: for chunk in input.chunks(step) {
        buf.extend_from_slice(chunk);
        loop {
            match parser.parse(&mut buf, &limits(unauthenticated)) {
                Ok(Some(args)) => got.push(args),
                Ok(None) => break,
                Err(e) => {
                    piece_error = Some(e);
                    break 'feed;
                }
            }
        }
    }
    if whole_error.is_none() && piece_error.is_none() {
        assert_eq!(got, expected);
    } else {
        // Requests before the error agree; the piecewise parser may stop earlier
        // only when the error shows in a prefix (a limit seen before the rest came).
        let n = got.len().min(expected.len());
        assert_eq!(got[..n], expected[..n]);
    }
});
