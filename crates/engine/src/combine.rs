//! Same-key write combining (SMART's write combining, thesis ch. 4): changes of one
//! collection that arrive while another change of it is being committed wait in a
//! queue, and one worker applies all of them, in arrival order, to one read of the
//! key and commits the result once. A push to a million-element list in a pipeline of
//! 16 then writes one path of its tree, not 16, and the key's commits stop being the
//! limit on how fast clients can change it.
//!
//! A change is data (`T`, owned, so that the worker can run it on its own task) with
//! one answer per change; [`Batch::run`] says how a type applies a batch. Every change
//! gets the answer it would have got alone, after the commit that made it durable: the
//! batch's commit, or the error that stopped it. The worker is a task of its own, so a
//! client that goes away (a blocking pop cancelled, a killed connection) never strands
//! the changes queued behind its own. Writers that are not combined take the same
//! key lock the worker takes per batch.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use dmc_resp::Reply;
use futures::future::BoxFuture;
use tokio::sync::oneshot;

use crate::Engine;

/// One change's answer.
pub(crate) type Answer<T> = Result<<T as Batch>::Out, Reply>;

/// A change that can be combined with others of the same key.
pub(crate) trait Batch: Send + Sized + 'static {
    type Out: Send + 'static;

    /// The engine's queue for changes of this type.
    fn combiner(engine: &Engine) -> &Combiner<Self>;

    /// Applies `ops` in order to `key` (its lock held) and commits once: one answer per
    /// change, or the error that stopped the whole batch.
    fn run(
        engine: Arc<Engine>,
        db: u8,
        key: Bytes,
        ops: Vec<Self>,
    ) -> BoxFuture<'static, Result<Vec<Answer<Self>>, Reply>>;
}

type Waiting<T> = Vec<(T, oneshot::Sender<Answer<T>>)>;

/// The changes of each key waiting for the key's worker.
pub(crate) struct Combiner<T: Batch> {
    /// A key is here while its worker runs (its queue may be empty meanwhile).
    queues: parking_lot::Mutex<HashMap<(u8, Bytes), Waiting<T>>>,
}

impl<T: Batch> Default for Combiner<T> {
    fn default() -> Self {
        Combiner {
            queues: parking_lot::Mutex::new(HashMap::new()),
        }
    }
}

/// Changes one worker applies at most per commit (a bound on the batch's size and on
/// how long its first change waits).
const MAX_BATCH: usize = 256;

impl<T: Batch> Combiner<T> {
    /// Queues `op` for `key` and waits for its answer; starts the key's worker if none
    /// runs.
    pub(crate) async fn submit(&self, engine: &Engine, db: u8, key: &[u8], op: T) -> Answer<T> {
        if crate::multi::in_exec() {
            // An EXEC holds the key's lock: its change runs here, alone. A script may
            // change a key it did not declare: it waits for that key's lock here (a
            // stripe the transaction holds is not taken again).
            let _lock = engine.lock_key(key).await;
            let Some(me) = engine.me.upgrade() else {
                return Err(Reply::err("ERR the server is shutting down"));
            };
            let mut outs = T::run(me, db, Bytes::copy_from_slice(key), vec![op]).await?;
            return outs
                .pop()
                .unwrap_or_else(|| Err(Reply::err("ERR internal: a change lost its answer")));
        }
        let (tx, rx) = oneshot::channel();
        let id = (db, Bytes::copy_from_slice(key));
        let start = {
            let mut queues = self.queues.lock();
            match queues.get_mut(&id) {
                Some(waiting) => {
                    waiting.push((op, tx));
                    false
                }
                None => {
                    queues.insert(id.clone(), vec![(op, tx)]);
                    true
                }
            }
        };
        if start {
            match engine.me.upgrade() {
                Some(engine) => {
                    tokio::spawn(worker::<T>(engine, id.0, id.1));
                }
                None => return Err(Reply::err("ERR the server is shutting down")),
            }
        }
        rx.await
            .unwrap_or_else(|_| Err(Reply::err("ERR the change was dropped unanswered")))
    }

    /// The next batch of `key`, or `None` (and the key's worker ends) when its queue is
    /// empty.
    fn next_batch(&self, id: &(u8, Bytes)) -> Option<Waiting<T>> {
        let mut queues = self.queues.lock();
        match queues.get_mut(id) {
            Some(waiting) if !waiting.is_empty() => {
                let n = waiting.len().min(MAX_BATCH);
                Some(waiting.drain(..n).collect())
            }
            _ => {
                queues.remove(id);
                None
            }
        }
    }
}

/// Runs `key`'s batches until its queue is empty.
async fn worker<T: Batch>(engine: Arc<Engine>, db: u8, key: Bytes) {
    let id = (db, key);
    loop {
        let _lock = engine.lock_key(&id.1).await;
        let Some(batch) = T::combiner(&engine).next_batch(&id) else {
            return;
        };
        let (ops, answers): (Vec<T>, Vec<_>) = batch.into_iter().unzip();
        let n = ops.len();
        engine.stats.combined(n);
        match T::run(engine.clone(), db, id.1.clone(), ops).await {
            Ok(outs) if outs.len() == n => {
                for (tx, out) in answers.into_iter().zip(outs) {
                    let _ = tx.send(out);
                }
            }
            Ok(_) => {
                for tx in answers {
                    let _ = tx.send(Err(Reply::err("ERR internal: a batch lost answers")));
                }
            }
            Err(e) => {
                for tx in answers {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Implements [`Batch`] for a [`crate::big::Edit`] type whose queue is the engine's
/// field `$queue`: a batch is one [`crate::big::edit_all`].
macro_rules! batched_edit {
    ($op:ty, $queue:ident) => {
        impl $crate::combine::Batch for $op {
            type Out = <$op as $crate::big::Edit>::Out;

            fn combiner(engine: &$crate::Engine) -> &$crate::combine::Combiner<Self> {
                &engine.$queue
            }

            fn run(
                engine: std::sync::Arc<$crate::Engine>,
                db: u8,
                key: bytes::Bytes,
                ops: Vec<Self>,
            ) -> futures::future::BoxFuture<
                'static,
                Result<Vec<$crate::combine::Answer<Self>>, dmc_resp::Reply>,
            > {
                Box::pin(async move { $crate::big::edit_all(&engine, db, &key, &ops).await })
            }
        }
    };
}
pub(crate) use batched_edit;
