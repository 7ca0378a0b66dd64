//! Scripts' `cmsgpack` library as Redis bundles it (lua-cmsgpack 0.4): `pack(...)` packs
//! each argument and concatenates them, `unpack(data)` returns every value packed in
//! `data`, `unpack_one(data [, offset])` and `unpack_limit(data, n [, offset])` return
//! the offset after what they read (-1 at the end) and the values. Encoding as
//! lua-cmsgpack's: integral numbers as the smallest integer, others as float32 when
//! exact, else float64; strings as fixstr/str8/16/32; a table with keys 1..n an array,
//! any other a map; tables nested deeper than 16 levels pack as nil. Both directions are
//! iterative (explicit stacks), so a script never deepens the thread's stack.

use mlua::{Lua, MultiValue, Table, Value};

use super::libs::raised;

/// A library error as raised at the script's line.
fn located(lua: &Lua, e: mlua::Error) -> mlua::Error {
    match e {
        mlua::Error::RuntimeError(text) => raised(lua, text),
        other => other,
    }
}

/// Deepest table nesting packed (lua-cmsgpack's LUACMSGPACK_MAX_NESTING).
const MAX_NESTING: usize = 16;
/// Deepest nesting unpacked (bounded so that a hostile string cannot build a stack of
/// tables without end).
const MAX_UNPACK_DEPTH: usize = 1000;

/// The `cmsgpack` table.
pub(super) fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            if args.is_empty() {
                return Err(raised(
                    lua,
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                ));
            }
            let mut out = Vec::new();
            for v in args.iter() {
                pack(v, &mut out).map_err(|e| located(lua, e))?;
            }
            lua.create_string(&out)
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, data: mlua::LuaString| {
            let bytes = data.as_bytes();
            let mut at = 0;
            let mut values = Vec::new();
            while at < bytes.len() {
                values.push(unpack(lua, &bytes, &mut at).map_err(|e| located(lua, e))?);
            }
            Ok(MultiValue::from_iter(values))
        })?,
    )?;
    for (name, limited) in [("unpack_one", false), ("unpack_limit", true)] {
        t.raw_set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let mut it = args.into_iter();
                let Some(Value::String(data)) = it.next() else {
                    return Err(raised(lua, "MessagePack unpack needs a string."));
                };
                let number = |v: Option<Value>| match v {
                    Some(Value::Integer(i)) => i,
                    Some(Value::Number(n)) => n as i64,
                    _ => 0,
                };
                let limit = if limited { number(it.next()) } else { 1 };
                let offset = number(it.next());
                let bytes = data.as_bytes();
                let mut at = usize::try_from(offset).unwrap_or(0).min(bytes.len());
                let mut values = vec![Value::Nil];
                while at < bytes.len() && (limit <= 0 || (values.len() as i64) <= limit) {
                    values.push(unpack(lua, &bytes, &mut at).map_err(|e| located(lua, e))?);
                }
                values[0] = Value::Integer(if at >= bytes.len() { -1 } else { at as i64 });
                Ok(MultiValue::from_iter(values))
            })?,
        )?;
    }
    Ok(t)
}

/// A table being packed: its remaining items (already ordered), as (key, value) for
/// maps or values for arrays.
enum Open {
    Array(std::vec::IntoIter<Value>),
    Map(std::vec::IntoIter<(Value, Value)>, Option<Value>),
}

fn pack(root: &Value, out: &mut Vec<u8>) -> mlua::Result<()> {
    let mut stack: Vec<Open> = Vec::new();
    let mut pending = Some(root.clone());
    let mut budget = super::budget::Budget::default();
    loop {
        if let Some(v) = pending.take() {
            let before = out.len();
            match v {
                Value::Table(t) if stack.len() >= MAX_NESTING => {
                    let _ = t;
                    out.push(0xc0);
                }
                Value::Table(t) => stack.push(open(&t, out)?),
                other => scalar(&other, out),
            }
            budget
                .spend(out.len() - before)
                .map_err(|e| mlua::Error::RuntimeError(format!("MessagePack pack: {e}")))?;
        }
        let Some(top) = stack.last_mut() else {
            return Ok(());
        };
        match top {
            Open::Array(items) => match items.next() {
                Some(v) => pending = Some(v),
                None => {
                    stack.pop();
                }
            },
            Open::Map(pairs, value) => {
                if let Some(v) = value.take() {
                    pending = Some(v);
                    continue;
                }
                match pairs.next() {
                    Some((k, v)) => {
                        *value = Some(v);
                        pending = Some(k);
                    }
                    None => {
                        stack.pop();
                    }
                }
            }
        }
    }
}

