//! The libraries Redis loads into every script beside `redis`: `cjson` (encode, decode,
//! `null`; lua-cjson 2.1's output: numbers as `%.14g`, `/` escaped, an empty table is
//! `{}`, a table with keys 1..n an array, excessively sparse arrays refused, nesting
//! limited to 1000 levels without recursion) and `bit` (LuaBitOp: 32-bit operations on
//! numbers). JSON is parsed by `serde_json` (nesting limited to its 128 levels; its error
//! texts, not lua-cjson's); the conversions are here. `cmsgpack` is [`super::msgpack`],
//! `struct` [`super::structlib`].

use mlua::{LightUserData, Lua, MultiValue, Table, Value};

/// Deepest nesting cjson encodes or decodes (lua-cjson's default).
const MAX_DEPTH: usize = 1000;

/// Installs `cjson`, `bit`, `cmsgpack` ([`super::msgpack`]) and `struct`
/// ([`super::structlib`]) as globals of `lua`.
pub(super) fn install(lua: &Lua) -> mlua::Result<()> {
    let g = lua.globals();
    g.raw_set("cjson", cjson(lua)?)?;
    g.raw_set("bit", bit(lua)?)?;
    g.raw_set("cmsgpack", super::msgpack::library(lua)?)?;
    g.raw_set("struct", super::structlib::library(lua)?)?;
    Ok(())
}

/// An error raised where the script called the library, as Lua's `error` reports it
/// (`user_script:LINE: text`).
pub(super) fn raised(lua: &Lua, text: impl std::fmt::Display) -> mlua::Error {
    let line = lua
        .inspect_stack(1, |d| d.current_line())
        .flatten()
        .unwrap_or(1);
    mlua::Error::RuntimeError(format!("user_script:{line}: {text}"))
}

fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

fn cjson(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "encode",
        lua.create_function(|lua, v: Value| {
            let mut out = Vec::new();
            encode(&v, &mut out).map_err(|e| raised(lua, e))?;
            lua.create_string(&out)
        })?,
    )?;
    t.raw_set(
        "decode",
        lua.create_function(|lua, text: mlua::LuaString| {
            let json: serde_json::Value = serde_json::from_slice(&text.as_bytes())
                .map_err(|e| raised(lua, format!("Expected value but {e}")))?;
            decode(lua, &json, 0).map_err(|e| raised(lua, e))
        })?,
    )?;
    t.raw_set("null", null())?;
    Ok(t)
}

/// A table being encoded: its next item.
enum Open {
    Array {
        table: Table,
        next: u64,
        len: u64,
    },
    Object {
        pairs: Vec<(Value, Value)>,
        next: usize,
    },
}

/// Appends the JSON of `root`. Iterative (an explicit stack of open tables), so the
/// nesting a script builds never deepens this thread's stack; 1000 levels at most.
fn encode(root: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    let mut stack: Vec<Open> = Vec::new();
    let mut pending = Some(root.clone());
    let mut budget = super::budget::Budget::default();
    loop {
        let before = out.len();
        let opened = match pending.take() {
            Some(v) => encode_value(&v, out)?,
            None => None,
        };
        budget
            .spend(out.len() - before)
            .map_err(|e| format!("Cannot serialise: {e}"))?;
        if let Some(open) = opened {
            if stack.len() >= MAX_DEPTH {
                return Err(format!(
                    "Cannot serialise, excessive nesting ({})",
                    stack.len() + 1
                ));
            }
            stack.push(open);
        }
        let Some(top) = stack.last_mut() else {
            return Ok(());
        };
        match top {
            Open::Array { table, next, len } => {
                if *next > *len {
                    out.push(b']');
                    stack.pop();
                    continue;
                }
                if *next > 1 {
                    out.push(b',');
                }
                pending = Some(
                    table
                        .raw_get::<Value>(*next as i64)
                        .map_err(|e| e.to_string())?,
                );
                *next += 1;
            }
            Open::Object { pairs, next } => {
                let Some((k, v)) = pairs.get(*next) else {
                    out.push(b'}');
                    stack.pop();
                    continue;
                };
                if *next > 0 {
                    out.push(b',');
                }
                match k {
                    Value::String(s) => quote(&s.as_bytes(), out),
                    Value::Integer(i) => quote(format_g14(*i as f64).as_bytes(), out),
                    Value::Number(x) => quote(format_g14(*x).as_bytes(), out),
                    _ => {
                        return Err(
                            "Cannot serialise table: table key must be a number or string".into(),
                        );
                    }
                }
                out.push(b':');
                pending = Some(v.clone());
                *next += 1;
            }
        }
    }
}

