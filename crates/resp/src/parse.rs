//! The request parser: arrays of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) and
//! inline commands (`GET k\r\n`), as Redis's `processMultibulkBuffer` and
//! `processInlineBuffer` accept them.
//!
//! [`parse_command`] never consumes a partial request: it returns `Ok(None)` and leaves
//! the buffer as it is until the rest arrives, so a request split across reads at any
//! point parses the same. Arguments are slices of the received buffer (no copy). Every
//! length is checked against [`Limits`] before anything waits for it, so a declared
//! 1 GiB bulk is refused at once instead of buffered.

use bytes::{Bytes, BytesMut};

/// Protocol limits, Redis's defaults.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `proto-max-bulk-len`.
    pub max_bulk: usize,
    /// Most arguments in one request.
    pub max_args: usize,
    /// Longest inline request or length line (`PROTO_INLINE_MAX_SIZE`).
    pub max_inline: usize,
    /// The client has not authenticated: Redis's tighter limits apply (at most
    /// [`UNAUTHENTICATED_MAX_ARGS`] arguments of [`UNAUTHENTICATED_MAX_BULK`] bytes,
    /// CVE-2021-32675).
    pub unauthenticated: bool,
}

/// Most arguments in a request before AUTH (Redis's `authRequired` check).
pub const UNAUTHENTICATED_MAX_ARGS: i64 = 10;
/// Longest argument in a request before AUTH.
pub const UNAUTHENTICATED_MAX_BULK: i64 = 16 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk: 512 << 20,
            max_args: 1024 * 1024,
            max_inline: 64 << 10,
            unauthenticated: false,
        }
    }
}

/// A request that breaks the protocol. The connection is answered with the error and
/// closed, as Redis does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("ERR Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    #[error("ERR Protocol error: invalid bulk length")]
    InvalidBulkLength,
    #[error("ERR Protocol error: expected '$', got '{}'", *.0 as char)]
    ExpectedDollar(u8),
    #[error("ERR Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("ERR Protocol error: too big inline request")]
    TooBigInline,
    #[error("ERR Protocol error: too big mbulk count string")]
    TooBigMbulkCount,
    #[error("ERR Protocol error: too big bulk count string")]
    TooBigBulkCount,
    #[error("ERR Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    #[error("ERR Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
}

/// Finds the `\r\n` ending the line that starts at `from`.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn parse_len(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    let (neg, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add((d - b'0') as i64)?;
    }
    Some(if neg { -n } else { n })
}

/// Parses one request off the front of `buf` (no state kept between calls: a request
/// that arrives in pieces is scanned again from its start each time; a connection uses
/// a [`RequestParser`]). `Ok(None)`: incomplete, nothing consumed. `Ok(Some(args))`:
/// consumed; an empty `args` is an empty request (Redis ignores those).
pub fn parse_command(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    RequestParser::default().parse(buf, limits)
}

/// A connection's request parser. It remembers how far into a multibulk request it
/// got, so a large request arriving over many reads is scanned once, not from its
/// start on every read (which made a 1 M-argument request cost quadratic time). The
/// buffer must keep its front until the request completes: only appends between calls.
#[derive(Debug, Default)]
pub struct RequestParser {
    /// Arguments declared by the multibulk request in progress (0: between requests).
    expected: usize,
    /// Where the parsed arguments of the request in progress lie in the buffer.
    spans: Vec<(usize, usize)>,
    /// Where parsing resumes: the next argument's `$` line.
    pos: usize,
    /// Bytes examined, for the test that parsing is linear.
    #[cfg(test)]
    scanned: usize,
}

impl RequestParser {
    /// Parses one request off the front of `buf`. `Ok(None)`: incomplete, nothing
    /// consumed (call again once more bytes were appended). `Ok(Some(args))`: consumed;
    /// an empty `args` is an empty request (Redis ignores those).
    pub fn parse(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        if self.expected > 0 {
            return self.resume(buf, limits);
        }
        match buf.first() {
            None => Ok(None),
            Some(b'*') => self.start_multibulk(buf, limits),
            Some(_) => parse_inline(buf, limits),
        }
    }

