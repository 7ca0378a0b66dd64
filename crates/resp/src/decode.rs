//! The reply parser: what another Redis-speaking process (a peer agent a write was
//! forwarded to) answered, RESP2 or RESP3, back into a [`Reply`].
//!
//! Like the request parser it never consumes a partial reply (`Ok(None)` until the rest
//! arrives) and checks every declared length against [`Limits`]. It walks nested
//! aggregates with an explicit stack, never recursion, and refuses nesting deeper than
//! [`MAX_DEPTH`], so a peer cannot make it (or the encoder that relays its reply)
//! recurse or allocate without bound.

use bytes::{Bytes, BytesMut};

use crate::Limits;
use crate::reply::Reply;

/// Deepest aggregate nesting accepted in a reply (Redis's own replies nest at most a
/// few levels: CLUSTER SHARDS, XINFO STREAM FULL).
pub const MAX_DEPTH: usize = 64;

/// A reply that breaks the protocol; the connection it came on cannot be trusted for
/// another reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("unknown reply type byte {0:#04x}")]
    UnknownType(u8),
    #[error("invalid length or number in a reply")]
    BadNumber,
    #[error("a reply nests aggregates deeper than {MAX_DEPTH}")]
    TooDeep,
    #[error("a reply's length exceeds the protocol limits")]
    TooLong,
    #[error("a bulk reply does not end with CRLF")]
    MissingCrlf,
}

/// An aggregate being filled: its kind, the items still expected, and those read.
struct Open {
    kind: u8,
    left: usize,
    items: Vec<Reply>,
}

impl Open {
    fn close(self) -> Reply {
        match self.kind {
            b'%' => {
                let mut pairs = Vec::with_capacity(self.items.len() / 2);
                let mut it = self.items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                Reply::Map(pairs)
            }
            b'~' => Reply::Set(self.items),
            b'>' => Reply::Push(self.items),
            _ => Reply::Array(self.items),
        }
    }
}

fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn number(digits: &[u8]) -> Result<i64, ReplyError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(ReplyError::BadNumber)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Parses one reply off the front of `buf`. `Ok(None)`: incomplete, nothing consumed.
pub fn parse_reply(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Reply>, ReplyError> {
    let mut stack: Vec<Open> = Vec::new();
    let mut pos = 0;
    loop {
        let Some(&kind) = buf.get(pos) else {
            return Ok(None);
        };
        let Some(end) = line_end(buf, pos + 1) else {
            if buf.len() - pos > limits.max_inline {
                return Err(ReplyError::TooLong);
            }
            return Ok(None);
        };
        let line = &buf[pos + 1..end];
        let mut next = end + 2;
        let value = match kind {
            b'+' => Some(match line {
                b"OK" => Reply::ok(),
                b"PONG" => Reply::Simple("PONG"),
                b"QUEUED" => Reply::Simple("QUEUED"),
                _ => Reply::Status(text(line)),
            }),
            b'-' => Some(Reply::Error(text(line))),
            b':' => Some(Reply::Int(number(line)?)),
            b'_' => Some(Reply::Null),
            b'#' => Some(Reply::Bool(line == b"t")),
            b',' => Some(Reply::Double(
                std::str::from_utf8(line)
                    .ok()
                    .and_then(|s| match s {
                        "inf" => Some(f64::INFINITY),
                        "-inf" => Some(f64::NEG_INFINITY),
                        _ => s.parse().ok(),
                    })
                    .ok_or(ReplyError::BadNumber)?,
            )),
            b'(' => Some(Reply::BigNumber(text(line))),
            b'$' | b'=' | b'!' => {
                let len = number(line)?;
                if len < 0 {
                    Some(Reply::Null)
                } else {
                    let len = usize::try_from(len).map_err(|_| ReplyError::TooLong)?;
                    if len > limits.max_bulk {
                        return Err(ReplyError::TooLong);
                    }
                    let stop = next + len;
                    if buf.len() < stop + 2 {
                        return Ok(None);
                    }
                    if &buf[stop..stop + 2] != b"\r\n" {
                        return Err(ReplyError::MissingCrlf);
                    }
                    let body = Bytes::copy_from_slice(&buf[next..stop]);
                    next = stop + 2;
                    Some(match kind {
                        b'!' => Reply::Error(text(&body)),
                        // Verbatim strings carry a three-letter format and a colon.
                        b'=' => Reply::Verbatim(body.slice(body.len().min(4)..)),
                        _ => Reply::Bulk(body),
                    })
                }
            }
            b'*' | b'%' | b'~' | b'>' => {
                let n = number(line)?;
                if n < 0 {
                    Some(Reply::NullArray)
                } else {
                    let n = usize::try_from(n).map_err(|_| ReplyError::TooLong)?;
                    let items = if kind == b'%' {
                        n.checked_mul(2)
                    } else {
                        Some(n)
                    }
                    .filter(|&items| items <= limits.max_args)
                    .ok_or(ReplyError::TooLong)?;
                    if items == 0 {
                        Some(
                            Open {
                                kind,
                                left: 0,
                                items: Vec::new(),
                            }
                            .close(),
                        )
                    } else {
                        if stack.len() >= MAX_DEPTH {
                            return Err(ReplyError::TooDeep);
                        }
                        stack.push(Open {
                            kind,
                            left: items,
                            items: Vec::with_capacity(items.min(1024)),
                        });
                        None
                    }
                }
            }
            other => return Err(ReplyError::UnknownType(other)),
        };
        pos = next;
        let mut done = value;
        // Hand a finished value to its aggregate, closing every aggregate it fills.
        while let Some(v) = done.take() {
            match stack.last_mut() {
                None => {
                    let _ = buf.split_to(pos);
                    return Ok(Some(v));
                }
                Some(top) => {
                    top.items.push(v);
                    top.left -= 1;
                    if top.left == 0 {
                        done = stack.pop().map(Open::close);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(wire: &[u8]) -> Result<Option<Reply>, ReplyError> {
        parse_reply(&mut BytesMut::from(wire), &Limits::default())
    }

    #[test]
    fn replies_of_every_kind_decode() {
        let cases: Vec<(&[u8], Reply)> = vec![
            (b"+OK\r\n", Reply::ok()),
            (b"+FOO\r\n", Reply::Status("FOO".into())),
            (
                b"-MOVED 1 127.0.0.1:7000\r\n",
                Reply::err("MOVED 1 127.0.0.1:7000"),
            ),
            (b":-3\r\n", Reply::Int(-3)),
            (b"$-1\r\n", Reply::Null),
            (b"*-1\r\n", Reply::NullArray),
            (b"$3\r\na\r\n\r\n", Reply::bulk(&b"a\r\n"[..])),
            (
                b"*2\r\n*1\r\n:1\r\n$0\r\n\r\n",
                Reply::Array(vec![Reply::Array(vec![Reply::Int(1)]), Reply::bulk("")]),
            ),
            (
                b"%1\r\n+a\r\n,1.5\r\n",
                Reply::Map(vec![(Reply::Status("a".into()), Reply::Double(1.5))]),
            ),
            (b"*0\r\n", Reply::Array(vec![])),
            (b"_\r\n", Reply::Null),
            (b"#t\r\n", Reply::Bool(true)),
            (
                b"=7\r\ntxt:abc\r\n",
                Reply::Verbatim(Bytes::from_static(b"abc")),
            ),
        ];
        for (wire, want) in cases {
            let mut buf = BytesMut::from(wire);
            let got = parse_reply(&mut buf, &Limits::default());
            assert_eq!(got, Ok(Some(want)), "{}", String::from_utf8_lossy(wire));
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn a_partial_reply_waits_and_consumes_nothing() {
        let whole = b"*2\r\n$5\r\nhello\r\n:7\r\n";
        for cut in 0..whole.len() {
            let mut buf = BytesMut::from(&whole[..cut]);
            assert_eq!(
                parse_reply(&mut buf, &Limits::default()),
                Ok(None),
                "cut {cut}"
            );
            assert_eq!(buf.len(), cut);
        }
        let mut buf = BytesMut::from(&b"+OK\r\n:1\r\n"[..]);
        assert_eq!(
            parse_reply(&mut buf, &Limits::default()),
            Ok(Some(Reply::ok()))
        );
        assert_eq!(
            parse_reply(&mut buf, &Limits::default()),
            Ok(Some(Reply::Int(1)))
        );
    }

    #[test]
    fn hostile_replies_are_refused() {
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert_eq!(parse(deep.as_bytes()), Err(ReplyError::TooDeep));
        let ok_depth = "*1\r\n".repeat(MAX_DEPTH) + ":1\r\n";
        assert!(matches!(parse(ok_depth.as_bytes()), Ok(Some(_))));
        assert_eq!(parse(b"*99999999999\r\n"), Err(ReplyError::TooLong));
        assert_eq!(parse(b"$99999999999\r\n"), Err(ReplyError::TooLong));
        assert_eq!(parse(b":x\r\n"), Err(ReplyError::BadNumber));
        assert_eq!(parse(b"?\r\n"), Err(ReplyError::UnknownType(b'?')));
        assert_eq!(parse(b"$1\r\nab\r\n"), Err(ReplyError::MissingCrlf));
    }
}
