//! Same-key string writes combined (issue 14 item 4; SMART's write combining, thesis
//! ch. 4): a SET or a counter change (INCR, DECR, INCRBY, DECRBY) that finds its key's
//! lock taken queues on the key's [`Combiner`] instead of waiting for the lock. The
//! key's worker takes the queue in arrival order and, per run of one kind,
//!
//! * writes only the last of a run of SETs (each replaces all of the key's state, so
//!   the last value wins, as running them in order would leave it), and
//! * applies a run of counter changes to one read of the key, committed once, each
//!   answered the value right after its own step (a step that would overflow, or a
//!   value that is not an integer, is answered its error and changes nothing).
//!
//! Every change is answered after the commit that holds it, and announced as it would
//! have been alone. SETs with a condition (NX, XX), GET or KEEPTTL depend on or keep
//! state a superseded SET would have changed: they wait for the lock instead.

use std::sync::Arc;

use bytes::Bytes;
use dmc_dht::{SetCond, SetExpiry, SetOptions, ValueKind};
use dmc_resp::Reply;
use futures::future::BoxFuture;

use super::{counted, rewrite_locked, set_announced, set_cached};
use crate::combine::{Answer, Batch, Combiner};
use crate::{Engine, error_reply, notify};

/// One combinable write of a string.
pub(crate) enum StringWrite {
    /// An unconditional SET without GET or KEEPTTL: the value and its options.
    Set(Bytes, SetOptions),
    /// A counter change by this step.
    Add(i64),
}

impl StringWrite {
    /// Whether a SET with `opts` replaces the key's whole state whatever it was, so
    /// that a later SET of the same run makes it unobservable.
    pub(crate) fn combinable(opts: &SetOptions) -> bool {
        !opts.get
            && opts.cond == SetCond::Always
            && opts.kind == ValueKind::String
            && !matches!(opts.expiry, SetExpiry::Keep)
    }

    /// Whether a change that found its key taken may join the key's batch: not inside
    /// an EXEC or a script (a key it has not locked waits for the lock there; the
    /// combiner would run the change on its task, unlocked), and not for a NOLOOP
    /// tracker's or a peer agent's command (the worker's task does not know who
    /// changed the key, so the tracker would be told of its own write).
    pub(crate) fn may_combine() -> bool {
        !crate::multi::in_exec() && crate::tracking::modifier().is_none()
    }

    fn is_set(&self) -> bool {
        matches!(self, StringWrite::Set(..))
    }
}

impl Batch for StringWrite {
    type Out = Reply;

    fn combiner(engine: &Engine) -> &Combiner<Self> {
        &engine.string_writes
    }

    fn run(
        engine: Arc<Engine>,
        db: u8,
        key: Bytes,
        ops: Vec<Self>,
    ) -> BoxFuture<'static, Result<Vec<Answer<Self>>, Reply>> {
        Box::pin(async move {
            let mut answers = Vec::with_capacity(ops.len());
            let mut rest = &ops[..];
            while let Some(first) = rest.first() {
                let run = rest.iter().take_while(|op| op.is_set() == first.is_set());
                let (now, after) = rest.split_at(run.count());
                if first.is_set() {
                    write_sets(&engine, db, &key, now, &mut answers).await;
                } else {
                    add_all(&engine, db, &key, now, &mut answers).await;
                }
                rest = after;
            }
            Ok(answers)
        })
    }
}

/// Queues `op` on `key`'s combiner and waits for its answer.
pub(crate) async fn submit(engine: &Engine, db: u8, key: &[u8], op: StringWrite) -> Reply {
    engine
        .string_writes
        .submit(engine, db, key, op)
        .await
        .unwrap_or_else(|reply| reply)
}

/// A run of SETs: the last one written (and put in the local cache), every one
/// answered and announced in order.
async fn write_sets(
    engine: &Engine,
    db: u8,
    key: &[u8],
    sets: &[StringWrite],
    answers: &mut Vec<Answer<StringWrite>>,
) {
    let Some(StringWrite::Set(value, opts)) = sets.last() else {
        return;
    };
    match engine.dht.set(db, key, value, *opts).await {
        Ok(out) => {
            if out.written {
                // Only the value that landed: a superseded one cached after it would be
                // read back after the pool had moved on.
                set_cached(engine, db, key, value, *opts);
            }
            for op in sets {
                if let StringWrite::Set(_, opts) = op {
                    if out.written {
                        set_announced(engine, db, key, *opts);
                    }
                    answers.push(Ok(if out.written {
                        Reply::ok()
                    } else {
                        Reply::Null
                    }));
                }
            }
        }
        Err(e) => {
            let reply = error_reply(e);
            answers.extend(sets.iter().map(|_| Err(reply.clone())));
        }
    }
}

/// A run of counter changes applied to one read of the key and committed once.
async fn add_all(
    engine: &Engine,
    db: u8,
    key: &[u8],
    adds: &[StringWrite],
    answers: &mut Vec<Answer<StringWrite>>,
) {
    let steps: Vec<i64> = adds
        .iter()
        .filter_map(|op| match op {
            StringWrite::Add(by) => Some(*by),
            StringWrite::Set(..) => None,
        })
        .collect();
    let mut each: Vec<Reply> = Vec::with_capacity(steps.len());
    let rewritten = rewrite_locked(engine, db, key, |cur| {
        // Run again from the start if the commit is retried.
        each.clear();
        let mut value: Option<super::Digits> = cur.map(super::Digits::from_slice);
        let mut changed = false;
        for &by in &steps {
            let mut next = 0i64;
            match counted(value.as_deref(), by, &mut next) {
                Ok(digits) => {
                    value = Some(digits);
                    changed = true;
                    each.push(Reply::Int(next));
                }
                Err(text) => each.push(Reply::err(text)),
            }
        }
        Ok::<_, std::convert::Infallible>(changed.then(|| value.map(|v| v.to_vec())).flatten())
    })
    .await;
    match rewritten {
        Ok(Ok(_)) if each.len() != adds.len() => {
            let reply = Reply::err("ERR internal: a combined counter change lost its answer");
            answers.extend(adds.iter().map(|_| Err(reply.clone())));
        }
        Ok(Ok(_)) => {
            for reply in each {
                if matches!(reply, Reply::Int(_)) {
                    engine.notify(notify::STRING, "incrby", db, key);
                }
                answers.push(Ok(reply));
            }
        }
        Ok(Err(never)) => match never {},
        Err(reply) => answers.extend(adds.iter().map(|_| Err(reply.clone()))),
    }
}
