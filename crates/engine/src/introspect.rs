//! Introspection of single keys: `OBJECT` and `MEMORY`. These read a key without
//! counting as an access, as Redis's do, so `OBJECT IDLETIME` is not reset by asking.

use bytes::Bytes;
use dmc_dht::RedisPolicy;
use dmc_resp::Reply;

use crate::subcommands::{help, refused};
use crate::upper;
use crate::{Engine, NOT_INTEGER, Session, error_reply, parse_i64};

/// Redis's encoding of a string value: `int` for a canonical 64-bit integer, `embstr`
/// up to 44 bytes, `raw` above.
pub fn string_encoding(value: &[u8]) -> &'static str {
    if value.len() <= 20 && parse_i64(value).is_some() {
        "int"
    } else if value.len() <= 44 {
        "embstr"
    } else {
        "raw"
    }
}

fn is_lfu(p: RedisPolicy) -> bool {
    matches!(p, RedisPolicy::AllKeysLfu | RedisPolicy::VolatileLfu)
}

/// `OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT key`, `OBJECT HELP`.
pub async fn object(engine: &Engine, s: &Session, args: &[Bytes]) -> Reply {
    let sub = upper(&args[1]);
    if sub == "HELP" && args.len() == 2 {
        return help(&[
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "FREQ <key>",
            "    Return the access frequency index of the <key>. The returned integer is",
            "    proportional to the logarithm of the recent access frequency of the key.",
            "IDLETIME <key>",
            "    Return the idle time of the <key>, that is the approximated number of",
            "    seconds elapsed since the last access to the key.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified",
            "    <key>.",
            "HELP",
            "    Print this help.",
        ]);
    }
    if args.len() != 3 || !matches!(sub.as_str(), "ENCODING" | "FREQ" | "IDLETIME" | "REFCOUNT") {
        return refused(
            "OBJECT",
            &args[1],
            &["ENCODING", "FREQ", "IDLETIME", "REFCOUNT", "HELP"],
        );
    }
    let db = engine.physical_db(s.db);
    let Some((entry, _)) = (match engine.dht.peek(db, &args[2]).await {
        Ok(found) => found,
        Err(e) => return error_reply(e),
    }) else {
        return Reply::Null;
    };
    let policy = engine.dht.policy();
    match sub.as_str() {
        "ENCODING" => match crate::collection::encoding(entry.kind, &entry.value) {
            Ok(name) => Reply::bulk(name),
            Err(e) => Reply::from(e),
        },
        "REFCOUNT" => Reply::Int(1),
        "FREQ" if is_lfu(policy) => Reply::Int(i64::from(entry.lfu)),
        "FREQ" => Reply::err(
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked. \
             Please note that when switching between policies at runtime LRU and LFU data \
             will take some time to adjust.",
        ),
        _ if is_lfu(policy) => Reply::err(
            "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note \
             that when switching between policies at runtime LRU and LFU data will take \
             some time to adjust.",
        ),
        _ => Reply::Int(entry.idle_secs as i64),
    }
}

/// `DEBUG OBJECT key`, in Redis's format; "Value at" is the key's metadata word in the
/// pool, `serializedlength` the bytes of its value as stored.
pub async fn debug_object(engine: &Engine, s: &Session, key: &[u8]) -> Reply {
    let db = engine.physical_db(s.db);
    let entry = match engine.dht.peek(db, key).await {
        Ok(Some((entry, _))) => entry,
        Ok(None) => return Reply::err("ERR no such key"),
        Err(e) => return error_reply(e),
    };
    let encoding = match crate::collection::encoding(entry.kind, &entry.value) {
        Ok(name) => name,
        Err(e) => return Reply::from(e),
    };
    let lru = (engine.now_ms() / 1000).saturating_sub(entry.idle_secs) & 0xff_ffff;
    Reply::Status(format!(
        "Value at:0x{:x} refcount:1 encoding:{encoding} serializedlength:{} lru:{lru} \
         lru_seconds_idle:{}",
        entry.slot.meta_addr().bits(),
        entry.value.len(),
        entry.idle_secs
    ))
}