/// Writes the header of table `t` and returns its items to pack.
fn open(t: &Table, out: &mut Vec<u8>) -> mlua::Result<Open> {
    let pairs: Vec<(Value, Value)> = t.pairs::<Value, Value>().collect::<mlua::Result<_>>()?;
    let is_array = pairs.iter().all(|(k, _)| match k {
        Value::Integer(i) => *i >= 1 && *i as usize <= pairs.len(),
        Value::Number(n) => *n >= 1.0 && n.fract() == 0.0 && *n as usize <= pairs.len(),
        _ => false,
    });
    // An empty table packs as an empty array, as lua-cmsgpack's.
    if is_array {
        header(out, pairs.len(), (0x90, 16), 0xdc, 0xdd);
        let mut items = Vec::with_capacity(pairs.len());
        for i in 1..=pairs.len() {
            items.push(t.raw_get::<Value>(i as i64)?);
        }
        return Ok(Open::Array(items.into_iter()));
    }
    header(out, pairs.len(), (0x80, 16), 0xde, 0xdf);
    Ok(Open::Map(pairs.into_iter(), None))
}

/// An array or map header: the fix form below `fix.1` items, else 16 or 32 bits.
fn header(out: &mut Vec<u8>, n: usize, fix: (u8, usize), b16: u8, b32: u8) {
    if n < fix.1 {
        out.push(fix.0 | n as u8);
    } else if n <= 0xffff {
        out.push(b16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(b32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn scalar(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => integer(*i, out),
        Value::Number(n) if n.fract() == 0.0 && *n >= i64::MIN as f64 && *n < i64::MAX as f64 => {
            integer(*n as i64, out)
        }
        Value::Number(n) => {
            let f = *n as f32;
            if f64::from(f) == *n {
                out.push(0xca);
                out.extend_from_slice(&f.to_be_bytes());
            } else {
                out.push(0xcb);
                out.extend_from_slice(&n.to_be_bytes());
            }
        }
        Value::String(s) => {
            let b = s.as_bytes();
            let n = b.len();
            if n < 32 {
                out.push(0xa0 | n as u8);
            } else if n <= 0xff {
                out.extend_from_slice(&[0xd9, n as u8]);
            } else if n <= 0xffff {
                out.push(0xda);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            } else {
                out.push(0xdb);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            out.extend_from_slice(&b);
        }
        // nil, functions, userdata...: nil, as lua-cmsgpack packs them.
        _ => out.push(0xc0),
    }
}

fn integer(i: i64, out: &mut Vec<u8>) {
    if i >= 0 {
        let u = i as u64;
        if u < 128 {
            out.push(u as u8);
        } else if u <= 0xff {
            out.extend_from_slice(&[0xcc, u as u8]);
        } else if u <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(u as u16).to_be_bytes());
        } else if u <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(u as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&u.to_be_bytes());
        }
    } else if i >= -32 {
        out.push(i as i8 as u8);
    } else if i >= i64::from(i8::MIN) {
        out.extend_from_slice(&[0xd0, i as i8 as u8]);
    } else if i >= i64::from(i16::MIN) {
        out.push(0xd1);
        out.extend_from_slice(&(i as i16).to_be_bytes());
    } else if i >= i64::from(i32::MIN) {
        out.push(0xd2);
        out.extend_from_slice(&(i as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&i.to_be_bytes());
    }
}

fn missing() -> mlua::Error {
    mlua::Error::RuntimeError("Missing bytes in input.".into())
}

/// Takes `n` bytes at `*at`.
fn take<'a>(data: &'a [u8], at: &mut usize, n: usize) -> mlua::Result<&'a [u8]> {
    let end = at
        .checked_add(n)
        .filter(|&e| e <= data.len())
        .ok_or_else(missing)?;
    let out = &data[*at..end];
    *at = end;
    Ok(out)
}

