//! SORT and SORT_RO: the elements of a list, set or sorted set, sorted numerically or
//! (ALPHA) bytewise, by themselves or by the keys a BY pattern names, cut by LIMIT,
//! each replaced by what GET patterns name, returned or stored as a list (STORE), with
//! Redis 7.0's option rules, error texts and ordering (`sort.c`).
//!
//! It reads through the collection families' readers (`lists::all`, `sets::members`,
//! `zsets::all`, `hashes::field`) and stores through [`collection::store`]. Unlike
//! Redis Cluster, BY and GET patterns work whatever agent owns the keys they name: every
//! agent reads the whole pool.
//!
//! Orders Redis leaves to its hash table (a set returned unsorted, `BY nosort`) come out
//! in DMC's own member order; Redis sorts such a set when it stores it or runs in a
//! script, and so does this.

use std::cmp::Ordering;

use bytes::Bytes;
use dmc_dht::ValueKind;
use dmc_resp::Reply;

use crate::lists::ListValue;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, collection, error_reply, parse_i64};

/// The most elements one SORT answers (or stores): 64 Mi, a reply of gigabytes.
const REPLY_MAX: usize = 1 << 26;

/// The parsed options.
#[derive(Debug, Default)]
struct Options {
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    store: Option<Bytes>,
    by: Option<Bytes>,
    /// `BY` without a `*`: nothing is sorted.
    dont_sort: bool,
    gets: Vec<Bytes>,
}

