//! Single-key string writes without futures, for pools whose memory is in this address
//! space (`local`, `shm`): `set_now` (a plain SET) and `update_now` (INCR and its kin).
//! The same steps as [`Dht::set`] and [`Dht::update`] (probe inside the slot's rebuild gate,
//! object out of place, one-sided commit inside an ownership write guard), each done
//! with verbs that complete inline, so nothing is awaited and no future is built, moved
//! or polled per write.
//!
//! Anything that would wait hands the write to the awaited path before anything
//! reachable was written: a rebuild holding the gate closed, no cached directory or a stale
//! one, a missing partition, full buckets, memory over `maxmemory`, a segment to claim,
//! a commit that lost a race, an old object that is chained or large, access metadata
//! to record. The engine calls these first and falls back to `set` and `update`.

use dmc_umo::{SlotWrite, TxOutcome, UmoError, ValueKind};

use super::{Dht, DhtError, Found, SetCond, SetOptions, SetOutcome};
use crate::layout::{SlotMeta, SlotWord};
use crate::policy;

/// What a write makes of the key's current slot (`None`: absent).
enum Decision<V, E> {
    /// Write this value with this expiry (encoded, 0 for none).
    Write(V, u64),
    /// Write nothing and answer this.
    Stop(E),
}

/// How one inline write that ran ended (`None` stands for one that did nothing: the
/// awaited path must do it).
enum Written<E> {
    /// Committed.
    Done,
    /// Nothing was written: the decision's answer.
    Stopped(E),
    /// The commit failed part way (a node stopped answering): its object may be
    /// reachable, so it is leaked and the slot left to recovery.
    InDoubt(UmoError),
}

impl Dht {
    /// Sets `key` to `value` in `db` as [`set`](Self::set) does, without awaiting:
    /// an unconditional SET (no NX, XX or GET) of a string that fits one block, on a
    /// pool whose memory is in this address space. `None`: use `set` (see the module
    /// doc; a commit in doubt is written again there, which writing the same value
    /// makes harmless).
    pub fn set_now(
        &self,
        db: u8,
        key: &[u8],
        value: &[u8],
        opts: SetOptions,
    ) -> Option<Result<SetOutcome, DhtError>> {
        if opts.get || opts.cond != SetCond::Always || opts.kind != ValueKind::String {
            return None;
        }
        let written = self.write_now(db, key, false, |found, abs| {
            match self.set_decision(found, &opts, abs) {
                Ok(Ok((expire, _))) => Decision::Write(value, expire),
                // Unconditional and without GET: never refused or answered early.
                Ok(Err(_)) | Err(_) => Decision::Stop(()),
            }
        });
        match written? {
            Written::Done => Some(Ok(SetOutcome {
                written: true,
                old: None,
            })),
            // Writing the same value again is harmless: the awaited path does, and
            // waits out the failover this path did not.
            Written::Stopped(()) | Written::InDoubt(_) => None,
        }
    }

    /// [`update`](Self::update) without awaiting, on a pool whose memory is in this
    /// address space, when the current value is a small string or absent and the new
    /// one fits a block. `None`: nothing was written; use `update` (which runs `f`
    /// again). A commit in doubt is an error, as on the awaited path: running `f` again
    /// could apply it twice. The new value may be any bytes `f` owns (a number
    /// formatted on the stack needs no allocation).
    pub fn update_now<V: AsRef<[u8]>, E>(
        &self,
        db: u8,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> Result<V, E>,
    ) -> Option<Result<Result<(), E>, DhtError>> {
        let written = self.write_now(db, key, true, |found, abs| {
            let live = found.filter(|f| !self.is_expired(f.meta, abs));
            if live.is_some_and(|l| !ValueKind::String.replaces(l.kind)) {
                return Decision::Stop(Err(DhtError::WrongType));
            }
            match f(live.and_then(|l| l.value.as_deref())) {
                Ok(v) => Decision::Write(v, live.map_or(0, |l| l.meta.expire())),
                Err(e) => Decision::Stop(Ok(e)),
            }
        });
        match written? {
            Written::Done => Some(Ok(Ok(()))),
            Written::Stopped(Ok(e)) => Some(Ok(Err(e))),
            Written::Stopped(Err(e)) => Some(Err(e)),
            // Not again: the first increment may have landed (recovery rolls it
            // forward), so the error is the answer, as on the awaited path.
            Written::InDoubt(e) => Some(Err(e.into())),
        }
    }