fn be(data: &[u8], at: &mut usize, n: usize) -> mlua::Result<u64> {
    Ok(take(data, at, n)?
        .iter()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
}

/// A table being filled while unpacking: its items still to read.
struct Filling {
    table: Table,
    map: bool,
    left: usize,
    next_index: i64,
    key: Option<Value>,
}

/// Unpacks one value at `*at` (iteratively: nested arrays and maps fill a stack).
fn unpack(lua: &Lua, data: &[u8], at: &mut usize) -> mlua::Result<Value> {
    let mut stack: Vec<Filling> = Vec::new();
    loop {
        let mut value = match one(lua, data, at)? {
            Item::Value(v) => v,
            Item::Open { len, map } => {
                if stack.len() >= MAX_UNPACK_DEPTH {
                    return Err(mlua::Error::RuntimeError(
                        "Bad data format in input: nesting too deep.".into(),
                    ));
                }
                let table = match map {
                    true => lua.create_table_with_capacity(0, len.min(1 << 16))?,
                    false => lua.create_table_with_capacity(len.min(1 << 16), 0)?,
                };
                if len > 0 {
                    stack.push(Filling {
                        table,
                        map,
                        left: len,
                        next_index: 1,
                        key: None,
                    });
                    continue;
                }
                Value::Table(table)
            }
        };
        // Put the value in the tables waiting for it, closing those it completes.
        loop {
            let Some(top) = stack.last_mut() else {
                return Ok(value);
            };
            if top.map && top.key.is_none() {
                top.key = Some(value);
                break;
            }
            match top.key.take() {
                // A nil key cannot index a table: the pair is dropped, as Lua would.
                Some(Value::Nil) => {}
                Some(k) => top.table.raw_set(k, value)?,
                None => {
                    top.table.raw_set(top.next_index, value)?;
                    top.next_index += 1;
                }
            }
            top.left -= 1;
            if top.left > 0 {
                break;
            }
            let done = stack.pop().map(|f| f.table);
            value = done.map_or(Value::Nil, Value::Table);
        }
    }
}

enum Item {
    Value(Value),
    Open { len: usize, map: bool },
}

fn one(lua: &Lua, data: &[u8], at: &mut usize) -> mlua::Result<Item> {
    let tag = take(data, at, 1)?[0];
    let string = |at: &mut usize, n: usize| -> mlua::Result<Item> {
        Ok(Item::Value(Value::String(
            lua.create_string(take(data, at, n)?)?,
        )))
    };
    let int = |v: i64| Ok(Item::Value(Value::Integer(v)));
    match tag {
        0x00..=0x7f => int(i64::from(tag)),
        0x80..=0x8f => Ok(Item::Open {
            len: usize::from(tag & 0x0f),
            map: true,
        }),
        0x90..=0x9f => Ok(Item::Open {
            len: usize::from(tag & 0x0f),
            map: false,
        }),
        0xa0..=0xbf => string(at, usize::from(tag & 0x1f)),
        0xc0 => Ok(Item::Value(Value::Nil)),
        0xc2 => Ok(Item::Value(Value::Boolean(false))),
        0xc3 => Ok(Item::Value(Value::Boolean(true))),
        0xc4 | 0xd9 => {
            let n = be(data, at, 1)? as usize;
            string(at, n)
        }
        0xc5 | 0xda => {
            let n = be(data, at, 2)? as usize;
            string(at, n)
        }
        0xc6 | 0xdb => {
            let n = be(data, at, 4)? as usize;
            string(at, n)
        }
        0xca => {
            let bits = be(data, at, 4)? as u32;
            Ok(Item::Value(Value::Number(f64::from(f32::from_bits(bits)))))
        }
        0xcb => Ok(Item::Value(Value::Number(f64::from_bits(be(data, at, 8)?)))),
        0xcc => int(be(data, at, 1)? as i64),
        0xcd => int(be(data, at, 2)? as i64),
        0xce => int(be(data, at, 4)? as i64),
        0xcf => {
            let u = be(data, at, 8)?;
            match i64::try_from(u) {
                Ok(i) => int(i),
                Err(_) => Ok(Item::Value(Value::Number(u as f64))),
            }
        }
        0xd0 => int(i64::from(be(data, at, 1)? as u8 as i8)),
        0xd1 => int(i64::from(be(data, at, 2)? as u16 as i16)),
        0xd2 => int(i64::from(be(data, at, 4)? as u32 as i32)),
        0xd3 => int(be(data, at, 8)? as i64),
        0xdc => Ok(Item::Open {
            len: be(data, at, 2)? as usize,
            map: false,
        }),
        0xdd => Ok(Item::Open {
            len: be(data, at, 4)? as usize,
            map: false,
        }),
        0xde => Ok(Item::Open {
            len: be(data, at, 2)? as usize,
            map: true,
        }),
        0xdf => Ok(Item::Open {
            len: be(data, at, 4)? as usize,
            map: true,
        }),
        0xe0..=0xff => int(i64::from(tag as i8)),
        _ => Err(mlua::Error::RuntimeError(
            "Bad data format in input.".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A value packable and comparable after a round trip: integers (within ±2^53: Lua
    /// 5.1's numbers are doubles), floats that are not integral, strings, booleans,
    /// arrays and string-keyed maps.
    #[derive(Debug, Clone)]
    enum V {
        Int(i64),
        Float(f64),
        Str(Vec<u8>),
        Bool(bool),
        Array(Vec<V>),
        Map(Vec<(String, V)>),
    }

    fn value() -> impl Strategy<Value = V> {
        let leaf = prop_oneof![
            (-(1i64 << 53)..(1i64 << 53)).prop_map(V::Int),
            (-1e12f64..1e12)
                .prop_filter("not integral", |f| f.fract() != 0.0)
                .prop_map(V::Float),
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(V::Str),
            any::<bool>().prop_map(V::Bool),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 1..8).prop_map(V::Array),
                proptest::collection::btree_map("[a-z]{1,6}", inner, 0..6)
                    .prop_map(|m| V::Map(m.into_iter().collect())),
            ]
        })
    }

    fn to_lua(lua: &Lua, v: &V) -> Value {
        match v {
            V::Int(i) => Value::Integer(*i),
            V::Float(f) => Value::Number(*f),
            V::Str(s) => Value::String(lua.create_string(s).unwrap()),
            V::Bool(b) => Value::Boolean(*b),
            V::Array(items) => {
                let t = lua.create_table().unwrap();
                for (i, item) in items.iter().enumerate() {
                    t.raw_set(i + 1, to_lua(lua, item)).unwrap();
                }
                Value::Table(t)
            }
            V::Map(pairs) => {
                let t = lua.create_table().unwrap();
                for (k, item) in pairs {
                    t.raw_set(k.as_str(), to_lua(lua, item)).unwrap();
                }
                Value::Table(t)
            }
        }
    }

    /// Whether `got` (unpacked) is `want`; an empty map comes back as an empty array
    /// (lua-cmsgpack packs every empty table as one), and a float packed as float32 only
    /// when that was exact.
    fn same(got: &Value, want: &V) -> bool {
        match (got, want) {
            (Value::Integer(a), V::Int(b)) => a == b,
            (Value::Number(a), V::Int(b)) => *a == *b as f64,
            (Value::Number(a), V::Float(b)) => a == b,
            (Value::String(a), V::Str(b)) => a.as_bytes().as_ref() == b.as_slice(),
            (Value::Boolean(a), V::Bool(b)) => a == b,
            (Value::Table(t), V::Array(items)) => {
                t.raw_len() == items.len()
                    && items
                        .iter()
                        .enumerate()
                        .all(|(i, item)| same(&t.raw_get::<Value>(i + 1).unwrap(), item))
            }
            (Value::Table(t), V::Map(pairs)) => {
                t.pairs::<Value, Value>().count() == pairs.len()
                    && pairs
                        .iter()
                        .all(|(k, item)| same(&t.raw_get::<Value>(k.as_str()).unwrap(), item))
            }
            _ => false,
        }
    }

    proptest! {
        #[test]
        fn what_is_packed_unpacks_the_same(v in value()) {
            let lua = Lua::new();
            let mut out = Vec::new();
            pack(&to_lua(&lua, &v), &mut out).unwrap();
            let mut at = 0;
            let back = unpack(&lua, &out, &mut at).unwrap();
            prop_assert_eq!(at, out.len());
            prop_assert!(same(&back, &v), "{:?} came back as {:?}", v, back);
        }

        /// Hostile input: any bytes unpack to values or to an error, never a panic, and
        /// never read past the input.
        #[test]
        fn any_bytes_unpack_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let lua = Lua::new();
            let mut at = 0;
            while at < bytes.len() {
                let before = at;
                if unpack(&lua, &bytes, &mut at).is_err() {
                    break;
                }
                prop_assert!(at > before && at <= bytes.len());
            }
        }
    }
}
