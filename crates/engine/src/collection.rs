//! What the collection families share: storing a STORE form's result, Redis's
//! listpack limits, and the argument parsing of counts, keys and scan options.
//! (Reading and changing a collection in either of its forms is [`crate::big`]'s and,
//! for sorted sets, [`crate::zsets::stored`]'s.)

use bytes::Bytes;
use dmc_dht::ValueKind;
use dmc_resp::Reply;

use crate::packed::{Corrupt, Packed};
use crate::{Engine, NOT_INTEGER, SYNTAX, error_reply, parse_i64};

/// Redis's `hash-max-listpack-entries` and `-value` (and the zset ones, which are the
/// same): past them Redis converts to a hash table (skiplist), and OBJECT ENCODING says
/// so.
pub const MAX_LISTPACK_ENTRIES: usize = 128;
pub const MAX_LISTPACK_VALUE: usize = 64;
/// The most elements one reply of HRANDFIELD and friends may ask for: a negative count
/// repeats elements, so without a bound one command could demand unbounded memory.
pub const MAX_REPLY_ELEMENTS: u64 = 10_000_000;

impl From<Corrupt> for Reply {
    fn from(_: Corrupt) -> Reply {
        Reply::err(
            "ERR a collection's value in the pool is malformed (written by an incompatible agent?)",
        )
    }
}

/// Replaces `key` (of any type) with a `kind` holding the packed `value`, or deletes
/// it when `None` (an empty result): the STORE forms, which announce `event` (or `del`
/// when an existing key went). The caller holds the key's lock.
pub(crate) async fn store(
    engine: &Engine,
    db: u8,
    key: &[u8],
    (kind, event): (ValueKind, &'static str),
    value: Option<Vec<u8>>,
) -> Result<(), Reply> {
    match value {
        Some(v) => {
            let opts = dmc_dht::SetOptions {
                kind,
                ..Default::default()
            };
            engine
                .dht
                .set(db, key, &v, opts)
                .await
                .map_err(error_reply)?;
            engine.notify(crate::notify::class_of(kind), event, db, key);
        }
        None => {
            if engine.dht.delete(db, key).await.map_err(error_reply)? {
                engine.notify(crate::notify::GENERIC, "del", db, key);
            }
        }
    }
    engine.wrote_typed(db, key, kind, None);
    Ok(())
}

/// `numkeys key [key ...] [LIMIT limit]` from `args[at]` (SINTERCARD, ZINTERCARD):
/// the keys and the limit (0 or none: no limit).
pub(crate) fn numkeys_with_limit(
    args: &[Bytes],
    at: usize,
) -> Result<(&[Bytes], Option<usize>), Reply> {
    let keys = numkeys(args, at)?;
    let rest = &args[at + 1 + keys.len()..];
    let limit = match rest {
        [] => None,
        [opt, n] if opt.eq_ignore_ascii_case(b"LIMIT") => match parse_i64(n) {
            Some(l) if l >= 0 => Some(l as usize),
            Some(_) => return Err(Reply::err("ERR LIMIT can't be negative")),
            None => return Err(Reply::err(NOT_INTEGER)),
        },
        _ => return Err(Reply::err(SYNTAX)),
    };
    Ok((keys, limit))
}

/// LMPOP's, BLMPOP's, ZMPOP's and BZMPOP's arguments: keys, end and count.
pub(crate) struct MPop<E> {
    pub keys: Vec<Bytes>,
    pub end: E,
    pub count: usize,
}

/// Parses `numkeys key... END [COUNT n]` from `args[at]`, the end by `end_of`, with
/// Redis's texts (a count past the arguments is a syntax error).
pub(crate) fn parse_mpop<E>(
    args: &[Bytes],
    at: usize,
    end_of: fn(&[u8]) -> Option<E>,
) -> Result<MPop<E>, Reply> {
    let n = parse_i64(&args[at])
        .filter(|&n| n > 0)
        .ok_or_else(|| Reply::err("ERR numkeys should be greater than 0"))?;
    let first = at + 1;
    let end_at = first
        .checked_add(n as usize)
        .filter(|&e| e < args.len())
        .ok_or_else(|| Reply::err(SYNTAX))?;
    let end = end_of(&args[end_at]).ok_or_else(|| Reply::err(SYNTAX))?;
    let count = match &args[end_at + 1..] {
        [] => 1,
        [opt, c] if opt.eq_ignore_ascii_case(b"COUNT") => match parse_i64(c) {
            Some(c) if c > 0 => c as usize,
            _ => return Err(Reply::err("ERR count should be greater than 0")),
        },
        _ => return Err(Reply::err(SYNTAX)),
    };
    Ok(MPop {
        keys: args[first..end_at].to_vec(),
        end,
        count,
    })
}

/// The keys a `numkeys` count at `args[at]` announces.
pub(crate) fn numkeys(args: &[Bytes], at: usize) -> Result<&[Bytes], Reply> {
    let n = args
        .get(at)
        .and_then(|a| parse_i64(a))
        .ok_or_else(|| Reply::err(NOT_INTEGER))?;
    if n <= 0 {
        return Err(Reply::err("ERR numkeys should be greater than 0"));
    }
    let first = at + 1;
    let end = first
        .checked_add(n as usize)
        .filter(|&e| e <= args.len())
        .ok_or_else(|| Reply::err("ERR Number of keys can't be greater than number of args"))?;
    Ok(&args[first..end])
}

/// OBJECT ENCODING's answer for a value of type `kind`: the name Redis reports for the
/// same shape.
pub fn encoding(kind: ValueKind, value: &Bytes) -> Result<&'static str, Corrupt> {
    if kind == ValueKind::ChunkedString {
        return Ok("raw");
    }
    if kind != ValueKind::String && dmc_umo::chunk::TreeRoot::parse(value).is_some() {
        // A tree is the big form of every type.
        return Ok(match kind {
            ValueKind::List => "quicklist",
            ValueKind::ZSet => "skiplist",
            ValueKind::Stream => "stream",
            _ => "hashtable",
        });
    }
    Ok(match kind {
        ValueKind::String => crate::introspect::string_encoding(value),
        ValueKind::Hash => crate::hashes::encoding(&Packed::parse(value)?),
        ValueKind::List => crate::lists::encoding(&Packed::parse(value)?),
        ValueKind::Set => crate::sets::encoding(&Packed::parse(value)?)?,
        ValueKind::ZSet => crate::zsets::encoding(&Packed::parse(value)?),
        ValueKind::Stream => "stream",
        ValueKind::ChunkedString => "raw",
    })
}

