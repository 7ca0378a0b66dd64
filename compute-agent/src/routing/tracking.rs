//! CLIENT TRACKING across the agents of an instance (see `dmc_engine::tracking`): a
//! key is written on the agent owning it but may be read, and tracked, on any agent.
//! An agent with tracking clients announces itself to the others (`DMC.TRACKING
//! <its address>`) when its first client turns tracking on — before that client's OK,
//! so no change made after the OK is missed — and every few seconds while it has any
//! (an agent that joins later learns of it then; an announcement holds 15 s). The
//! others then send it every key that changes on them (`DMC.INVALIDATE key`, through
//! the relay, in order), which it tells its own trackers.

use std::sync::Arc;

use bytes::Bytes;
use dmc_engine::Session;
use dmc_engine::tracking::ANNOUNCE_EVERY;
use dmc_resp::Reply;

use super::Router;

impl Router {
    /// `DMC.TRACKING addr` or `DMC.INVALIDATE [key]` from another agent.
    pub fn tracking_news(&self, args: &[Bytes]) -> Reply {
        let name = args
            .first()
            .map(|n| n.to_ascii_lowercase())
            .unwrap_or_default();
        match (&name[..], args.get(1)) {
            (b"dmc.tracking", Some(addr)) => {
                self.engine
                    .tracking
                    .peer_announced(String::from_utf8_lossy(addr).into_owned());
                Reply::ok()
            }
            (b"dmc.invalidate", key) => {
                // `key addr id`: changed by NOLOOP tracker `id` of the agent at `addr`.
                let writer = match (args.get(2), args.get(3)) {
                    (Some(addr), Some(id))
                        if self
                            .my_address()
                            .is_some_and(|me| me.as_bytes() == &addr[..]) =>
                    {
                        dmc_engine::parse_i64(id).map(|id| id as u64)
                    }
                    _ => None,
                };
                self.engine.invalidate_here(key.map(|k| &k[..]), writer);
                Reply::ok()
            }
            _ => Reply::err("ERR wrong number of arguments for 'dmc.tracking' command"),
        }
    }

    /// After CLIENT TRACKING through this agent: if it now has tracking clients, tells
    /// every other agent before the client hears OK.
    pub(super) async fn after_client_tracking(&self, session: &Session) {
        if session.tracking.is_some() && self.engine.tracking.local() {
            self.announce_tracking().await;
        }
    }

    /// `DMC.TRACKING <this agent's address>` to every other agent, at once.
    async fn announce_tracking(&self) {
        let Some(me) = self.my_address() else {
            return;
        };
        let command = [Bytes::from_static(b"DMC.TRACKING"), Bytes::from(me)];
        self.tell_other_agents(&command, "a tracking announcement")
            .await;
    }

    /// Announces this agent again every few seconds while it has tracking clients.
    pub(super) fn spawn_tracking_announcer(self: &Arc<Self>) {
        let router = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(ANNOUNCE_EVERY);
            loop {
                tick.tick().await;
                let Some(router) = router.upgrade() else {
                    return;
                };
                if router.engine.tracking.local() {
                    router.announce_tracking().await;
                }
            }
        });
    }
}
