//! The HyperLogLog family: PFADD, PFCOUNT, PFMERGE and PFDEBUG over string values
//! holding Redis's exact HLL bytes ([`crate::hll`]), so a `GET` of an HLL key, a `SET`
//! of one taken from Redis, and DUMP/RESTORE in either direction all work.
//!
//! PFADD and PFMERGE are read-modify-writes under the key's lock (`Dht::update_kind`);
//! a PFADD that changes no register writes nothing. PFCOUNT of one key whose cached
//! cardinality is stale computes it and, when this agent owns the key (only the owner
//! writes), stores it back as Redis does; another agent answers without writing.

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;

use crate::hll::{Hll, HllError, HllUnion, REGISTERS};
use crate::table::HllCmd;
use crate::{Engine, Session, error_reply, notify};

/// Redis's `hll-sparse-max-bytes` default: a sparse HLL past it becomes dense.
const SPARSE_MAX_BYTES: usize = 3000;

impl From<HllError> for Reply {
    fn from(e: HllError) -> Reply {
        Reply::Error(e.to_string())
    }
}

pub async fn run(engine: &Engine, s: &mut Session, cmd: HllCmd, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    let result = match cmd {
        HllCmd::PfAdd => pfadd(engine, db, args).await,
        HllCmd::PfCount => pfcount(engine, db, args).await,
        HllCmd::PfMerge => pfmerge(engine, db, args).await,
        HllCmd::PfDebug => pfdebug(engine, db, args).await,
    };
    result.unwrap_or_else(|r| r)
}

/// Changes the HLL `key` under its lock: `f` gets the current value (`None`: missing)
/// and returns the new one, or `None` to leave the key as it is. Whether it wrote.
async fn edit(
    engine: &Engine,
    db: u8,
    key: &Bytes,
    mut f: impl FnMut(Option<&[u8]>) -> Result<Option<Hll>, HllError>,
) -> Result<bool, Reply> {
    let _g = engine.lock_key(key).await;
    let mut written = false;
    let updated = engine
        .dht
        .update_kind(db, key, ValueKind::String, |cur| {
            Ok::<_, HllError>(match f(cur.map(|b| &b[..]))? {
                Some(hll) => {
                    written = true;
                    Change::Write(hll.into_bytes().into())
                }
                None => {
                    written = false;
                    Change::Keep
                }
            })
        })
        .await;
    match updated {
        Ok(Ok(())) => {
            if written {
                engine.wrote(db, key, None);
            }
            Ok(written)
        }
        Ok(Err(e)) => Err(Reply::from(e)),
        Err(e) => Err(error_reply(e)),
    }
}

async fn pfadd(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let key = &args[1];
    let written = edit(engine, db, key, |cur| {
        let (mut hll, created) = match cur {
            Some(v) => (Hll::parse(v)?, false),
            None => (Hll::new(), true),
        };
        let updated = hll.add_all(&args[2..], created, SPARSE_MAX_BYTES)?;
        Ok(updated.then_some(hll))
    })
    .await?;
    if written {
        engine.notify(notify::STRING, "pfadd", db, key);
    }
    Ok(Reply::Int(i64::from(written)))
}

/// The HLL at `key` (`None`: missing); WRONGTYPE for another type or a string that is
/// not an HLL.
async fn load(engine: &Engine, db: u8, key: &[u8]) -> Result<Option<Hll>, Reply> {
    match engine.read(db, key).await.map_err(error_reply)? {
        Some(v) => Ok(Some(Hll::parse(&v)?)),
        None => Ok(None),
    }
}

async fn pfcount(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    if args.len() > 2 {
        // Several keys: their union's estimate, nothing written.
        let mut union = HllUnion::new();
        for key in &args[1..] {
            if let Some(hll) = load(engine, db, key).await? {
                union.add(&hll)?;
            }
        }
        return Ok(Reply::Int(union.count() as i64));
    }
    let key = &args[1];
    let Some(mut hll) = load(engine, db, key).await? else {
        return Ok(Reply::Int(0));
    };
    let before = hll.as_bytes().to_vec();
    let (card, changed) = hll.count()?;
    let owner = engine
        .dht
        .ownership()
        .lease(dmc_dht::hash::key_slot(key))
        .is_some();
    if changed && owner {
        // Store the cache, unless the key changed since it was read.
        let cached = hll.into_bytes();
        edit(engine, db, key, |cur| {
            (cur == Some(&before[..]))
                .then(|| Hll::parse(&cached))
                .transpose()
        })
        .await?;
    }
    Ok(Reply::Int(card as i64))
}

async fn pfmerge(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let dest = &args[1];
    // The sources first (outside the destination's lock), in argument order after
    // the destination, which is merged first under the lock.
    let mut sources = Vec::with_capacity(args.len() - 2);
    for key in &args[2..] {
        sources.push(load(engine, db, key).await?);
    }
    edit(engine, db, dest, |cur| {
        let current = cur.map(Hll::parse).transpose()?;
        let mut union = HllUnion::new();
        if let Some(d) = &current {
            union.add(d)?;
        }
        for hll in sources.iter().flatten() {
            union.add(hll)?;
        }
        Ok(Some(union.store(current, SPARSE_MAX_BYTES)?))
    })
    .await?;
    engine.notify(notify::STRING, "pfadd", db, dest);
    Ok(Reply::ok())
}

async fn pfdebug(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let sub = &args[1];
    let key = &args[2];
    let Some(hll) = load(engine, db, key).await? else {
        return Err(Reply::err("ERR The specified key does not exist"));
    };
    if sub.eq_ignore_ascii_case(b"getreg") {
        // Redis converts a sparse HLL to dense in place first.
        if !hll.is_dense() {
            edit(engine, db, key, |cur| {
                let mut h = Hll::parse(cur.unwrap_or_default())?;
                Ok(h.to_dense()?.then_some(h))
            })
            .await?;
        }
        let regs = hll.registers()?;
        debug_assert_eq!(regs.len(), REGISTERS);
        return Ok(Reply::Array(
            regs.iter().map(|&r| Reply::Int(i64::from(r))).collect(),
        ));
    }
    if sub.eq_ignore_ascii_case(b"decode") {
        return match hll.decode() {
            Some(text) => Ok(Reply::bulk(text)),
            None => Err(Reply::err("ERR HLL encoding is not sparse")),
        };
    }
    if sub.eq_ignore_ascii_case(b"encoding") {
        return Ok(Reply::Status(hll.encoding_name().into()));
    }
    if sub.eq_ignore_ascii_case(b"todense") {
        let mut converted = false;
        edit(engine, db, key, |cur| {
            let mut h = Hll::parse(cur.unwrap_or_default())?;
            converted = h.to_dense()?;
            Ok(converted.then_some(h))
        })
        .await?;
        return Ok(Reply::Int(i64::from(converted)));
    }
    Err(Reply::Error(format!(
        "ERR Unknown PFDEBUG subcommand '{}'",
        String::from_utf8_lossy(sub)
    )))
}