    fn line_end(&mut self, buf: &[u8], from: usize) -> Option<usize> {
        let end = line_end(buf, from);
        #[cfg(test)]
        {
            self.scanned += end.map_or(buf.len(), |e| e + 2).saturating_sub(from);
        }
        end
    }

    fn start_multibulk(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let Some(end) = self.line_end(buf, 1) else {
            if buf.len() > limits.max_inline {
                return Err(ProtocolError::TooBigMbulkCount);
            }
            return Ok(None);
        };
        let n = parse_len(&buf[1..end]).ok_or(ProtocolError::InvalidMultibulkLength)?;
        if n > limits.max_args as i64 {
            return Err(ProtocolError::InvalidMultibulkLength);
        }
        if limits.unauthenticated && n > UNAUTHENTICATED_MAX_ARGS {
            return Err(ProtocolError::UnauthenticatedMultibulkLength);
        }
        if n <= 0 {
            let _ = buf.split_to(end + 2);
            return Ok(Some(Vec::new()));
        }
        self.expected = n as usize;
        self.pos = end + 2;
        self.spans.clear();
        self.resume(buf, limits)
    }

    fn resume(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        while self.spans.len() < self.expected {
            let pos = self.pos;
            let Some(&first) = buf.get(pos) else {
                return Ok(None);
            };
            if first != b'$' {
                return Err(ProtocolError::ExpectedDollar(first));
            }
            let Some(end) = self.line_end(buf, pos + 1) else {
                if buf.len() - pos > limits.max_inline {
                    return Err(ProtocolError::TooBigBulkCount);
                }
                return Ok(None);
            };
            let len = parse_len(&buf[pos + 1..end]).ok_or(ProtocolError::InvalidBulkLength)?;
            if len < 0 || len as u64 > limits.max_bulk as u64 {
                return Err(ProtocolError::InvalidBulkLength);
            }
            if limits.unauthenticated && len > UNAUTHENTICATED_MAX_BULK {
                return Err(ProtocolError::UnauthenticatedBulkLength);
            }
            let start = end + 2;
            let stop = start + len as usize;
            if buf.len() < stop + 2 {
                return Ok(None);
            }
            self.spans.push((start, stop));
            self.pos = stop + 2;
        }
        let frame = buf.split_to(self.pos).freeze();
        let args = self.spans.iter().map(|&(a, b)| frame.slice(a..b)).collect();
        self.expected = 0;
        self.pos = 0;
        self.spans.clear();
        if self.spans.capacity() > 1024 {
            self.spans = Vec::new();
        }
        Ok(Some(args))
    }
}

