//! Argument parsing of the GEO commands: distance units
//! (`extractUnitOrReply`) and numbers (`getDoubleFromObject` → `string2d`,
//! i.e. glibc `strtod` on the whole argument, C locale), ported from
//! Redis 7.0 `geo.c`, `object.c` and `util.c`.

/// Metres per unit for "m", "km", "ft", "mi" (ASCII case-insensitive), as
/// `extractUnitOrReply`; `None` means Redis replies
/// the unsupported-unit error. Like C's `strcasecmp`, the argument ends at its
/// first NUL byte.
pub fn unit_factor(unit: &[u8]) -> Option<f64> {
    let unit = match unit.iter().position(|&b| b == 0) {
        Some(end) => &unit[..end],
        None => unit,
    };
    if unit.eq_ignore_ascii_case(b"m") {
        Some(1.0)
    } else if unit.eq_ignore_ascii_case(b"km") {
        Some(1000.0)
    } else if unit.eq_ignore_ascii_case(b"ft") {
        Some(0.3048)
    } else if unit.eq_ignore_ascii_case(b"mi") {
        Some(1609.34)
    } else {
        None
    }
}

/// A number argument as Redis's `string2d` reads it (GEOADD / FROMLONLAT
/// coordinates, radius, width, height): the whole argument must be one
/// glibc `strtod` number — decimal or hexadecimal (`0x1.8p3`), optional
/// sign, `inf`/`infinity` accepted (then refused by the range checks) — with
/// no leading space. NaN, overflow to ±inf and underflow to 0 are refused.
/// `None` means "value is not a valid float" (or the command's own message).
pub fn parse_coordinate(arg: &[u8]) -> Option<f64> {
    let (negative, body) = match arg.first()? {
        b'+' => (false, arg.get(1..)?),
        b'-' => (true, arg.get(1..)?),
        _ => (false, arg),
    };
    let magnitude = if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
        f64::INFINITY
    } else if body.len() > 2 && body[0] == b'0' && (body[1] | 0x20) == b'x' {
        parse_hex(&body[2..])?
    } else {
        parse_decimal(body)?
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// `digits [. digits] [e [sign] digits]`, at least one mantissa digit.
fn parse_decimal(s: &[u8]) -> Option<f64> {
    let mut i = 0;
    let mut digits = 0usize;
    let mut nonzero = false;
    let mut seen_point = false;
    while let Some(&c) = s.get(i) {
        if c.is_ascii_digit() {
            digits += 1;
            nonzero |= c != b'0';
        } else if c == b'.' && !seen_point {
            seen_point = true;
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    if let Some(&c) = s.get(i) {
        if c | 0x20 != b'e' {
            return None;
        }
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_digits = s.get(i..)?;
        if exp_digits.is_empty() || !exp_digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
    }
    // The grammar checked above is a subset of what Rust's correctly rounded
    // parser accepts, and both round to nearest like glibc.
    let v: f64 = std::str::from_utf8(s).ok()?.parse().ok()?;
    if v.is_infinite() || (v == 0.0 && nonzero) {
        return None; // ERANGE: overflow or underflow to zero.
    }
    Some(v)
}

/// `hexdigits [. hexdigits] [p [sign] digits]` after "0x", at least one digit.
fn parse_hex(s: &[u8]) -> Option<f64> {
    let mut mant: u64 = 0;
    let mut exp: i64 = 0;
    let mut sticky = false;
    let mut digits = 0usize;
    let mut seen_point = false;
    let mut i = 0;
    while let Some(&c) = s.get(i) {
        if c == b'.' && !seen_point {
            seen_point = true;
        } else if let Some(d) = char::from(c).to_digit(16) {
            digits += 1;
            if mant >> 60 == 0 {
                mant = mant * 16 + u64::from(d);
                if seen_point {
                    exp = exp.saturating_sub(4);
                }
            } else {
                sticky |= d != 0;
                if !seen_point {
                    exp = exp.saturating_add(4);
                }
            }
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    if let Some(&c) = s.get(i) {
        if c | 0x20 != b'p' {
            return None;
        }
        i += 1;
        let negative = match s.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let exp_digits = s.get(i..)?;
        if exp_digits.is_empty() {
            return None;
        }
        let mut e: i64 = 0;
        for &c in exp_digits {
            if !c.is_ascii_digit() {
                return None;
            }
            e = (e * 10 + i64::from(c - b'0')).min(1 << 40);
        }
        exp = exp.saturating_add(if negative { -e } else { e });
    }
    if mant == 0 {
        return Some(0.0);
    }
    round_binary(mant, exp, sticky)
}

/// Correctly rounded `mant * 2^exp` (plus a sticky tail), `None` on
/// overflow or underflow to zero.
fn round_binary(mant: u64, exp: i64, sticky: bool) -> Option<f64> {
    let len = i64::from(64 - mant.leading_zeros());
    let msb = exp.saturating_add(len - 1);
    if msb > 1023 {
        return None;
    }
    let precision = if msb >= -1022 { 53 } else { 53 - (-1022 - msb) };
    if precision < 0 {
        return None;
    }
    let shift = len - precision;
    let (mut kept, mut e) = (u128::from(mant), exp);
    if shift > 0 {
        let rem = kept & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        kept >>= shift;
        e += shift;
        if rem > half || (rem == half && (sticky || kept & 1 == 1)) {
            kept += 1;
        }
    }
    let v = ldexp(kept as f64, e);
    if v.is_infinite() || v == 0.0 {
        None
    } else {
        Some(v)
    }
}

/// `x * 2^k` for an exactly representable result.
fn ldexp(mut x: f64, mut k: i64) -> f64 {
    let pow2 = |e: i64| f64::from_bits(((e + 1023) as u64) << 52);
    while k > 1000 {
        x *= pow2(1000);
        k -= 1000;
    }
    while k < -1000 {
        x *= pow2(-1000);
        k += 1000;
    }
    x * pow2(k.clamp(-1022, 1023))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(unit_factor(b"M"), Some(1.0));
        assert_eq!(unit_factor(b"kM"), Some(1000.0));
        assert_eq!(unit_factor(b"ft"), Some(0.3048));
        assert_eq!(unit_factor(b"MI"), Some(1609.34));
        assert_eq!(unit_factor(b"m\0junk"), Some(1.0));
        assert_eq!(unit_factor(b"meters"), None);
        assert_eq!(unit_factor(b""), None);
    }

    #[test]
    fn decimal_numbers() {
        assert_eq!(parse_coordinate(b"13.361389"), Some(13.361389));
        assert_eq!(parse_coordinate(b"-0"), Some(-0.0));
        assert_eq!(parse_coordinate(b"+.5"), Some(0.5));
        assert_eq!(parse_coordinate(b"5."), Some(5.0));
        assert_eq!(parse_coordinate(b"1e2"), Some(100.0));
        assert_eq!(parse_coordinate(b"1E-2"), Some(0.01));
        assert_eq!(parse_coordinate(b"4.9e-324"), Some(4.9e-324));
        for bad in [
            &b""[..],
            b" 1",
            b"1 ",
            b"1e",
            b"1e+",
            b".",
            b"-",
            b"+-1",
            b"1..2",
            b"1e400",
            b"1e-400",
            b"nan",
            b"-NaN",
            b"nan(1)",
            b"1\x002",
            b"abc",
            b"0x",
            b"1_0",
            b"1,5",
        ] {
            assert_eq!(
                parse_coordinate(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(parse_coordinate(b"0e-999999"), Some(0.0));
    }

    #[test]
    fn special_and_hex_numbers() {
        assert_eq!(parse_coordinate(b"inf"), Some(f64::INFINITY));
        assert_eq!(parse_coordinate(b"-Infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_coordinate(b"infin"), None);
        assert_eq!(parse_coordinate(b"0x10"), Some(16.0));
        assert_eq!(parse_coordinate(b"0X1.8p3"), Some(12.0));
        assert_eq!(parse_coordinate(b"-0x.8"), Some(-0.5));
        assert_eq!(parse_coordinate(b"0x1p-1074"), Some(f64::from_bits(1)));
        assert_eq!(parse_coordinate(b"0x1p-1075"), None);
        assert_eq!(parse_coordinate(b"0x1.8p-1075"), Some(f64::from_bits(1)));
        assert_eq!(parse_coordinate(b"0x1p1024"), None);
        assert_eq!(parse_coordinate(b"0x1.fffffffffffff8p0"), Some(2.0));
        assert_eq!(
            parse_coordinate(b"0x1.fffffffffffff7ffffp0"),
            Some(2.0 - f64::EPSILON)
        );
        assert_eq!(parse_coordinate(b"0x1p"), None);
        assert_eq!(parse_coordinate(b"0x0p5"), Some(0.0));
    }
}