/// A count argument (HRANDFIELD, SPOP, ...): Redis's integer, bounded so that a reply
/// stays within [`MAX_REPLY_ELEMENTS`].
pub(crate) fn count_arg(arg: &[u8]) -> Result<i64, Reply> {
    let n = parse_i64(arg).ok_or_else(|| Reply::err(NOT_INTEGER))?;
    if n.unsigned_abs() > MAX_REPLY_ELEMENTS {
        return Err(Reply::err(format!(
            "ERR value is out of range, must be between -{MAX_REPLY_ELEMENTS} and {MAX_REPLY_ELEMENTS}"
        )));
    }
    Ok(n)
}

/// `HSCAN`/`SSCAN`/`ZSCAN`'s arguments after the key.
pub(crate) struct ScanArgs {
    pub cursor: u64,
    pub pattern: Option<Bytes>,
    /// How many elements a call looks at (Redis's default 10); a packed collection
    /// answers whole in one call, as Redis's listpacks do.
    pub count: usize,
    /// `NOVALUES` (HSCAN only).
    pub no_values: bool,
}

pub(crate) fn scan_args(args: &[Bytes], allow_novalues: bool) -> Result<ScanArgs, Reply> {
    let cursor = std::str::from_utf8(&args[2])
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
        .ok_or_else(|| Reply::err("ERR invalid cursor"))?;
    let mut out = ScanArgs {
        cursor,
        pattern: None,
        count: 10,
        no_values: false,
    };
    let mut i = 3;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        match (&opt[..], args.get(i + 1)) {
            (b"MATCH", Some(p)) => {
                out.pattern = Some(p.clone());
                i += 2;
            }
            (b"COUNT", Some(c)) => {
                match parse_i64(c) {
                    Some(n) if n >= 1 => out.count = n.min(1 << 20) as usize,
                    Some(_) => return Err(Reply::err(SYNTAX)),
                    None => return Err(Reply::err(NOT_INTEGER)),
                }
                i += 2;
            }
            (b"NOVALUES", _) if allow_novalues => {
                out.no_values = true;
                i += 1;
            }
            _ => return Err(Reply::err(SYNTAX)),
        }
    }
    Ok(out)
}

