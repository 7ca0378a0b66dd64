//! Redis's conversions between replies and Lua values (RESP2 rules, as a script sees
//! its commands' replies unless it asks for RESP3): a status is `{ok=...}`, an error
//! `{err=...}`, a null `false`, an integer a number; back, a number is truncated to an
//! integer, `true` is 1, `false` and `nil` are null, a table is an array up to its
//! first nil unless it has an `err` or `ok` field.

use bytes::Bytes;
use dmc_resp::Reply;
use mlua::{Lua, Table, Value};

use super::budget::{Budget, Exceeded};

/// The deepest table a script may return (its nesting is the script's to choose).
pub const MAX_DEPTH: usize = 64;

/// A reply as the Lua value `redis.call` returns (errors are the caller's: see
/// [`error_table`]).
pub fn to_lua(lua: &Lua, reply: Reply, depth: usize) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Simple(s) => status_table(lua, s)?,
        Reply::Status(s) => status_table(lua, &s)?,
        Reply::Error(e) => error_table(lua, &e)?,
        Reply::Int(n) => Value::Number(n as f64),
        Reply::Bulk(b) | Reply::Verbatim(b) => Value::String(lua.create_string(&b[..])?),
        Reply::BigNumber(s) => Value::String(lua.create_string(s.as_bytes())?),
        Reply::Double(d) => {
            Value::String(lua.create_string(dmc_resp::format_double(d).as_bytes())?)
        }
        Reply::Bool(b) => Value::Number(f64::from(u8::from(b))),
        Reply::Null | Reply::NullArray => Value::Boolean(false),
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) | Reply::Several(items) => {
            array(lua, items.into_iter(), depth)?
        }
        Reply::Map(pairs) => array(lua, pairs.into_iter().flat_map(|(k, v)| [k, v]), depth)?,
    })
}

fn array(lua: &Lua, items: impl Iterator<Item = Reply>, depth: usize) -> mlua::Result<Value> {
    if depth >= MAX_DEPTH {
        return Err(mlua::Error::RuntimeError("reply nested too deep".into()));
    }
    let t = lua.create_table()?;
    for (i, item) in items.enumerate() {
        t.raw_set(i + 1, to_lua(lua, item, depth + 1)?)?;
    }
    Ok(Value::Table(t))
}

/// `{ok = text}`.
pub fn status_table(lua: &Lua, text: &str) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.raw_set("ok", lua.create_string(text.as_bytes())?)?;
    Ok(Value::Table(t))
}

/// `{err = text}`.
pub fn error_table(lua: &Lua, text: &str) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.raw_set("err", lua.create_string(text.as_bytes())?)?;
    Ok(Value::Table(t))
}

/// A script's result as a reply. A table nested past [`MAX_DEPTH`] fails the whole
/// conversion at once (`reached lua stack limit`), and so does one past the walk's
/// [`Budget`]: a table that holds itself, or a large string named many times, would
/// otherwise build a reply without bound.
pub fn to_reply(value: &Value) -> Reply {
    let mut budget = Budget::default();
    match walk(value, 0, &mut budget) {
        Ok(reply) => reply,
        Err(TooBig::Depth) => Reply::err("ERR reached lua stack limit"),
        Err(TooBig::Budget(e)) => Reply::Error(format!("ERR the script's reply is too large: {e}")),
    }
}

/// Why a result did not convert.
enum TooBig {
    Depth,
    Budget(Exceeded),
}

fn walk(value: &Value, depth: usize, budget: &mut Budget) -> Result<Reply, TooBig> {
    let reply = match value {
        Value::Nil => Reply::Null,
        Value::Boolean(true) => Reply::Int(1),
        Value::Boolean(false) => Reply::Null,
        Value::Integer(n) => Reply::Int(*n),
        Value::Number(n) => Reply::Int(truncate(*n)),
        Value::String(s) => {
            let bytes = s.as_bytes();
            budget.spend(bytes.len()).map_err(TooBig::Budget)?;
            return Ok(Reply::Bulk(Bytes::copy_from_slice(&bytes)));
        }
        Value::Table(t) => return table_reply(t, depth, budget),
        _ => Reply::Null,
    };
    budget.spend(0).map_err(TooBig::Budget)?;
    Ok(reply)
}

fn truncate(n: f64) -> i64 {
    if n.is_nan() { 0 } else { n as i64 }
}

fn table_reply(t: &Table, depth: usize, budget: &mut Budget) -> Result<Reply, TooBig> {
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        return Ok(Reply::Error(
            String::from_utf8_lossy(&e.as_bytes()).into_owned(),
        ));
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
        return Ok(Reply::Status(
            String::from_utf8_lossy(&s.as_bytes()).into_owned(),
        ));
    }
    if depth >= MAX_DEPTH {
        return Err(TooBig::Depth);
    }
    budget.spend(0).map_err(TooBig::Budget)?;
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(walk(&v, depth + 1, budget)?),
        }
    }
    Ok(Reply::Array(items))
}

/// A Lua value as a command argument: strings as they are, numbers as Redis formats
/// them (integers without a fraction); anything else is refused.
pub fn to_arg(value: &Value) -> Option<Bytes> {
    match value {
        Value::String(s) => Some(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Integer(n) => Some(Bytes::from(n.to_string())),
        Value::Number(n) => Some(Bytes::from(lua_number(*n))),
        _ => None,
    }
}

/// Lua 5.1's `%.14g` text of a number, which is what Redis passes for one.
fn lua_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        return format!("{}", n as i64);
    }
    let text = format!("{n:.14e}");
    // Shortest form that round-trips at 14 significant digits.
    match text.parse::<f64>() {
        Ok(v) => format!("{v}"),
        Err(_) => text,
    }
}
