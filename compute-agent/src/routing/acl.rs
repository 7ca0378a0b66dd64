//! `ACL SETUSER`, `DELUSER`, `SAVE` and `LOAD` on a cluster member. The users are the
//! instance's, kept by the cluster manager and pushed to every agent with the map: the
//! change is applied to this agent's copy of the users, stored at the manager if the
//! copy is still current (compare-and-set on the users' version; a lost race applies
//! the change again to the winner's users), installed here, and answered — the other
//! agents install it from the next map, one map push later. SAVE and LOAD name a file
//! of one agent, which a cluster's users do not live in: refused.

use bytes::Bytes;
use dmc_engine::acl_cmd;
use dmc_engine::{Flow, Session};
use dmc_resp::Reply;

use super::Router;

/// Attempts of a change that keeps losing races with other agents' changes.
const ATTEMPTS: usize = 5;

impl Router {
    /// `CONFIG SET requirepass PASSWORD` on a cluster member: the default user's
    /// password is the instance's, changed as `ACL SETUSER default resetpass >PASSWORD`
    /// (or `nopass` for an empty one) is. `None` for anything else.
    pub(super) async fn config_set_requirepass(
        &self,
        session: &mut Session,
        args: &[Bytes],
    ) -> Option<(Reply, Flow)> {
        self.manager.as_ref()?;
        if args.len() != 4
            || !args[0].eq_ignore_ascii_case(b"config")
            || !args[1].eq_ignore_ascii_case(b"set")
            || !args[2].eq_ignore_ascii_case(b"requirepass")
        {
            return None;
        }
        let password = if args[3].is_empty() {
            Bytes::from_static(b"nopass")
        } else {
            let mut p = b">".to_vec();
            p.extend_from_slice(&args[3]);
            Bytes::from(p)
        };
        let change = [
            Bytes::from_static(b"ACL"),
            Bytes::from_static(b"SETUSER"),
            Bytes::from_static(b"default"),
            Bytes::from_static(b"resetpass"),
            password,
        ];
        self.acl(session, &change).await
    }

    /// A change of the users on a cluster member; `None` for the other ACL
    /// subcommands (and standalone), which the engine answers.
    pub(super) async fn acl(&self, session: &mut Session, args: &[Bytes]) -> Option<(Reply, Flow)> {
        let url = self.manager.clone()?;
        let sub = args.get(1)?;
        if sub.eq_ignore_ascii_case(b"SAVE") || sub.eq_ignore_ascii_case(b"LOAD") {
            return Some((
                Reply::err(
                    "ERR ACL SAVE and LOAD are not supported in a cluster: its users are kept by the cluster manager (GET /v1/instances/NAME/acl)",
                ),
                Flow::Continue,
            ));
        }
        if !acl_cmd::is_change(args) {
            return None;
        }
        // Too few arguments: the engine answers Redis's arity error.
        if args.len() < 3 {
            return Some(self.engine.execute(session, args.to_vec()).await);
        }
        let instance = self.map().map(|m| m.instance.name.clone())?;
        for _ in 0..ATTEMPTS {
            let (mut users, version) = self.engine.acl.snapshot();
            let reply = match acl_cmd::apply_change(&mut users, args) {
                Ok(reply) => reply,
                Err(e) => return Some((e.reply(), Flow::Continue)),
            };
            let text = String::from_utf8_lossy(&users.to_acl_file()).into_owned();
            let (u, i) = (url.clone(), instance.clone());
            let stored = tokio::task::spawn_blocking(move || {
                dmc_process::membership::put_acl(&u, &i, version, &text)
            })
            .await;
            let answer = match stored {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => return Some((Reply::err(format!("ERR {e}")), Flow::Continue)),
                Err(e) => return Some((Reply::err(format!("ERR {e}")), Flow::Continue)),
            };
            // Installed here at once (this client sees its change); on a lost race
            // these are the winner's users, to apply the change to again.
            if let Err(e) = self
                .engine
                .acl
                .install(answer.users.as_bytes(), answer.version)
            {
                return Some((e.reply(), Flow::Continue));
            }
            if answer.applied {
                return Some((reply, Flow::Continue));
            }
        }
        Some((
            Reply::err("ERR the users kept changing at the cluster manager; try again"),
            Flow::Continue,
        ))
    }
}
