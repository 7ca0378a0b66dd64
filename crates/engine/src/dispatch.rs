//! Dispatch: one parsed command to the family that runs it.
//!
//! Looks the command up in [`crate::table`], counts it for the client registry, checks
//! arity and authentication before any handler runs, and hands it to the module its
//! [`Family`] names. [`Engine::execute`] (here) is the engine's entry for one command,
//! called by the agent's router; it never parses wire bytes and never lets a family see
//! a command of the wrong arity.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use dmc_resp::Reply;

use crate::table::{Cmd, Family, TABLE, lookup_index};
use crate::{Engine, Flow, Session, hashes, introspect, keys, lists, server, sets, strings, zsets};

/// Redis's text for an unknown command, quoting up to 20 of its arguments.
pub(crate) fn unknown(args: &[Bytes]) -> Reply {
    let name = args
        .first()
        .map(|n| String::from_utf8_lossy(n))
        .unwrap_or_default();
    let mut text = format!("ERR unknown command '{name}', with args beginning with: ");
    for a in args.iter().skip(1).take(20) {
        text.push_str(&format!("'{}' ", String::from_utf8_lossy(a)));
    }
    Reply::Error(text)
}

impl Engine {
    /// Executes one command.
    pub async fn execute(&self, session: &mut Session, args: Vec<Bytes>) -> (Reply, Flow) {
        let index = args.first().and_then(|name| lookup_index(name));
        self.execute_at(session, index, args).await
    }

    /// Executes one command whose row in the command table the caller looked up
    /// already (`None`: not a command), so a command is looked up once per request.
    pub async fn execute_at(
        &self,
        session: &mut Session,
        index: Option<usize>,
        args: Vec<Bytes>,
    ) -> (Reply, Flow) {
        self.stats.commands.fetch_add(1, Ordering::Relaxed);
        // Its own changes are not sent to a NOLOOP tracker: they run knowing it (or the
        // tracker of another agent that forwarded this command).
        let noloop = match session.origin.take() {
            Some((addr, id)) => Some(crate::tracking::Modifier::Peer(addr, id)),
            None if session.tracking.as_ref().is_some_and(|m| m.noloop) => {
                Some(crate::tracking::Modifier::Here(session.id))
            }
            None => None,
        };
        let (reply, flow) = if let Some(modifier) = noloop {
            let run = dispatch_at(self, session, index, args);
            Box::pin(crate::tracking::MODIFIER.scope(modifier, run)).await
        } else {
            dispatch_at(self, session, index, args).await
        };
        if matches!(reply, Reply::Error(_)) {
            self.stats.error_replies.fetch_add(1, Ordering::Relaxed);
        }
        (reply, flow)
    }
}

pub async fn dispatch(engine: &Engine, session: &mut Session, args: Vec<Bytes>) -> (Reply, Flow) {
    let index = args.first().and_then(|name| lookup_index(name));
    dispatch_at(engine, session, index, args).await
}

