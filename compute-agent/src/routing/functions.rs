//! FUNCTION LOAD, DELETE, FLUSH and RESTORE, and SCRIPT LOAD and FLUSH, on a cluster
//! member. The libraries and the loaded scripts are the instance's, kept by the cluster
//! manager and pushed to every agent with the map, so an agent that joins later has
//! them too (a script run with EVAL is not kept: EVALSHA of it on another agent gets
//! NOSCRIPT, and clients send it again, as with Redis Cluster). The change runs here,
//! then this agent's list is stored at the manager if it was based on its current
//! version (compare-and-set, as ACL changes are; a lost race installs the winner's list
//! and runs the change again), and the stored list goes to every other agent at once
//! (`DMC.KEEP kind version json`) before the client hears the reply, so FCALL or
//! EVALSHA through any agent works right after it. Every agent installs a list only if
//! its version is newer than what it has, so the same list arriving later with the map,
//! or an older one, changes nothing.

use bytes::Bytes;
use dmc_engine::{Flow, Session};
use dmc_resp::Reply;

use super::Router;

/// Attempts of a change that keeps losing races with other agents' changes.
const ATTEMPTS: usize = 5;

/// What an instance keeps for its agents besides its users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    Functions,
    Scripts,
}

impl Kept {
    /// Which list `args` changes, if any.
    fn changed_by(args: &[Bytes]) -> Option<Kept> {
        let (name, sub) = (args.first()?, args.get(1)?);
        let is = |words: &[&[u8]]| words.iter().any(|w| sub.eq_ignore_ascii_case(w));
        if name.eq_ignore_ascii_case(b"FUNCTION") && is(&[b"LOAD", b"DELETE", b"FLUSH", b"RESTORE"])
        {
            Some(Kept::Functions)
        } else if name.eq_ignore_ascii_case(b"SCRIPT") && is(&[b"LOAD", b"FLUSH"]) {
            Some(Kept::Scripts)
        } else {
            None
        }
    }

    /// Its name in the manager's API.
    fn path(self) -> &'static str {
        match self {
            Kept::Functions => "functions",
            Kept::Scripts => "scripts",
        }
    }
}

impl Router {
    /// A change of the libraries or the loaded scripts on a cluster member (see the
    /// module doc); `None` for other commands, a peer's command, and standalone.
    pub(super) async fn kept_change(
        &self,
        session: &mut Session,
        index: Option<usize>,
        args: &[Bytes],
        peer: bool,
    ) -> Option<(Reply, Flow)> {
        let url = self.manager.clone()?;
        let kept = Kept::changed_by(args)?;
        if peer {
            return None;
        }
        let instance = self.map().map(|m| m.instance.name.clone())?;
        let engine = &self.engine;
        for _ in 0..ATTEMPTS {
            let base = match kept {
                Kept::Functions => engine.functions.version(),
                Kept::Scripts => engine.scripts.loaded_version(),
            };
            let (reply, flow) = engine.execute_at(session, index, args.to_vec()).await;
            if matches!(reply, Reply::Error(_)) {
                return Some((reply, flow));
            }
            let items = match kept {
                Kept::Functions => engine.functions.codes(),
                Kept::Scripts => engine.scripts.loaded(),
            };
            let (u, i) = (url.clone(), instance.clone());
            let stored = tokio::task::spawn_blocking(move || {
                dmc_process::membership::put_list(&u, &i, kept.path(), base, &items)
            })
            .await;
            let answer = match stored {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => return Some((Reply::err(format!("ERR {e}")), flow)),
                Err(e) => return Some((Reply::err(format!("ERR {e}")), flow)),
            };
            // Stored: this agent's list is that version. Lost: the winner's list
            // replaces it, and the change runs again on that.
            match kept {
                Kept::Functions => {
                    engine
                        .install_functions(&answer.items, answer.version)
                        .await
                }
                Kept::Scripts => engine.scripts.install(&answer.items, answer.version),
            }
            if answer.applied {
                self.send_kept(kept, answer.version, &answer.items).await;
                return Some((reply, flow));
            }
        }
        Some((
            Reply::err(
                "ERR the instance's scripts kept changing at the cluster manager; try again",
            ),
            Flow::Continue,
        ))
    }

    /// `DMC.KEEP kind version json` to every other agent, at once; an agent that does
    /// not answer installs the list from the next map.
    async fn send_kept(&self, kept: Kept, version: u64, items: &[String]) {
        let json = match serde_json::to_string(items) {
            Ok(j) => j,
            Err(e) => {
                tracing::error!(error = %e, "the instance's scripts do not encode");
                return;
            }
        };
        let command = [
            Bytes::from_static(b"DMC.KEEP"),
            Bytes::from_static(kept.path().as_bytes()),
            Bytes::from(version.to_string()),
            Bytes::from(json),
        ];
        self.tell_other_agents(&command, "the instance's scripts")
            .await;
    }

    /// `DMC.KEEP functions|scripts version json` from the agent that changed them.
    pub async fn keep_news(&self, args: &[Bytes]) -> Reply {
        let (Some(kind), Some(version), Some(json)) = (args.get(1), args.get(2), args.get(3))
        else {
            return Reply::err("ERR wrong number of arguments for 'dmc.keep' command");
        };
        let Some(version) = dmc_engine::parse_i64(version).and_then(|v| u64::try_from(v).ok())
        else {
            return Reply::err("ERR DMC.KEEP expects a version");
        };
        let Ok(items) = serde_json::from_slice::<Vec<String>>(json) else {
            return Reply::err("ERR DMC.KEEP expects a JSON array of strings");
        };
        match &kind[..] {
            b"functions" => self.engine.install_functions(&items, version).await,
            b"scripts" => self.engine.scripts.install(&items, version),
            _ => return Reply::err("ERR DMC.KEEP keeps functions or scripts"),
        }
        Reply::ok()
    }
}
