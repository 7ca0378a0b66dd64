//! The HyperLogLog family: PFADD, PFCOUNT, PFMERGE and PFDEBUG over string values
//! holding Redis's exact HLL bytes ([`crate::hll`]), so a `GET` of an HLL key, a `SET`
//! of one taken from Redis, and DUMP/RESTORE in either direction all work.
//!
//! PFADD and PFMERGE are read-modify-writes under the key's lock (`Dht::update_kind`);
//! a PFADD that changes no register writes nothing, and PFADDs of one key that arrive
//! together are applied as one batch with one write ([`crate::combine`]). PFCOUNT of one key whose cached
//! cardinality is stale computes it and, when this agent owns the key (only the owner
//! writes), stores it back as Redis does; another agent answers without writing.

use std::sync::Arc;

use bytes::Bytes;
use dmc_resp::Reply;
use futures::future::BoxFuture;

use crate::combine::{Answer, Batch, Combiner};

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
    crate::strings::rewrite(engine, db, key, |cur| {
        f(cur).map(|h| h.map(Hll::into_bytes))
    })
    .await?
    .map_err(Reply::from)
}

/// A PFADD waiting to be combined with the others of its key: the batch parses the
/// HLL once, adds every PFADD's elements in arrival order and writes it once.
pub(crate) struct PfAddOp {
    elements: Vec<Bytes>,
}

impl Batch for PfAddOp {
    /// Whether this PFADD changed the HLL (its reply).
    type Out = bool;

    fn combiner(engine: &Engine) -> &Combiner<Self> {
        &engine.pfadd_batches
    }

    fn run(
        engine: Arc<Engine>,
        db: u8,
        key: Bytes,
        ops: Vec<Self>,
    ) -> BoxFuture<'static, Result<Vec<Answer<Self>>, Reply>> {
        Box::pin(async move {
            let mut answers: Vec<Answer<Self>> = Vec::new();
            crate::strings::rewrite_locked(&engine, db, &key, |cur| {
                answers.clear();
                let (mut hll, mut created) = match cur.map(Hll::parse) {
                    Some(Ok(h)) => (h, false),
                    Some(Err(e)) => {
                        answers.extend(ops.iter().map(|_| Err(Reply::from(e))));
                        return Ok::<_, std::convert::Infallible>(None);
                    }
                    None => (Hll::new(), true),
                };
                let mut changed = false;
                for op in &ops {
                    // Only a sparse HLL can fail half-way: keep what it was, as a PFADD
                    // alone would have written nothing.
                    let before = (!hll.is_dense()).then(|| hll.clone());
                    match hll.add_all(&op.elements, created, SPARSE_MAX_BYTES) {
                        Ok(updated) => {
                            changed |= updated;
                            created = false;
                            answers.push(Ok(updated));
                        }
                        Err(e) => {
                            if let Some(b) = before {
                                hll = b;
                            }
                            answers.push(Err(Reply::from(e)));
                        }
                    }
                }
                Ok(changed.then(|| hll.into_bytes()))
            })
            .await?
            .unwrap_or_else(|never| match never {});
            Ok(answers)
        })
    }
}

async fn pfadd(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let key = &args[1];
    let op = PfAddOp {
        elements: args[2..].to_vec(),
    };
    let updated = engine.pfadd_batches.submit(engine, db, key, op).await?;
    if updated {
        engine.notify(notify::STRING, "pfadd", db, key);
    }
    Ok(Reply::Int(i64::from(updated)))
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