/// [`dispatch`] of a command already looked up: `index` is its row in [`TABLE`].
pub async fn dispatch_at(
    engine: &Engine,
    session: &mut Session,
    index: Option<usize>,
    args: Vec<Bytes>,
) -> (Reply, Flow) {
    if session.tx.in_multi()
        && let Some(reply) = crate::multi::queue(engine, session, index, &args)
    {
        return (reply, Flow::Continue);
    }
    let Some((index, spec)) = index.and_then(|i| TABLE.get(i).map(|s| (i, s))) else {
        return (unknown(&args), Flow::Continue);
    };
    session
        .client
        .touch(&engine.clients, index, session.db, session.proto);
    if !spec.arity_ok(args.len()) {
        return (
            Reply::Error(format!(
                "ERR wrong number of arguments for '{}' command",
                spec.name
            )),
            Flow::Continue,
        );
    }
    if !session.authenticated && !spec.has_flag("no-auth") {
        return (
            Reply::err("NOAUTH Authentication required."),
            Flow::Continue,
        );
    }
    if let Err(refused) = crate::acl_cmd::check(engine, session, spec, &args) {
        return refused;
    }
    if let Some(busy) = crate::scripting::busy(engine, session, spec, &args) {
        return (busy, Flow::Continue);
    }
    if session.subscribed && session.proto < 3 {
        if !crate::pubsub::allowed_in_subscribed_mode(spec.cmd) {
            let name = match args.get(1) {
                Some(sub) if crate::subcommands::is_container(spec.cmd) => format!(
                    "{}|{}",
                    spec.name,
                    String::from_utf8_lossy(sub).to_ascii_lowercase()
                ),
                _ => spec.name.to_string(),
            };
            return (
                crate::pubsub::refused_in_subscribed_mode(&name),
                Flow::Continue,
            );
        }
        // PING in subscribed mode answers as a message would: `pong` and its text.
        if spec.cmd == Cmd::Ping {
            let text = args.get(1).cloned().unwrap_or_default();
            return (
                Reply::Array(vec![Reply::bulk("pong"), Reply::Bulk(text)]),
                Flow::Continue,
            );
        }
    }
    if session.monitoring && (spec.is_write() || spec.has_flag("readonly")) {
        return (
            Reply::err("ERR Replica can't interact with the keyspace"),
            Flow::Continue,
        );
    }
    // Timed for the slow log and the latency monitor (the checks above are not).
    // From when the connection began the command (its own clock read), or from here for
    // commands run within another (EXEC, scripts).
    let started = session
        .started
        .take()
        .or_else(|| engine.slowlog.timing().then(std::time::Instant::now));
    let reply = match spec.family() {
        Family::Server if spec.cmd == Cmd::Quit => return (Reply::ok(), Flow::Close),
        Family::Server => server::run(engine, session, spec.cmd, &args).await,
        Family::Strings => strings::run(engine, session, spec.cmd, &args).await,
        // The collections' futures are boxed: the largest family's state sizes every
        // command's future, which every idle connection holds (a sorted set command's
        // is 6.3 KiB in a debug build, a string command's 4.7 KiB), and their commands
        // are long enough for one allocation not to show.
        Family::Hashes => match spec.cmd {
            Cmd::Hash(h) => Box::pin(hashes::run(engine, session, h, &args)).await,
            _ => unknown(&args),
        },
        Family::Lists => match spec.cmd {
            Cmd::List(l) => Box::pin(lists::run(engine, session, l, &args)).await,
            _ => unknown(&args),
        },
        Family::Sets => match spec.cmd {
            Cmd::Sets(c) => Box::pin(sets::run(engine, session, c, &args)).await,
            _ => unknown(&args),
        },
        Family::ZSets => match spec.cmd {
            Cmd::ZSet(z) => Box::pin(zsets::run(engine, session, z, &args)).await,
            _ => unknown(&args),
        },
        Family::Bitmaps => match spec.cmd {
            Cmd::Bit(b) => Box::pin(crate::bitmaps::run(engine, session, b, &args)).await,
            _ => unknown(&args),
        },
        Family::Sort => {
            Box::pin(crate::sort::run(
                engine,
                session,
                &args,
                spec.cmd == Cmd::SortRo,
            ))
            .await
        }
        Family::Dump if spec.cmd == Cmd::Dump => crate::dump::dump(engine, session, &args).await,
        Family::Dump => crate::dump::restore(engine, session, &args).await,
        Family::HyperLogLog => match spec.cmd {
            Cmd::Hll(h) => Box::pin(crate::hyperloglog::run(engine, session, h, &args)).await,
            _ => unknown(&args),
        },
        Family::Streams => match spec.cmd {
            Cmd::Stream(c) => Box::pin(crate::streams::run(engine, session, c, &args)).await,
            _ => unknown(&args),
        },
        Family::Geo => match spec.cmd {
            Cmd::Geo(g) => Box::pin(crate::geo::run(engine, session, g, &args)).await,
            _ => unknown(&args),
        },
        Family::Keys => keys::run(engine, session, spec.cmd, &args).await,
        Family::Introspect if spec.cmd == Cmd::Object => {
            introspect::object(engine, session, &args).await
        }
        Family::Introspect => introspect::memory(engine, session, &args).await,
        // A cluster member's router answers these before they reach the engine.
        Family::Cluster => Reply::err("ERR This instance has cluster support disabled"),
        // Boxed too: a transaction or a script stages and commits its writes, a deep
        // state few commands need.
        Family::Transactions => Box::pin(crate::multi::run(engine, session, spec.cmd, &args)).await,
        Family::Scripting => match spec.cmd {
            Cmd::Script => crate::scripting::script(engine, &args),
            Cmd::FCall | Cmd::FCallRo => {
                Box::pin(crate::scripting::functions::fcall(
                    engine,
                    session,
                    &args,
                    spec.cmd == Cmd::FCallRo,
                ))
                .await
            }
            Cmd::Function => {
                Box::pin(crate::scripting::functions::function(
                    engine, session, &args,
                ))
                .await
            }
            cmd => {
                let (by_sha, read_only) = match cmd {
                    Cmd::Eval => (false, false),
                    Cmd::EvalSha => (true, false),
                    Cmd::EvalRo => (false, true),
                    _ => (true, true),
                };
                Box::pin(crate::scripting::eval(
                    engine, session, &args, by_sha, read_only,
                ))
                .await
            }
        },
        Family::PubSub => crate::pubsub::run(engine, session, spec.cmd, &args),
        // Only the agent's connection loop speaks to peers.
        Family::Internal => unknown(&args),
    };
    // After the command, as Redis does (SELECT shows the new database).
    crate::monitor::feed(engine, session, spec, &args);
    if session.tracking.is_some() {
        engine.after_tracked_command(session, spec, &args);
    }
    if let Some(started) = started {
        // The one clock read after the command: the connection's latency metric takes
        // it too (`Session::took`).
        let took = started.elapsed();
        session.took = Some(took);
        if engine.slowlog.timing() {
            let client = &session.client;
            let unix_secs = || engine.now_ms() as i64 / 1000;
            engine
                .slowlog
                .record(spec, &args, took, unix_secs, || crate::slowlog::Caller {
                    addr: client.addr.clone(),
                    name: client.name(),
                });
        }
    }
    (reply, Flow::Continue)
}
