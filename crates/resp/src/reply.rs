//! Replies and their encoding for RESP2 and RESP3 (chosen per connection by `HELLO`).

use bytes::{BufMut, Bytes, BytesMut};

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`
    Simple(&'static str),
    /// A status line known only at run time (`+FOO` relayed from a peer).
    Status(String),
    /// `-ERR ...` (the text includes its prefix, e.g. `ERR` or `WRONGTYPE`).
    Error(String),
    Int(i64),
    Bulk(Bytes),
    /// RESP2 `$-1`, RESP3 `_`.
    Null,
    /// RESP2 `*-1`, RESP3 `_`.
    NullArray,
    Array(Vec<Reply>),
    /// RESP3 map; RESP2 flattens it into an array.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 set; RESP2 array.
    Set(Vec<Reply>),
    /// RESP3 double; RESP2 bulk string.
    Double(f64),
    /// RESP3 boolean; RESP2 integer.
    Bool(bool),
    /// RESP3 verbatim string (`txt`); RESP2 bulk string.
    Verbatim(Bytes),
    /// RESP3 big number; RESP2 bulk string.
    BigNumber(String),
    /// RESP3 push; RESP2 array.
    Push(Vec<Reply>),
    /// Several replies to one command, back to back (SUBSCRIBE answers once per
    /// channel). Never nested in an aggregate: it is not one frame.
    Several(Vec<Reply>),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Simple("OK")
    }

    pub fn err(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    pub fn bulk(b: impl Into<Bytes>) -> Reply {
        Reply::Bulk(b.into())
    }

    fn head(out: &mut BytesMut, kind: u8, n: usize) {
        out.put_u8(kind);
        put_int(out, n as i64);
        out.put_slice(b"\r\n");
    }

    /// Appends the reply encoded for protocol `proto` (2 or 3).
    pub fn encode(&self, proto: u8, out: &mut BytesMut) {
        let resp3 = proto >= 3;
        match self {
            Reply::Simple(s) => {
                out.put_u8(b'+');
                out.put_slice(s.as_bytes());
                out.put_slice(b"\r\n");
            }
            Reply::Status(s) => {
                out.put_u8(b'+');
                // A status line cannot hold a newline.
                for b in s.bytes() {
                    out.put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
                }
                out.put_slice(b"\r\n");
            }
            Reply::Error(e) => {
                out.put_u8(b'-');
                // An error line cannot hold a newline.
                for b in e.bytes() {
                    out.put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
                }
                out.put_slice(b"\r\n");
            }
            Reply::Int(n) => {
                out.put_u8(b':');
                put_int(out, *n);
                out.put_slice(b"\r\n");
            }
            Reply::Bulk(b) => {
                Self::head(out, b'$', b.len());
                out.put_slice(b);
                out.put_slice(b"\r\n");
            }
            Reply::Null if resp3 => out.put_slice(b"_\r\n"),
            Reply::Null => out.put_slice(b"$-1\r\n"),
            Reply::NullArray if resp3 => out.put_slice(b"_\r\n"),
            Reply::NullArray => out.put_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                Self::head(out, b'*', items.len());
                items.iter().for_each(|i| i.encode(proto, out));
            }
            Reply::Set(items) => {
                Self::head(out, if resp3 { b'~' } else { b'*' }, items.len());
                items.iter().for_each(|i| i.encode(proto, out));
            }
            Reply::Push(items) => {
                Self::head(out, if resp3 { b'>' } else { b'*' }, items.len());
                items.iter().for_each(|i| i.encode(proto, out));
            }
            Reply::Map(pairs) => {
                if resp3 {
                    Self::head(out, b'%', pairs.len());
                } else {
                    Self::head(out, b'*', pairs.len() * 2);
                }
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Double(d) => {
                let text = format_double(*d);
                if resp3 {
                    out.put_u8(b',');
                    out.put_slice(text.as_bytes());
                    out.put_slice(b"\r\n");
                } else {
                    Reply::Bulk(Bytes::from(text)).encode(proto, out);
                }
            }
            Reply::Bool(b) if resp3 => out.put_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            Reply::Bool(b) => Reply::Int(*b as i64).encode(proto, out),
            Reply::Verbatim(b) if resp3 => {
                Self::head(out, b'=', b.len() + 4);
                out.put_slice(b"txt:");
                out.put_slice(b);
                out.put_slice(b"\r\n");
            }
            Reply::Verbatim(b) => Reply::Bulk(b.clone()).encode(proto, out),
            Reply::BigNumber(n) if resp3 => {
                out.put_u8(b'(');
                out.put_slice(n.as_bytes());
                out.put_slice(b"\r\n");
            }
            Reply::BigNumber(n) => Reply::Bulk(Bytes::from(n.clone())).encode(proto, out),
            Reply::Several(replies) => replies.iter().for_each(|r| r.encode(proto, out)),
        }
    }
}

/// Appends `n` in decimal: on the stack (a `String` per bulk header was a heap
/// allocation per reply).
fn put_int(out: &mut BytesMut, n: i64) {
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Redis 7.2's double formatting (`fpconv_dtoa`): `inf`, `-inf`, `nan`, else the
/// shortest digits that read back as `d`, written plainly for integers below 10^7
/// times their digits and for fractions down to 10^-7, in scientific notation
/// (`1e+17`, `1.5e-9`) past that.
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Rust's `{:e}` gives the shortest digits: `d.ddde±x`.
    let sci = format!("{:e}", d.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    let n = digits.len() as i32;
    // The value is digits × 10^k.
    let k = exp - (n - 1);
    let mut out = String::with_capacity(24);
    if d < 0.0 {
        out.push('-');
    }
    let abs_exp = exp.abs();
    if k >= 0 && abs_exp < n + 7 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', k as usize));
    } else if k < 0 && (k > -7 || abs_exp < 4) {
        let point = n + k;
        if point <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-point) as usize));
            out.push_str(&digits);
        } else {
            out.push_str(&digits[..point as usize]);
            out.push('.');
            out.push_str(&digits[point as usize..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&abs_exp.to_string());
    }
    out
}

/// How INCRBYFLOAT and HINCRBYFLOAT print their result (Redis's "human" long double:
/// plain decimal, never an exponent).
pub fn format_human(d: f64) -> String {
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    format!("{d}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: &Reply, proto: u8) -> String {
        let mut out = BytesMut::new();
        r.encode(proto, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn resp2_and_resp3() {
        assert_eq!(enc(&Reply::ok(), 2), "+OK\r\n");
        assert_eq!(enc(&Reply::Null, 2), "$-1\r\n");
        assert_eq!(enc(&Reply::Null, 3), "_\r\n");
        let m = Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]);
        assert_eq!(enc(&m, 2), "*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&m, 3), "%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&Reply::Double(1.5), 3), ",1.5\r\n");
        assert_eq!(enc(&Reply::Double(1.5), 2), "$3\r\n1.5\r\n");
        assert_eq!(enc(&Reply::Bool(true), 3), "#t\r\n");
        assert_eq!(enc(&Reply::Verbatim("hi".into()), 3), "=6\r\ntxt:hi\r\n");
        assert_eq!(enc(&Reply::err("ERR a\r\nb"), 2), "-ERR a  b\r\n");
    }

    #[test]
    fn doubles_print_as_redis_7_2_does() {
        // fpconv_dtoa's outputs (Redis 7.2).
        for (d, want) in [
            (0.1, "0.1"),
            (1.5, "1.5"),
            (-2.0, "-2"),
            (3.0, "3"),
            (1e300, "1e+300"),
            (1e17, "1e+17"),
            (123456789012345678.0, "123456789012345680"),
            (1.2345678901234568e25, "1.2345678901234568e+25"),
            (12345670000000.0, "12345670000000"),
            (1e-5, "0.00001"),
            (1.5e-9, "1.5e-9"),
            (1e-7, "1e-7"),
            (0.000123, "0.000123"),
            (-0.0, "-0"),
            (0.0, "0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (1e7, "10000000"),
            (1e8, "1e+8"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
        ] {
            assert_eq!(format_double(d), want, "{d}");
            if d.is_finite() {
                assert_eq!(format_double(d).parse::<f64>().ok(), Some(d));
            }
        }
    }
}
