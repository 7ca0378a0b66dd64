//! MULTI/EXEC in a cluster. Commands after MULTI are queued on the client's agent
//! (the engine checks them); in cluster mode a write for a hash slot another agent
//! owns answers `-MOVED` and makes EXEC answer EXECABORT, as Redis Cluster does. At
//! EXEC the transaction runs where all its keys (written and WATCHed) are owned: here,
//! or — proxy mode — forwarded whole (`WATCH`, `MULTI`, the queue, `EXEC`, pipelined
//! on one peer connection) to the one agent that owns them all. Keys of several owners
//! answer `-CROSSSLOT`. A WATCHed key's version is checked here first (any agent reads
//! slot words) and again by the owner's WATCH from when it arrives there: a write the
//! owner makes between the two checks (well under a millisecond) is not seen.

use bytes::Bytes;
use dmc_engine::table::{self, Cmd, Spec};
use dmc_engine::{Flow, Session};
use dmc_resp::Reply;

use super::{Route, Router, RoutingMode, moved};

impl Router {
    /// Handles a command of a client in MULTI: queued (or refused) here, or EXEC run
    /// where its keys are. `None`: not in a transaction, route as usual.
    pub(super) async fn transaction(
        &self,
        session: &mut Session,
        spec: Option<&'static Spec>,
        index: Option<usize>,
        args: &[Bytes],
        peer: bool,
    ) -> Option<(Reply, Flow)> {
        if !session.tx.in_multi() {
            return None;
        }
        match spec.map(|s| s.cmd) {
            Some(Cmd::Exec) => Some(self.exec(session, index, args, peer).await),
            Some(Cmd::Discard | Cmd::Multi | Cmd::Watch | Cmd::Quit | Cmd::Reset) => None,
            _ => {
                if self.mode == RoutingMode::Cluster
                    && let Some(spec) = spec.filter(|s| s.arity_ok(args.len()))
                {
                    match self.route_spec(Some(spec), args) {
                        Route::Moved { slot, addr } => {
                            session.tx.dirty = true;
                            return Some((moved(slot, &addr), Flow::Continue));
                        }
                        Route::CrossSlot => {
                            session.tx.dirty = true;
                            return Some((cross_slot(), Flow::Continue));
                        }
                        _ => {}
                    }
                }
                Some(self.engine.execute_at(session, index, args.to_vec()).await)
            }
        }
    }

    /// EXEC: here when this agent owns every key of the transaction (or it came from
    /// a peer, which never forwards again), else forwarded whole to their one owner.
    async fn exec(
        &self,
        session: &mut Session,
        index: Option<usize>,
        args: &[Bytes],
        peer: bool,
    ) -> (Reply, Flow) {
        let tx = &session.tx;
        let owner = if tx.dirty || peer {
            Owner::Here
        } else {
            self.owner_of(tx)
        };
        match owner {
            Owner::Here => self.engine.execute_at(session, index, args.to_vec()).await,
            Owner::Several => {
                session.tx.clear();
                (cross_slot(), Flow::Continue)
            }
            Owner::Agent(addr) => (self.forward_exec(session, &addr).await, Flow::Continue),
        }
    }

    /// Where the keys of the queued writes and the WATCHed keys are owned.
    fn owner_of(&self, tx: &dmc_engine::multi::TxState) -> Owner {
        let mut keys: Vec<&Bytes> = tx.watched.iter().map(|(_, k, _)| k).collect();
        for (index, args) in tx.queue.iter().flatten() {
            if let Some(spec) = table::TABLE.get(*index) {
                keys.extend(
                    spec.key_positions(args)
                        .into_iter()
                        .filter_map(|i| args.get(i)),
                );
            }
        }
        let guard = self.map.read();
        let Some(map) = guard.as_ref() else {
            return Owner::Here;
        };
        let me = self.me.load(std::sync::atomic::Ordering::Acquire);
        let mut owner: Option<Option<String>> = None;
        for key in keys {
            let slot = dmc_dht::hash::key_slot(key);
            let here = map
                .owner(slot)
                .filter(|a| a.id != me)
                .map(|a| a.listen.clone());
            match &owner {
                None => owner = Some(here),
                Some(o) if *o == here => {}
                Some(_) => return Owner::Several,
            }
        }
        match owner.flatten() {
            None => Owner::Here,
            Some(addr) if self.mode == RoutingMode::Proxy => Owner::Agent(addr),
            // Cluster mode redirected the writes at queue time; reads run anywhere.
            Some(_) => Owner::Here,
        }
    }

    /// Sends the transaction to the agent at `addr` and answers its EXEC reply.
    async fn forward_exec(&self, session: &mut Session, addr: &str) -> Reply {
        let tx = std::mem::take(&mut session.tx);
        // WATCH: changed already here means aborted, as the owner would answer.
        for (db, key, seen) in &tx.watched {
            match self.engine.dht.version(*db, key).await {
                Ok(now) if now == *seen => {}
                Ok(_) => return Reply::NullArray,
                Err(e) => return dmc_engine::error_reply(e),
            }
        }
        let mut commands: Vec<Vec<Bytes>> = Vec::new();
        if !tx.watched.is_empty() {
            let mut watch = vec![Bytes::from_static(b"WATCH")];
            watch.extend(tx.watched.iter().map(|(_, k, _)| k.clone()));
            commands.push(watch);
        }
        commands.push(vec![Bytes::from_static(b"MULTI")]);
        commands.extend(tx.queue.into_iter().flatten().map(|(_, args)| args));
        commands.push(vec![Bytes::from_static(b"EXEC")]);
        let refs: Vec<&[Bytes]> = commands.iter().map(|c| &c[..]).collect();
        match self
            .forward_many(addr, super::peers::Sender::client(session), &refs)
            .await
        {
            Ok(mut replies) => {
                self.engine
                    .stats
                    .forwarded_commands
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                replies
                    .pop()
                    .unwrap_or_else(|| Reply::err("ERR the owner did not answer EXEC"))
            }
            Err(e) => Reply::err(format!(
                "ERR the transaction could not reach agent {addr}: {e}"
            )),
        }
    }
}

/// Where a transaction runs.
enum Owner {
    Here,
    Agent(String),
    Several,
}

fn cross_slot() -> Reply {
    Reply::err("CROSSSLOT Keys in request don't hash to the same slot")
}
