//! FUNCTION LOAD, DELETE, FLUSH and RESTORE on a cluster member. The libraries are the
//! instance's, kept by the cluster manager and pushed to every agent with the map, so
//! an agent that joins later has them too (scripts loaded with SCRIPT LOAD are not:
//! a client's EVALSHA there gets NOSCRIPT and sends the script again, as with Redis
//! Cluster). The change runs here (and, in proxy mode, on every agent at once, as
//! before), then this agent's libraries are stored at the manager if they were based
//! on its current version (compare-and-set, as ACL changes are); a lost race installs
//! the winner's libraries and runs the change again on them.

use bytes::Bytes;
use dmc_engine::{Flow, Session};
use dmc_resp::Reply;

use super::{Router, RoutingMode};

/// Attempts of a change that keeps losing races with other agents' changes.
const ATTEMPTS: usize = 5;

/// Whether `args` (a FUNCTION command) changes the libraries.
fn is_change(args: &[Bytes]) -> bool {
    args.get(1).is_some_and(|sub| {
        [&b"LOAD"[..], b"DELETE", b"FLUSH", b"RESTORE"]
            .iter()
            .any(|c| sub.eq_ignore_ascii_case(c))
    })
}

impl Router {
    /// A change of the libraries on a cluster member (see the module doc); `None` for
    /// the other FUNCTION subcommands, a peer's command, and standalone.
    pub(super) async fn function_change(
        &self,
        session: &mut Session,
        index: Option<usize>,
        args: &[Bytes],
        peer: bool,
    ) -> Option<(Reply, Flow)> {
        let url = self.manager.clone()?;
        if peer || !is_change(args) {
            return None;
        }
        let instance = self.map().map(|m| m.instance.name.clone())?;
        for _ in 0..ATTEMPTS {
            let base = self.engine.functions.version();
            let (reply, flow) = match self.mode {
                RoutingMode::Proxy => self.everywhere(session, index, args.to_vec()).await,
                _ => self.engine.execute_at(session, index, args.to_vec()).await,
            };
            if matches!(reply, Reply::Error(_)) {
                return Some((reply, flow));
            }
            let libraries = self.engine.functions.codes();
            let (u, i) = (url.clone(), instance.clone());
            let stored = tokio::task::spawn_blocking(move || {
                dmc_process::membership::put_functions(&u, &i, base, &libraries)
            })
            .await;
            let answer = match stored {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => return Some((Reply::err(format!("ERR {e}")), flow)),
                Err(e) => return Some((Reply::err(format!("ERR {e}")), flow)),
            };
            // Stored: this agent's libraries are that version. Lost: the winner's
            // libraries replace them, and the change runs again on those.
            self.engine
                .install_functions(&answer.libraries, answer.version)
                .await;
            if answer.applied {
                return Some((reply, flow));
            }
        }
        Some((
            Reply::err("ERR the libraries kept changing at the cluster manager; try again"),
            Flow::Continue,
        ))
    }
}