    /// One inline try at writing the string `key`: probes it inside the slot's rebuild gate
    /// (its value read if `want_value`), lets `decide` choose from what is there (and
    /// the time, Unix ms), writes the object and commits it. `None`: nothing was done.
    fn write_now<V: AsRef<[u8]>, E>(
        &self,
        db: u8,
        key: &[u8],
        want_value: bool,
        decide: impl FnOnce(Option<&Found>, u64) -> Decision<V, E>,
    ) -> Option<Written<E>> {
        if !self.inline_reads || self.is_staging() || commit_fail_points_set() {
            return None;
        }
        let loc = self.loc(db, key);
        let lease = self.lease(loc.key_slot).ok()?;
        // Held to the commit, as `probe_for_write` holds the rebuild lock: no rebuild
        // moves the slot.
        let no_rebuild = self.gates.enter(loc.slot)?;
        // A node that failed is waited out on the awaited path.
        let (probe, found) = self.lookup_now(&loc, key, want_value)?.ok()?;
        // Access metadata is written by `note_writes`, and a chained old object is
        // read to be freed: both await.
        let old_object = found.as_ref().and_then(|f| f.word.object());
        if probe.ext.iter().any(Option::is_some) || old_object.is_some_and(|o| o.chained) {
            return None;
        }
        let (abs, now) = self.now();
        let (value, expire) = match decide(found.as_ref(), abs) {
            Decision::Write(value, expire) => (value, expire),
            Decision::Stop(e) => return Some(Written::Stopped(e)),
        };
        // Both buckets full: the awaited path splits the subtable.
        let (addr, old, old_meta) = Self::target_slot(&probe, found.as_ref())?;
        let value = value.as_ref();
        let need = (dmc_umo::object::HEADER + key.len() + value.len()) as u64;
        if old.is_locked() || !self.room_now(need) {
            return None;
        }
        let obj = self.pool.write_object_now(db, key, value)?.ok()?;
        let lfu = found.as_ref().map_or(policy::LFU_INIT, |f| f.meta.lfu());
        let meta = SlotMeta::new(expire, now.access, lfu);
        let write = SlotWrite {
            addr,
            old: old.0,
            old_meta: old_meta.0,
            new: SlotWord::new(loc.fp, obj).0,
            meta: meta.0,
        };
        let outcome = match self.owner.begin_write(loc.slot, lease) {
            Some(_writing) => self.pool.commit_slot_now(write),
            // The lease went meanwhile: the awaited path answers it.
            None => None,
        };
        match outcome {
            Some(TxOutcome::Committed) => {}
            // Refused before its first verb: nothing was written.
            Some(TxOutcome::Failed(UmoError::LeaseLapsed)) => {
                self.pool.free_head(obj);
                return None;
            }
            Some(TxOutcome::Failed(e)) => {
                tracing::debug!(error = %e, "an inline single-key commit failed; retried awaited");
                self.in_doubt(loc.slot, addr);
                return Some(Written::InDoubt(e));
            }
            // Another writer's lock or word, a stale lease: the awaited path backs off
            // and tries again, or answers.
            _ => {
                self.pool.free_head(obj);
                return None;
            }
        }
        drop(no_rebuild);
        if let Some(prev) = self.count_replaced(loc.db, found, meta) {
            self.pool.free_head(prev);
        }
        Some(Written::Done)
    }
}

/// Whether a test set a fail point of the one-sided commit: those run on the awaited
/// path only.
#[cfg(feature = "failpoints")]
fn commit_fail_points_set() -> bool {
    fail::list()
        .iter()
        .any(|(name, _)| name.starts_with("dht-one-sided") || name.starts_with("umo-slot-commit"))
}

#[cfg(not(feature = "failpoints"))]
fn commit_fail_points_set() -> bool {
    false
}