fn parse_inline(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.max_inline {
            return Err(ProtocolError::TooBigInline);
        }
        return Ok(None);
    };
    let line = buf.split_to(nl + 1);
    let mut text = &line[..nl];
    if text.last() == Some(&b'\r') {
        text = &text[..text.len() - 1];
    }
    split_args(text).map(Some)
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Splits an inline request like Redis's `sdssplitargs`: spaces separate arguments,
/// `"..."` allows escapes (`\n`, `\xHH`, ...), `'...'` allows `\'`.
fn split_args(line: &[u8]) -> Result<Vec<Bytes>, ProtocolError> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            return Ok(args);
        }
        let mut cur = Vec::new();
        let (mut in_dq, mut in_sq) = (false, false);
        loop {
            if in_dq {
                match line.get(i) {
                    None => return Err(ProtocolError::UnbalancedQuotes),
                    Some(b'\\')
                        if line.get(i + 1) == Some(&b'x')
                            && line.get(i + 2).and_then(|b| hex(*b)).is_some()
                            && line.get(i + 3).and_then(|b| hex(*b)).is_some() =>
                    {
                        cur.push(
                            hex(line[i + 2]).unwrap_or(0) * 16 + hex(line[i + 3]).unwrap_or(0),
                        );
                        i += 3;
                    }
                    Some(b'\\') if i + 1 < line.len() => {
                        i += 1;
                        cur.push(match line[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 8,
                            b'a' => 7,
                            c => c,
                        });
                    }
                    Some(b'"') => {
                        if line.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                            return Err(ProtocolError::UnbalancedQuotes);
                        }
                        i += 1;
                        break;
                    }
                    Some(&c) => cur.push(c),
                }
            } else if in_sq {
                match line.get(i) {
                    None => return Err(ProtocolError::UnbalancedQuotes),
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        cur.push(b'\'');
                    }
                    Some(b'\'') => {
                        if line.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                            return Err(ProtocolError::UnbalancedQuotes);
                        }
                        i += 1;
                        break;
                    }
                    Some(&c) => cur.push(c),
                }
            } else {
                match line.get(i) {
                    None => break,
                    Some(c) if c.is_ascii_whitespace() => break,
                    Some(b'"') => in_dq = true,
                    Some(b'\'') => in_sq = true,
                    Some(&c) => cur.push(c),
                }
            }
            i += 1;
        }
        args.push(Bytes::from(cur));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &[u8]) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        parse_command(&mut BytesMut::from(s), &Limits::default())
    }

    fn encode(args: &[Vec<u8>]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// Before AUTH, Redis's limits: 10 arguments, 16 KiB each (CVE-2021-32675).
    #[test]
    fn an_unauthenticated_request_is_held_to_redis_limits() {
        let before_auth = Limits {
            unauthenticated: true,
            ..Limits::default()
        };
        let many: Vec<Vec<u8>> = (0..11).map(|i| format!("a{i}").into_bytes()).collect();
        assert_eq!(
            parse_command(&mut BytesMut::from(&encode(&many)[..]), &before_auth),
            Err(ProtocolError::UnauthenticatedMultibulkLength)
        );
        // Refused from the length line alone, before the bulk is buffered.
        assert_eq!(
            parse_command(
                &mut BytesMut::from(&b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$16385\r\n"[..]),
                &before_auth
            ),
            Err(ProtocolError::UnauthenticatedBulkLength)
        );
        let fits = encode(&[b"AUTH".to_vec(), vec![b'p'; 16384]]);
        assert!(matches!(
            parse_command(&mut BytesMut::from(&fits[..]), &before_auth),
            Ok(Some(_))
        ));
        assert!(matches!(
            parse_command(&mut BytesMut::from(&encode(&many)[..]), &Limits::default()),
            Ok(Some(_))
        ));
    }

    #[test]
    fn multibulk_and_inline() {
        assert_eq!(
            parse(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").unwrap().unwrap(),
            vec![Bytes::from("GET"), Bytes::from("k")]
        );
        assert_eq!(
            parse(b"SET k \"a b\\n\"\r\n").unwrap().unwrap(),
            vec![Bytes::from("SET"), Bytes::from("k"), Bytes::from("a b\n")]
        );
        assert_eq!(
            parse(b"PING\n").unwrap().unwrap(),
            vec![Bytes::from("PING")]
        );
        assert_eq!(parse(b"\r\n").unwrap().unwrap(), Vec::<Bytes>::new());
        assert_eq!(parse(b"*0\r\n").unwrap().unwrap(), Vec::<Bytes>::new());
        assert_eq!(parse(b"*2\r\n$3\r\nGET\r\n$1\r\n").unwrap(), None);
    }

    #[test]
    fn redis_error_texts() {
        assert_eq!(
            parse(b"*x\r\n").unwrap_err().to_string(),
            "ERR Protocol error: invalid multibulk length"
        );
        assert_eq!(
            parse(b"*1\r\n$-5\r\n").unwrap_err().to_string(),
            "ERR Protocol error: invalid bulk length"
        );
        assert_eq!(
            parse(b"*1\r\n$1073741824\r\n").unwrap_err(),
            ProtocolError::InvalidBulkLength,
            "1 GiB refused at once"
        );
        assert_eq!(
            parse(b"*1\r\n:1\r\n").unwrap_err().to_string(),
            "ERR Protocol error: expected '$', got ':'"
        );
        assert_eq!(
            parse(b"SET \"k\r\n").unwrap_err().to_string(),
            "ERR Protocol error: unbalanced quotes in request"
        );
        assert_eq!(
            parse(&vec![b'a'; 70_000]).unwrap_err(),
            ProtocolError::TooBigInline
        );
        let mut big = b"*".to_vec();
        big.extend(vec![b'1'; 70_000]);
        assert_eq!(parse(&big).unwrap_err(), ProtocolError::TooBigMbulkCount);
    }

    /// A 200 000-argument request arriving in 4 KiB reads is scanned about once, not
    /// from its start on every read (the stateless parse scanned it ~400 times).
    #[test]
    fn a_request_arriving_in_pieces_is_scanned_once() {
        let args: Vec<Vec<u8>> = (0..200_000).map(|i| format!("a{i}").into_bytes()).collect();
        let wire = encode(&args);
        let mut parser = RequestParser::default();
        let mut buf = BytesMut::new();
        let mut got = None;
        for chunk in wire.chunks(4096) {
            buf.extend_from_slice(chunk);
            if let Some(a) = parser.parse(&mut buf, &Limits::default()).unwrap() {
                got = Some(a);
            }
        }
        assert_eq!(got.map(|a| a.len()), Some(200_000));
        assert!(
            parser.scanned < 2 * wire.len(),
            "scanned {} bytes of a {}-byte request",
            parser.scanned,
            wire.len()
        );
        assert!(buf.is_empty());
    }

    proptest! {
        /// A parser fed a pipeline in pieces of any size returns the same requests as
        /// parsing it whole.
        #[test]
        fn resumable_parser_agrees(
            requests in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 1..6),
                1..5),
            step in 1usize..40,
        ) {
            let wire: Vec<u8> = requests.iter().flat_map(|r| encode(r)).collect();
            let mut parser = RequestParser::default();
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            for chunk in wire.chunks(step) {
                buf.extend_from_slice(chunk);
                while let Some(a) = parser.parse(&mut buf, &Limits::default()).unwrap() {
                    got.push(a.iter().map(|b| b.to_vec()).collect::<Vec<_>>());
                }
            }
            prop_assert_eq!(got, requests);
            prop_assert!(buf.is_empty());
        }

        /// Any request split at any point parses the same once it is all there.

        #[test]
        fn split_anywhere(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..8), cut in any::<prop::sample::Index>()) {
            let wire = encode(&args);
            let cut = cut.index(wire.len());
            let mut buf = BytesMut::from(&wire[..cut]);
            let first = parse_command(&mut buf, &Limits::default()).unwrap();
            let got = match first {
                Some(v) => { prop_assert_eq!(cut, wire.len()); v }
                None => {
                    prop_assert_eq!(buf.len(), cut, "nothing consumed while incomplete");
                    buf.extend_from_slice(&wire[cut..]);
                    parse_command(&mut buf, &Limits::default()).unwrap().unwrap()
                }
            };
            prop_assert_eq!(got.iter().map(|b| b.to_vec()).collect::<Vec<_>>(), args);
            prop_assert!(buf.is_empty());
        }

        /// Garbage never panics.
        #[test]
        fn total(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut buf = BytesMut::from(&data[..]);
            for _ in 0..10 {
                match parse_command(&mut buf, &Limits::default()) {
                    Ok(Some(_)) => continue,
                    _ => break,
                }
            }
        }
    }
}