/// The bytes of the chunks of `entry`'s tree (0 for a value that is not a tree).
async fn tree_bytes(
    engine: &Engine,
    db: u8,
    key: &[u8],
    entry: &dmc_dht::Entry,
) -> Result<u64, Reply> {
    if entry.kind == dmc_dht::ValueKind::String {
        return Ok(0);
    }
    let mut bytes = 0;
    for root in dmc_umo::chunk::TreeRoot::parse_all(&entry.value) {
        let tree = crate::tree::Tree::open(engine.dht.pool(), crate::big::tag(db, key), root, None);
        let blocks = tree.blocks().await.map_err(Reply::from)?;
        bytes += blocks.iter().map(|b| u64::from(b.size())).sum::<u64>();
    }
    Ok(bytes)
}

/// `MEMORY USAGE key [SAMPLES n]`, `MEMORY STATS`, `MEMORY DOCTOR`, `MEMORY HELP`.
pub async fn memory(engine: &Engine, s: &Session, args: &[Bytes]) -> Reply {
    let sub = upper(&args[1]);
    match (sub.as_str(), args.len()) {
        ("USAGE", 3) | ("USAGE", 5) => {
            if args.len() == 5 {
                if upper(&args[3]) != "SAMPLES" {
                    return Reply::err(crate::SYNTAX);
                }
                if parse_i64(&args[4]).is_none_or(|n| n < 0) {
                    return Reply::err(NOT_INTEGER);
                }
            }
            let db = engine.physical_db(s.db);
            match engine.dht.peek(db, &args[2]).await {
                // One copy's pool bytes: the slot and the object's blocks, and the
                // chunks of a collection stored as a tree.
                Ok(Some((entry, bytes))) => match tree_bytes(engine, db, &args[2], &entry).await {
                    Ok(chunks) => Reply::Int((bytes + chunks) as i64),
                    Err(r) => r,
                },
                Ok(None) => Reply::Null,
                Err(e) => error_reply(e),
            }
        }
        ("STATS", 2) => {
            let st = engine.dht.stats();
            let keys = engine.dht.key_count();
            let cache = engine.cache.as_ref().map(|c| c.stats());
            let mut rows: Vec<(Reply, Reply)> = vec![
                (Reply::bulk("dataset.bytes"), Reply::Int(st.used_memory as i64)),
                (Reply::bulk("keys.count"), Reply::Int(keys)),
                (
                    Reply::bulk("keys.bytes-per-key"),
                    Reply::Int(if keys > 0 { st.used_memory as i64 / keys } else { 0 }),
                ),
                (
                    Reply::bulk("maxmemory"),
                    Reply::Int(engine.dht.maxmemory() as i64),
                ),
            ];
            if let Some(c) = cache {
                rows.push((Reply::bulk("local-cache.bytes"), Reply::Int(c.bytes as i64)));
                rows.push((Reply::bulk("local-cache.keys"), Reply::Int(c.keys as i64)));
            }
            Reply::Map(rows)
        }
        ("DOCTOR", 2) => Reply::Verbatim(Bytes::from_static(
            b"Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.",
        )),
        ("MALLOC-STATS", 2) => Reply::Verbatim(Bytes::from_static(
            b"Stats not supported for the current allocator",
        )),
        ("PURGE", 2) => Reply::ok(),
        ("HELP", 2) => help(&[
            "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "DOCTOR",
            "    Return memory problems reports.",
            "MALLOC-STATS",
            "    Return internal statistics report from the memory allocator.",
            "PURGE",
            "    Attempt to purge dirty pages for reclamation by the allocator.",
            "STATS",
            "    Return information about the memory usage of the server.",
            "USAGE <key> [SAMPLES <count>]",
            "    Return memory in bytes used by <key> and its value. Nested values are",
            "    sampled up to <count> times (default: 5, 0 means sample all).",
            "HELP",
            "    Print this help.",
        ]),
        _ => refused("MEMORY", &args[1], &["USAGE", "STATS", "DOCTOR", "MALLOC-STATS", "PURGE", "HELP"]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_follow_redis() {
        assert_eq!(string_encoding(b"12345"), "int");
        assert_eq!(string_encoding(b"-9223372036854775808"), "int");
        assert_eq!(string_encoding(b"012"), "embstr");
        assert_eq!(string_encoding(&[b'a'; 44]), "embstr");
        assert_eq!(string_encoding(&[b'a'; 45]), "raw");
    }
}
