//! Scripts' `struct` library as Redis bundles it (Roberto Ierusalimschy's struct 0.2):
//! `struct.pack(fmt, ...)`, `struct.unpack(fmt, data [, pos])` (the values, then the
//! position after them) and `struct.size(fmt)`. Format: `>` `<` endianness (native:
//! little), `!n` alignment, `x` a zero byte, `b B` `h H` `l L` `T` `i I[n]` integers of
//! 1, 2, 8, 8 and n (default 4) bytes, `f` `d` floats, `s` a zero-terminated string,
//! `c[n]` n bytes (`c0`: the whole string when packing, the previous value's length when
//! unpacking). Every read is checked against the data's length.

use mlua::{Lua, MultiValue, Table, Value};

use super::libs::{format_g14, raised};

/// An error as Lua's argument checks word it: about argument `n`, or plain.
#[derive(Debug)]
enum Error {
    Arg(usize, String),
    Plain(String),
}

impl Error {
    fn raise(self, lua: &Lua, function: &str) -> mlua::Error {
        match self {
            Error::Arg(n, text) => {
                raised(lua, format!("bad argument #{n} to '{function}' ({text})"))
            }
            Error::Plain(text) => raised(lua, text),
        }
    }
}

/// Widest integer (struct's MAXINTSIZE).
const MAX_INT: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Item {
    Pad,
    Int { size: usize, signed: bool },
    Float,
    Double,
    ZString,
    Chars(usize),
}

/// A format being read: its options one by one, with the endianness and alignment in
/// effect.
struct Format<'a> {
    fmt: &'a [u8],
    at: usize,
    little: bool,
    align: usize,
}

impl<'a> Format<'a> {
    fn new(fmt: &'a [u8]) -> Self {
        Format {
            fmt,
            at: 0,
            little: true,
            align: 1,
        }
    }

    fn number(&mut self, default: usize) -> usize {
        let start = self.at;
        while self.fmt.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        std::str::from_utf8(&self.fmt[start..self.at])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    }

    /// The next item, or `None` at the end.
    fn next(&mut self) -> Result<Option<Item>, Error> {
        loop {
            let Some(&c) = self.fmt.get(self.at) else {
                return Ok(None);
            };
            self.at += 1;
            let int = |size, signed| Ok(Some(Item::Int { size, signed }));
            return match c {
                b' ' => continue,
                b'>' => {
                    self.little = false;
                    continue;
                }
                b'<' => {
                    self.little = true;
                    continue;
                }
                b'!' => {
                    let align = self.number(8);
                    if !align.is_power_of_two() {
                        return Err(Error::Plain(format!(
                            "alignment {align} is not a power of 2"
                        )));
                    }
                    self.align = align;
                    continue;
                }
                b'x' => Ok(Some(Item::Pad)),
                b'b' => int(1, true),
                b'B' => int(1, false),
                b'h' => int(2, true),
                b'H' => int(2, false),
                b'l' => int(8, true),
                b'L' | b'T' => int(8, false),
                b'i' | b'I' => {
                    let size = self.number(4);
                    if size > MAX_INT {
                        return Err(Error::Plain(format!(
                            "integral size {size} is larger than limit of {MAX_INT}"
                        )));
                    }
                    int(size, c == b'i')
                }
                b'f' => Ok(Some(Item::Float)),
                b'd' => Ok(Some(Item::Double)),
                b's' => Ok(Some(Item::ZString)),
                b'c' => Ok(Some(Item::Chars(self.number(1)))),
                other => Err(Error::Arg(
                    1,
                    format!("invalid format option '{}'", other as char),
                )),
            };
        }
    }

    /// Padding before an item of `size` bytes at offset `len`.
    fn pad(&self, len: usize, size: usize) -> usize {
        let a = size.min(self.align);
        if a <= 1 { 0 } else { (a - len % a) % a }
    }
}

fn item_size(item: Item) -> usize {
    match item {
        Item::Pad => 1,
        Item::Int { size, .. } => size,
        Item::Float => 4,
        Item::Double => 8,
        Item::ZString | Item::Chars(_) => 0,
    }
}