/// Whether `item` passes a scan's MATCH pattern.
pub(crate) fn matches(pattern: &Option<Bytes>, item: &[u8]) -> bool {
    pattern
        .as_ref()
        .is_none_or(|p| crate::glob::glob(p, item, false))
}

/// A scan's reply: the next cursor and the items of this call.
pub(crate) fn scan_reply(cursor: u64, items: Vec<Reply>) -> Reply {
    Reply::Array(vec![Reply::bulk(cursor.to_string()), Reply::Array(items)])
}

/// `n` distinct indexes below `len` in random order (n ≤ len), by a partial
/// Fisher–Yates shuffle.
pub(crate) fn distinct_picks(len: usize, n: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..len).collect();
    for i in 0..n.min(len) {
        let j = i + dmc_proto::rng::below((len - i) as u64) as usize;
        idx.swap(i, j);
    }
    idx.truncate(n.min(len));
    idx
}

/// The positions a random-member command (HRANDFIELD, SRANDMEMBER, ZRANDMEMBER) with
/// `count` picks from `len` elements: distinct ones for a positive count, repeats
/// allowed for a negative one (Redis's rule).
pub(crate) fn count_picks(len: usize, count: i64) -> Vec<usize> {
    if count > 0 {
        distinct_picks(len, count as usize)
    } else {
        repeated_picks(len, count.unsigned_abs() as usize)
    }
}

/// Whether a random-member command's optional last argument `args[3]` is `flag`
/// (`WITHVALUES`, `WITHSCORES`); anything else there is a syntax error.
pub(crate) fn with_flag(args: &[Bytes], flag: &[u8]) -> Result<bool, Reply> {
    match args.get(3) {
        None => Ok(false),
        Some(a) if a.eq_ignore_ascii_case(flag) && args.len() == 4 => Ok(true),
        Some(_) => Err(Reply::err(SYNTAX)),
    }
}

/// `n` indexes below `len`, repeats allowed; none when `len` is 0.
pub(crate) fn repeated_picks(len: usize, n: usize) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    (0..n)
        .map(|_| dmc_proto::rng::below(len as u64) as usize)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_stay_in_range_and_distinct_picks_do_not_repeat() {
        let p = distinct_picks(10, 20);
        assert_eq!(p.len(), 10);
        let mut sorted = p.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 10);
        assert!(repeated_picks(3, 50).iter().all(|&i| i < 3));
        // Regression: HRANDFIELD on a missing key picked from nothing and panicked.
        assert!(repeated_picks(0, 1).is_empty());
        assert!(distinct_picks(0, 5).is_empty());
    }

    #[test]
    fn counts_are_bounded() {
        assert_eq!(count_arg(b"-5").ok(), Some(-5));
        assert!(count_arg(b"-9223372036854775807").is_err());
        assert!(count_arg(b"x").is_err());
    }

    #[test]
    fn scan_options_parse_as_redis_does() {
        let args: Vec<Bytes> = ["hscan", "k", "0", "MATCH", "a*", "COUNT", "10", "NOVALUES"]
            .iter()
            .map(|s| Bytes::from(*s))
            .collect();
        let Ok(a) = scan_args(&args, true) else {
            panic!("valid scan arguments refused")
        };
        assert!(a.no_values && a.pattern.is_some() && a.cursor == 0);
        assert!(scan_args(&args, false).is_err());
        let bad: Vec<Bytes> = ["hscan", "k", "x"]
            .iter()
            .map(|s| Bytes::from(*s))
            .collect();
        assert!(scan_args(&bad, true).is_err());
    }
}