/// Appends a scalar's JSON, or opens a table (`[` or `{`) and returns it.
fn encode_value(v: &Value, out: &mut Vec<u8>) -> Result<Option<Open>, String> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(u) if u.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        // Lua 5.1's numbers are doubles (mlua hands integral ones over as integers).
        Value::Integer(n) => out.extend_from_slice(format_g14(*n as f64).as_bytes()),
        Value::Number(n) if !n.is_finite() => {
            return Err("Cannot serialise number: must not be NaN or Inf".into());
        }
        Value::Number(n) => out.extend_from_slice(format_g14(*n).as_bytes()),
        Value::String(s) => quote(&s.as_bytes(), out),
        Value::Table(t) => return open_table(t, out).map(Some),
        other => {
            return Err(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            ));
        }
    }
    Ok(None)
}

/// Opens table `t`: an array when every key is a positive integer (holes become null
/// unless the array is excessively sparse), else an object.
fn open_table(t: &Table, out: &mut Vec<u8>) -> Result<Open, String> {
    let pairs: Vec<(Value, Value)> = t
        .pairs::<Value, Value>()
        .collect::<mlua::Result<_>>()
        .map_err(|e| e.to_string())?;
    let index = |k: &Value| match k {
        Value::Integer(i) if *i >= 1 => Some(*i as u64),
        Value::Number(n) if *n >= 1.0 && n.fract() == 0.0 => Some(*n as u64),
        _ => None,
    };
    let indices: Option<Vec<u64>> = pairs.iter().map(|(k, _)| index(k)).collect();
    if let Some(indices) = indices.filter(|i| !i.is_empty()) {
        let len = indices.iter().copied().max().unwrap_or(0);
        if len > 10 && len > 2 * indices.len() as u64 {
            return Err("Cannot serialise table: excessively sparse array".into());
        }
        out.push(b'[');
        return Ok(Open::Array {
            table: t.clone(),
            next: 1,
            len,
        });
    }
    out.push(b'{');
    Ok(Open::Object { pairs, next: 0 })
}

/// A JSON string of `bytes`, escaped as lua-cjson escapes (`/` and DEL included; other
/// bytes, UTF-8 or not, as they are).
fn quote(bytes: &[u8], raw: &mut Vec<u8>) {
    raw.push(b'"');
    for &b in bytes {
        match b {
            b'"' => raw.extend_from_slice(b"\\\""),
            b'\\' => raw.extend_from_slice(b"\\\\"),
            b'/' => raw.extend_from_slice(b"\\/"),
            b'\n' => raw.extend_from_slice(b"\\n"),
            b'\r' => raw.extend_from_slice(b"\\r"),
            b'\t' => raw.extend_from_slice(b"\\t"),
            8 => raw.extend_from_slice(b"\\b"),
            12 => raw.extend_from_slice(b"\\f"),
            b if b < 0x20 || b == 0x7f => raw.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            b => raw.push(b),
        }
    }
    raw.push(b'"');
}

/// `%.14g`, as lua-cjson (and Lua's `tostring`) formats numbers.
pub(super) fn format_g14(n: f64) -> String {
    if n == 0.0 {
        return if n.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let exp = n.abs().log10().floor() as i32;
    // Rounding to 14 digits may carry into the next power of ten.
    let sci = format!("{:.13e}", n);
    let (mantissa, e) = sci.split_once('e').unwrap_or((&sci, "0"));
    let e: i32 = e.parse().unwrap_or(exp);
    if !(-4..14).contains(&e) {
        let m = trim_zeros(mantissa);
        let sign = if e < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", e.abs());
    }
    let decimals = (13 - e).max(0) as usize;
    trim_zeros(&format!("{n:.decimals$}")).to_string()
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

fn decode(lua: &Lua, v: &serde_json::Value, depth: usize) -> mlua::Result<Value> {
    if depth > MAX_DEPTH {
        return Err(mlua::Error::RuntimeError(format!(
            "Found too many nested data structures ({depth})"
        )));
    }
    Ok(match v {
        serde_json::Value::Null => null(),
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Value::String(lua.create_string(s)?),
        serde_json::Value::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, decode(lua, item, depth + 1)?)?;
            }
            Value::Table(t)
        }
        serde_json::Value::Object(map) => {
            let t = lua.create_table_with_capacity(0, map.len())?;
            for (k, item) in map {
                t.raw_set(k.as_str(), decode(lua, item, depth + 1)?)?;
            }
            Value::Table(t)
        }
    })
}