/// Argument `n` as a number (a numeric string converts, as luaL_checknumber's does).
fn number(v: Option<&Value>, n: usize) -> Result<f64, Error> {
    match v {
        Some(Value::Integer(i)) => Ok(*i as f64),
        Some(Value::Number(x)) => Ok(*x),
        Some(Value::String(s)) => s
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| Error::Arg(n, "number expected, got string".into())),
        other => Err(Error::Arg(
            n,
            format!(
                "number expected, got {}",
                other.map_or("nil", |v| v.type_name())
            ),
        )),
    }
}

/// Argument `n` as bytes (a number converts, as luaL_checklstring's does).
fn bytes(v: Option<&Value>, n: usize) -> Result<Vec<u8>, Error> {
    match v {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Integer(i)) => Ok(format_g14(*i as f64).into_bytes()),
        Some(Value::Number(x)) => Ok(format_g14(*x).into_bytes()),
        other => Err(Error::Arg(
            n,
            format!(
                "string expected, got {}",
                other.map_or("nil", |v| v.type_name())
            ),
        )),
    }
}

fn pack(fmt: &[u8], args: &[Value]) -> Result<Vec<u8>, Error> {
    let mut f = Format::new(fmt);
    let mut out = Vec::new();
    // Argument 1 is the format; values are 2, 3, ...
    let mut used = 0;
    let mut next = || {
        used += 1;
        (args.get(used - 1), used + 1)
    };
    let mut budget = super::budget::Budget::default();
    let mut counted = 0;
    while let Some(item) = f.next()? {
        // What the previous item wrote.
        budget
            .spend(out.len() - counted)
            .map_err(|e| Error::Plain(format!("struct.pack: {e}")))?;
        counted = out.len();
        out.resize(out.len() + f.pad(out.len(), item_size(item)), 0);
        match item {
            Item::Pad => out.push(0),
            Item::Int { size, .. } => {
                let (arg, at) = next();
                let v = number(arg, at)? as i64;
                // Past 8 bytes struct 0.2 pads with zeros, whatever the sign.
                let mut bytes: Vec<u8> = (0..size)
                    .map(|i| if i < 8 { (v >> (8 * i)) as u8 } else { 0 })
                    .collect();
                if !f.little {
                    bytes.reverse();
                }
                out.extend_from_slice(&bytes);
            }
            Item::Float => {
                let (arg, at) = next();
                let b = (number(arg, at)? as f32).to_bits();
                out.extend_from_slice(&if f.little {
                    b.to_le_bytes()
                } else {
                    b.to_be_bytes()
                });
            }
            Item::Double => {
                let (arg, at) = next();
                let b = number(arg, at)?.to_bits();
                out.extend_from_slice(&if f.little {
                    b.to_le_bytes()
                } else {
                    b.to_be_bytes()
                });
            }
            Item::ZString | Item::Chars(_) => {
                let (arg, at) = next();
                let s = bytes(arg, at)?;
                match item {
                    Item::Chars(0) => out.extend_from_slice(&s),
                    Item::Chars(n) => {
                        if s.len() < n {
                            // (struct 0.2 names the argument after this one)
                            return Err(Error::Arg(at + 1, "string too short".into()));
                        }
                        out.extend_from_slice(&s[..n]);
                    }
                    _ => {
                        out.extend_from_slice(&s);
                        out.push(0);
                    }
                }
            }
        }
    }
    Ok(out)
}