fn parse(s: &Session, args: &[Bytes], read_only: bool) -> Result<Options, Reply> {
    let mut o = Options::default();
    let full_access = s.user.all_keys_allowed();
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = &args[j];
        let is = |w: &[u8]| a.eq_ignore_ascii_case(w);
        if is(b"asc") {
            o.desc = false;
        } else if is(b"desc") {
            o.desc = true;
        } else if is(b"alpha") {
            o.alpha = true;
        } else if is(b"limit") && left >= 2 {
            let (Some(start), Some(count)) = (parse_i64(&args[j + 1]), parse_i64(&args[j + 2]))
            else {
                return Err(Reply::err(NOT_INTEGER));
            };
            o.limit = Some((start, count));
            j += 2;
        } else if !read_only && is(b"store") && left >= 1 {
            o.store = Some(args[j + 1].clone());
            j += 1;
        } else if is(b"by") && left >= 1 {
            let pattern = &args[j + 1];
            if pattern.contains(&b'*') {
                if !full_access {
                    return Err(Reply::err(
                        "ERR BY option of SORT denied due to insufficient ACL permissions.",
                    ));
                }
                o.dont_sort = false;
            } else {
                o.dont_sort = true;
            }
            o.by = Some(pattern.clone());
            j += 1;
        } else if is(b"get") && left >= 1 {
            if !full_access {
                return Err(Reply::err(
                    "ERR GET option of SORT denied due to insufficient ACL permissions.",
                ));
            }
            o.gets.push(args[j + 1].clone());
            j += 1;
        } else {
            return Err(Reply::err(SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

/// The collection to sort, in its own order.
async fn elements(engine: &Engine, db: u8, key: &[u8]) -> Result<(ValueKind, Vec<Bytes>), Reply> {
    let kind = match engine.read_kind(db, key).await.map_err(error_reply)? {
        None => return Ok((ValueKind::List, Vec::new())),
        Some(kind) => kind,
    };
    let items = match kind {
        ValueKind::List => crate::lists::all(engine, db, key).await?,
        ValueKind::Set => crate::sets::members(engine, db, key)
            .await?
            .into_iter()
            .collect(),
        ValueKind::ZSet => crate::zsets::all(engine, db, key)
            .await?
            .into_iter()
            .map(|(m, _)| m)
            .collect(),
        _ => return Err(error_reply(dmc_dht::DhtError::WrongType)),
    };
    Ok((kind, items))
}

/// What a BY or GET pattern names for `element`: `#` is the element itself; otherwise
/// the first `*` is replaced by it, and a `->field` after the `*` reads that field of a
/// hash. A pattern without `*`, a missing key or one of the wrong type names nothing.
async fn lookup(
    engine: &Engine,
    db: u8,
    pattern: &[u8],
    element: &Bytes,
) -> Result<Option<Bytes>, Reply> {
    if pattern == b"#" {
        return Ok(Some(element.clone()));
    }
    let Some(star) = pattern.iter().position(|&b| b == b'*') else {
        return Ok(None);
    };
    let after = &pattern[star + 1..];
    let arrow = after
        .windows(2)
        .position(|w| w == b"->")
        .filter(|&i| i + 2 < after.len());
    let (suffix, field) = match arrow {
        Some(i) => (&after[..i], Some(Bytes::copy_from_slice(&after[i + 2..]))),
        None => (after, None),
    };
    let mut key = Vec::with_capacity(pattern.len() + element.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(element);
    key.extend_from_slice(suffix);
    let found = engine.read_typed(db, &key).await.map_err(error_reply)?;
    match (found, field) {
        (Some((ValueKind::String, v)), None) => Ok(Some(v)),
        (Some((ValueKind::Hash, _)), Some(f)) => crate::hashes::field(engine, db, &key, &f).await,
        _ => Ok(None),
    }
}

/// C's `strtod` as SORT uses it: the whole text must be a number (leading white space
/// allowed, an empty text is 0), not NaN, and not out of a double's range.
fn sort_score(v: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(v).ok()?;
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    if t.is_empty() {
        return (s.is_empty()).then_some(0.0);
    }
    let x: f64 = t.parse().ok()?;
    let lower = t.to_ascii_lowercase();
    let named_infinity = lower.contains("inf");
    let overflow = x.is_infinite() && !named_infinity;
    let underflow = (x == 0.0 || x.is_subnormal())
        && lower
            .split(['e', 'E'])
            .next()
            .is_some_and(|m| m.bytes().any(|b| (b'1'..=b'9').contains(&b)));
    (!x.is_nan() && !overflow && !underflow).then_some(x)
}

/// One element and what it sorts by.
struct Item {
    element: Bytes,
    score: f64,
    /// ALPHA with BY: the value compared (`None`: the pattern named nothing).
    by: Option<Bytes>,
}

fn compare(a: &Item, b: &Item, o: &Options) -> Ordering {
    let cmp = if !o.alpha {
        a.score
            .partial_cmp(&b.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.element.cmp(&b.element))
    } else if o.by.is_some() {
        // A missing value sorts first.
        a.by.cmp(&b.by)
    } else {
        a.element.cmp(&b.element)
    };
    if o.desc { cmp.reverse() } else { cmp }
}

pub async fn run(engine: &Engine, s: &mut Session, args: &[Bytes], read_only: bool) -> Reply {
    match sort(engine, s, args, read_only).await {
        Ok(r) | Err(r) => r,
    }
}

async fn sort(
    engine: &Engine,
    s: &mut Session,
    args: &[Bytes],
    read_only: bool,
) -> Result<Reply, Reply> {
    let db = engine.physical_db(s.db);
    let mut o = parse(s, args, read_only)?;
    let _held = match &o.store {
        Some(dst) => Some(engine.lock_key(dst).await),
        None => None,
    };
    let (kind, items) = elements(engine, db, &args[1]).await?;
    // A set's own order is not one Redis would give: stored or scripted, it is sorted.
    if o.dont_sort && kind == ValueKind::Set && (o.store.is_some() || s.in_script) {
        o.dont_sort = false;
        o.alpha = true;
        o.by = None;
    }
    let len = items.len() as i64;
    let (limit_start, limit_count) = o.limit.unwrap_or((0, -1));
    let mut start = limit_start.clamp(0, len);
    let count = limit_count.clamp(-1, len);
    let mut end = if count < 0 {
        len - 1
    } else {
        start + count - 1
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    end = end.min(len - 1);

    let mut items: Vec<Item> = items
        .into_iter()
        .map(|element| Item {
            element,
            score: 0.0,
            by: None,
        })
        .collect();
    if o.dont_sort {
        // Lists and sorted sets keep their order; DESC reverses it.
        if o.desc && kind != ValueKind::Set {
            items.reverse();
        }
    } else {
        let mut convert_error = false;
        for it in &mut items {
            let by = match &o.by {
                Some(p) => match lookup(engine, db, p, &it.element).await? {
                    Some(v) => v,
                    None => continue,
                },
                None => it.element.clone(),
            };
            if o.alpha {
                if o.by.is_some() {
                    it.by = Some(by);
                }
            } else {
                match sort_score(&by) {
                    Some(x) => it.score = x,
                    None => convert_error = true,
                }
            }
        }
        if convert_error {
            return Err(Reply::err(
                "ERR One or more scores can't be converted into double",
            ));
        }
        items.sort_by(|a, b| compare(a, b, &o));
    }

    let picked: &[Item] = if start <= end && start >= 0 {
        &items[start as usize..=end as usize]
    } else {
        &[]
    };
    // Bounded before anything is read: `elements × GETs` came from the client, and a
    // reservation that large aborted the agent.
    let n = picked.len().saturating_mul(o.gets.len().max(1));
    if n > REPLY_MAX {
        return Err(Reply::Error(format!(
            "ERR SORT would answer {n} elements, more than {REPLY_MAX}: use LIMIT"
        )));
    }
    let mut out: Vec<Option<Bytes>> = Vec::with_capacity(n.min(4096));
    for it in picked {
        if o.gets.is_empty() {
            out.push(Some(it.element.clone()));
        }
        for g in &o.gets {
            out.push(lookup(engine, db, g, &it.element).await?);
        }
    }
    let Some(dst) = &o.store else {
        return Ok(Reply::Array(
            out.into_iter()
                .map(|v| v.map_or(Reply::Null, Reply::Bulk))
                .collect(),
        ));
    };
    let n = out.len() as i64;
    let mut list = ListValue::default();
    for v in out {
        list.push(crate::lists::End::Right, v.unwrap_or_default());
    }
    let value = (n > 0).then(|| list.encode());
    collection::store(engine, db, dst, (ValueKind::List, "sortstore"), value).await?;
    if n > 0 {
        engine.blocking.wake(db, dst);
    }
    Ok(Reply::Int(n))
}

#[cfg(test)]
mod tests {
    use super::sort_score;

    #[test]
    fn scores_parse_as_strtod_does() {
        assert_eq!(sort_score(b"1.5"), Some(1.5));
        assert_eq!(sort_score(b" 2"), Some(2.0));
        assert_eq!(sort_score(b""), Some(0.0));
        assert_eq!(sort_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(sort_score(b"0e5"), Some(0.0));
        assert_eq!(sort_score(b"1e400"), None);
        assert_eq!(sort_score(b"1e-400"), None);
        assert_eq!(sort_score(b"nan"), None);
        assert_eq!(sort_score(b"1 "), None);
        assert_eq!(sort_score(b" "), None);
        assert_eq!(sort_score(b"abc"), None);
    }
}