/// LuaBitOp's normalisation: a number to a signed 32-bit integer (modulo 2^32).
fn tobit(n: f64) -> i32 {
    n.round_ties_even().rem_euclid(4_294_967_296.0) as u32 as i32
}

type Unary = fn(i32) -> i32;
type Binary = fn(i32, i32) -> i32;
type Shift = fn(i32, u32) -> i32;

fn bit(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let unary: [(&str, Unary); 3] = [
        ("tobit", |x| x),
        ("bnot", |x| !x),
        ("bswap", |x| x.swap_bytes()),
    ];
    for (name, f) in unary {
        t.raw_set(
            name,
            lua.create_function(move |_, x: f64| Ok(f64::from(f(tobit(x)))))?,
        )?;
    }
    let fold: [(&str, Binary); 3] = [
        ("band", |a, b| a & b),
        ("bor", |a, b| a | b),
        ("bxor", |a, b| a ^ b),
    ];
    for (name, f) in fold {
        t.raw_set(
            name,
            lua.create_function(move |lua, (first, rest): (f64, MultiValue)| {
                let mut acc = tobit(first);
                for v in rest {
                    let n = match v {
                        Value::Integer(i) => i as f64,
                        Value::Number(n) => n,
                        other => {
                            return Err(raised(
                                lua,
                                format!(
                                    "bad argument to '{name}' (number expected, got {})",
                                    other.type_name()
                                ),
                            ));
                        }
                    };
                    acc = f(acc, tobit(n));
                }
                Ok(f64::from(acc))
            })?,
        )?;
    }
    let shifts: [(&str, Shift); 5] = [
        ("lshift", |x, n| ((x as u32) << n) as i32),
        ("rshift", |x, n| ((x as u32) >> n) as i32),
        ("arshift", |x, n| x >> n),
        ("rol", |x, n| (x as u32).rotate_left(n) as i32),
        ("ror", |x, n| (x as u32).rotate_right(n) as i32),
    ];
    for (name, f) in shifts {
        t.raw_set(
            name,
            lua.create_function(move |_, (x, n): (f64, f64)| {
                Ok(f64::from(f(tobit(x), (tobit(n) & 31) as u32)))
            })?,
        )?;
    }
    t.raw_set(
        "tohex",
        lua.create_function(|_, (x, n): (f64, Option<f64>)| {
            let n = n.map_or(8, tobit);
            let digits = n.unsigned_abs().min(8) as usize;
            let v = tobit(x) as u32;
            let hex = match n < 0 {
                true => format!("{v:08X}"),
                false => format!("{v:08x}"),
            };
            Ok(hex[8 - digits..].to_string())
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_format_as_percent_14g() {
        for (n, want) in [
            (1.0, "1"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (-2.25, "-2.25"),
            (1e20, "1e+20"),
            (123456789012345.0, "1.2345678901234e+14"),
            (12345678901234.0, "12345678901234"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.0 / 3.0, "0.33333333333333"),
            (99999999999999.99, "1e+14"),
        ] {
            assert_eq!(format_g14(n), want, "{n}");
        }
    }

    #[test]
    fn bit_normalises_like_luabitop() {
        assert_eq!(tobit(4294967295.0), -1);
        assert_eq!(tobit(2147483648.0), i32::MIN);
        assert_eq!(tobit(-1.0), -1);
        assert_eq!(tobit(1.5), 2);
        assert_eq!(tobit(2.5), 2);
    }
}