fn unpack(lua: &Lua, fmt: &[u8], data: &[u8], start: usize) -> Result<Vec<Value>, Error> {
    let mut f = Format::new(fmt);
    let mut pos = start;
    let mut values: Vec<Value> = Vec::new();
    let take = |pos: &mut usize, n: usize| -> Result<std::ops::Range<usize>, Error> {
        let end = pos
            .checked_add(n)
            .filter(|&e| e <= data.len())
            .ok_or_else(|| Error::Arg(2, "data string too short".into()))?;
        let r = *pos..end;
        *pos = end;
        Ok(r)
    };
    while let Some(item) = f.next()? {
        pos += f.pad(pos, item_size(item));
        match item {
            Item::Pad => {
                take(&mut pos, 1)?;
            }
            Item::Int { size, signed } => {
                let mut bytes = data[take(&mut pos, size)?].to_vec();
                if !f.little {
                    bytes.reverse();
                }
                let mut v: u64 = 0;
                for (i, b) in bytes.iter().take(8).enumerate() {
                    v |= u64::from(*b) << (8 * i);
                }
                let n = if signed && size < 8 && size > 0 && v >> (8 * size - 1) & 1 == 1 {
                    (v | (u64::MAX << (8 * size))) as i64 as f64
                } else if signed {
                    v as i64 as f64
                } else {
                    v as f64
                };
                values.push(Value::Number(n));
            }
            Item::Float => {
                let mut b = [0u8; 4];
                b.copy_from_slice(&data[take(&mut pos, 4)?]);
                let v = if f.little {
                    f32::from_le_bytes(b)
                } else {
                    f32::from_be_bytes(b)
                };
                values.push(Value::Number(f64::from(v)));
            }
            Item::Double => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&data[take(&mut pos, 8)?]);
                let v = if f.little {
                    f64::from_le_bytes(b)
                } else {
                    f64::from_be_bytes(b)
                };
                values.push(Value::Number(v));
            }
            Item::ZString => {
                let rest = data.get(pos..).unwrap_or_default();
                let len = rest
                    .iter()
                    .position(|&b| b == 0)
                    .ok_or_else(|| Error::Plain("unfinished string in data".into()))?;
                let s = lua
                    .create_string(&rest[..len])
                    .map_err(|e| Error::Plain(e.to_string()))?;
                values.push(Value::String(s));
                pos += len + 1;
            }
            Item::Chars(n) => {
                let n = match n {
                    // c0: the length is the value read just before.
                    0 => match values.pop() {
                        Some(Value::Number(len)) if len >= 0.0 => len as usize,
                        _ => return Err(Error::Plain("format 'c0' needs a previous size".into())),
                    },
                    n => n,
                };
                let s = lua
                    .create_string(&data[take(&mut pos, n)?])
                    .map_err(|e| Error::Plain(e.to_string()))?;
                values.push(Value::String(s));
            }
        }
    }
    values.push(Value::Number((pos + 1) as f64));
    Ok(values)
}

/// The `struct` table.
pub(super) fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|lua, (fmt, rest): (mlua::LuaString, MultiValue)| {
            let args: Vec<Value> = rest.into_iter().collect();
            let out = pack(&fmt.as_bytes(), &args).map_err(|e| e.raise(lua, "pack"))?;
            lua.create_string(&out)
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(
            |lua, (fmt, data, pos): (mlua::LuaString, mlua::LuaString, Option<i64>)| {
                let start = usize::try_from(pos.unwrap_or(1).saturating_sub(1)).map_err(|_| {
                    Error::Arg(3, "offset must be 1 or greater".into()).raise(lua, "unpack")
                })?;
                let data = data.as_bytes();
                let values = unpack(lua, &fmt.as_bytes(), &data, start)
                    .map_err(|e| e.raise(lua, "unpack"))?;
                Ok(MultiValue::from_iter(values))
            },
        )?,
    )?;
    t.raw_set(
        "size",
        lua.create_function(|lua, fmt: mlua::LuaString| {
            let fmt = fmt.as_bytes();
            let mut f = Format::new(&fmt);
            let mut size = 0usize;
            while let Some(item) = f.next().map_err(|e| e.raise(lua, "size"))? {
                let unsized_ = match item {
                    Item::ZString => "s",
                    Item::Chars(0) => "c0",
                    _ => "",
                };
                if !unsized_.is_empty() {
                    let text = format!("option '{unsized_}' has no fixed size");
                    return Err(Error::Arg(1, text).raise(lua, "size"));
                }
                size += f.pad(size, item_size(item));
                size += match item {
                    Item::Chars(n) => n,
                    other => item_size(other),
                };
            }
            Ok(size as f64)
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any format over any data unpacks or fails cleanly: never a panic, never a read
        /// past the data.
        #[test]
        fn any_format_and_data_unpack_or_fail_cleanly(
            fmt in "[<>!0-9 xbBhHlLTiIfdsc]{0,12}",
            data in proptest::collection::vec(any::<u8>(), 0..64),
            start in 0usize..80,
        ) {
            let lua = Lua::new();
            let _ = unpack(&lua, fmt.as_bytes(), &data, start);
            let _ = Format::new(fmt.as_bytes()).next();
        }
    }
}
