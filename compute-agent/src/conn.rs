//! One client connection: read, parse every complete request, run them in order (runs
//! of pipelined GETs, SETs or writes for one other owner as one batch), and write all
//! their replies with one write. Spawned per accepted socket by [`crate::run`]; it
//! never decides where a command runs (that is [`crate::routing`]) and never touches
//! the pool.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use dmc_engine::{Engine, Flow};
use dmc_resp::{Limits, Reply, RequestParser};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use dmc_engine::table::{self, Family};

use crate::metrics::CommandTimers;
use crate::routing::Router;

/// Pipelined GETs read from the pool together, at most this many at a time.
const GET_BATCH: usize = 32;
/// Pipelined writes (SETs, counter updates) of distinct keys run together, at most
/// this many at a time.
const WRITE_BATCH: usize = 32;
/// Pipelined writes to one other agent are forwarded together, at most this many.
const FORWARD_BATCH: usize = 64;
/// The read buffer of a connection before its first bytes.
const FIRST_READ: usize = 512;

/// A client's place in `connected_clients`: taken when its connection is accepted and
/// given back when the connection's task ends, however it ends (a panic included), so
/// the count INFO and `maxclients` see is exact.
pub(crate) struct ClientSlot {
    engine: std::sync::Arc<Engine>,
    /// Connections open, this one included, when it was accepted.
    pub open: u64,
}

impl ClientSlot {
    pub fn take(engine: std::sync::Arc<Engine>) -> ClientSlot {
        let open = engine
            .stats
            .connected_clients
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        ClientSlot { engine, open }
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.engine
            .stats
            .connected_clients
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// What every connection of the agent shares.
pub(crate) struct ConnShared {
    pub router: std::sync::Arc<Router>,
    pub timers: CommandTimers,
    /// Write a client's replies only after the runtime ran every other task ready
    /// (one runtime thread: see [`crate::Config::threads`]).
    pub batch_replies: bool,
}

/// Serves one client: parse every complete request in the buffer, run them in order
/// (runs of plain GETs as one batch), write all their replies together (pipelining).
pub(crate) async fn serve_conn(
    shared: &ConnShared,
    stream: tokio::net::TcpStream,
    tls: Option<&dmc_verbs::tls::ServerTls>,
    drain: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let engine = shared.router.engine();
    use std::os::fd::AsRawFd;
    let show =
        |a: std::io::Result<std::net::SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
    let mut session = engine.new_session(
        show(stream.peer_addr()),
        show(stream.local_addr()),
        i64::from(stream.as_raw_fd()),
    );
    // Unregisters the client and its subscriptions however the session ends (error,
    // kill, or a panic).
    struct Registered<'a>(&'a Engine, u64);
    impl Drop for Registered<'_> {
        fn drop(&mut self) {
            self.0.clients.unregister(self.1);
            self.0.pubsub.remove_client(self.1);
            self.0.forget_tracker(self.1);
        }
    }
    let _registered = Registered(engine, session.id);
    match tls {
        None => {
            let (rd, wr) = stream.into_split();
            serve_session(shared, rd, wr, &mut session, drain).await
        }
        Some(acceptor) => {
            let stream = acceptor.accept(stream).await?;
            let (rd, wr) = tokio::io::split(stream);
            serve_session(shared, rd, wr, &mut session, drain).await
        }
    }
}

/// Writes replies to the client, counted for INFO. A client that stops reading blocks
/// this write (and so stops being read: its input cannot pile up replies); CLIENT KILL
/// still ends it, and so does `client-output-buffer-limit normal`: replies over the
/// hard limit close the client at once, and replies over the soft limit must be taken
/// within its seconds.
async fn send(
    wr: &mut (impl AsyncWrite + Unpin),
    out: &[u8],
    engine: &Engine,
    client: &dmc_engine::clients::Client,
) -> std::io::Result<()> {
    let stats = &engine.stats;
    let limit = engine.limits.normal_output();
    let pending = out.len() as u64;
    if limit.hard > 0 && pending > limit.hard {
        tracing::warn!(
            bytes = pending,
            "closing a client over client-output-buffer-limit (hard)"
        );
        return Err(std::io::Error::other("client-output-buffer-limit"));
    }
    let deadline =
        (limit.soft > 0 && pending > limit.soft).then(|| Duration::from_secs(limit.soft_seconds));
    stats.net_output_bytes.fetch_add(pending, Ordering::Relaxed);
    stats.writes_processed.fetch_add(1, Ordering::Relaxed);
    let soft_timer = async {
        match deadline {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = wr.write_all(out) => r,
        _ = client.killed() => Err(std::io::Error::other("killed by CLIENT KILL")),
        _ = soft_timer => {
            tracing::warn!(bytes = pending, "closing a client over client-output-buffer-limit (soft)");
            Err(std::io::Error::other("client-output-buffer-limit"))
        }
    }
}

/// Writes the messages waiting in a subscriber's mailbox into `out`; once the client
/// has no subscription left, the mailbox goes with its last messages.
fn deliver_messages(session: &mut dmc_engine::Session, out: &mut BytesMut) {
    let Some(mailbox) = &session.mailbox else {
        return;
    };
    for m in mailbox.take() {
        if let Some(reply) = m.reply(session.proto) {
            reply.encode(session.proto, out);
        }
    }
    if !session.subscribed && !session.monitoring && session.tracking.is_none() {
        session.mailbox = None;
    }
}

async fn serve_session(
    shared: &ConnShared,
    mut rd: impl AsyncRead + Unpin,
    mut wr: impl AsyncWrite + Unpin,
    session: &mut dmc_engine::Session,
    mut drain: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let ConnShared {
        router,
        timers,
        batch_replies,
    } = shared;
    let engine = router.engine();
    // Another agent forwarding writes to this one (see `routing`).
    let mut peer = false;
    let client = session.client.clone();
    let mut buf = BytesMut::new();
    let mut parser = RequestParser::default();
    let mut out = BytesMut::new();
    // Input read while a blocking command waited, not parsed yet.
    let mut unparsed = false;
    loop {
        // A connection that has sent nothing yet holds a small buffer (ten thousand
        // idle clients cost their buffers' bytes each); one that talks, 4 KiB per read.
        buf.reserve(if buf.capacity() == 0 {
            FIRST_READ
        } else {
            4096
        });
        // Redis's `timeout`: an idle client is closed (read at every wait, so CONFIG SET
        // applies to open connections too).
        let idle = match engine.timeout_secs.load(Ordering::Relaxed) {
            0 => None,
            secs => Some(Duration::from_secs(secs)),
        };
        let idle_timer = async {
            match idle {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        // A subscriber's messages are written as they come (a subscriber is never
        // closed for being idle, as in Redis).
        let mailbox = session.mailbox.clone();
        let message = async {
            match &mailbox {
                Some(m) => m.ready().await,
                None => std::future::pending().await,
            }
        };
        let mut messages = false;
        tokio::select! {
            _ = message, if !unparsed => messages = true,
            _ = idle_timer, if !unparsed && mailbox.is_none() => return Ok(()),
            _ = std::future::ready(()), if unparsed => unparsed = false,
            read = rd.read_buf(&mut buf), if !unparsed => match read? {
                0 => return Ok(()),
                n => {
                    engine.stats.net_input_bytes.fetch_add(n as u64, Ordering::Relaxed);
                    engine.stats.reads_processed.fetch_add(1, Ordering::Relaxed);
                }
            },
            // CLIENT KILL from another connection.
            _ = client.killed() => return Ok(()),
            // Shutting down: every command this client sent was answered.
            _ = drain.wait_for(|d| *d) => return Ok(()),
        }
        if messages {
            deliver_messages(session, &mut out);
            send(&mut wr, &out, engine, &client).await?;
            out.clear();
            continue;
        }
        // Limits are read at every read, so CONFIG SET applies to open connections.
        let unauthenticated = !session.authenticated;
        let limits = Limits {
            max_bulk: usize::try_from(engine.limits.proto_max_bulk_len()).unwrap_or(usize::MAX),
            unauthenticated,
            ..Limits::default()
        };
        // Parse every complete request first, so runs of pipelined GETs can be read
        // from the pool as one batch.
        let mut commands: Vec<Vec<Bytes>> = Vec::new();
        let mut bad = None;
        loop {
            match parser.parse(&mut buf, &limits) {
                Ok(Some(args)) if args.is_empty() => continue,
                Ok(Some(args)) => {
                    commands.push(args);
                    // Before AUTH, one request at a time: what follows an AUTH is
                    // parsed with the limits it lifts (Redis does the same).
                    if unauthenticated {
                        unparsed = !buf.is_empty();
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    bad = Some(e);
                    break;
                }
            }
        }
        engine.prefetch_keys(session, &commands);
        let mut i = 0;
        while i < commands.len() {
            // CLIENT PAUSE holds this client's commands (not another agent's).
            if !peer && engine.pause.active() {
                tokio::select! {
                    _ = engine.pause.wait(&commands[i]) => {}
                    _ = client.killed() => return Ok(()),
                }
            }
            let gets = engine.leading_gets(session, &commands[i..], GET_BATCH);
            let writes = match gets {
                0 => engine.leading_writes(session, &commands[i..], WRITE_BATCH),
                _ => 0,
            };
            let forwards = match (gets, writes) {
                (0 | 1, 0 | 1) => {
                    router.leading_forwards(session, &commands[i..], FORWARD_BATCH, peer)
                }
                _ => None,
            };
            let started = Instant::now();
            if let Some((owner, forwards)) = forwards {
                let run = &commands[i..i + forwards];
                for reply in router.forward_run(session, &owner, run).await {
                    if session.should_reply() {
                        reply.encode(session.proto, &mut out);
                    }
                }
                let took = started.elapsed();
                for spec in run.iter().filter_map(|c| table::lookup(&c[0])) {
                    timers.record(spec.family(), took, 1);
                }
                i += forwards;
            } else if gets >= 2 {
                for reply in engine.get_batch(session, &commands[i..i + gets]).await {
                    if session.should_reply() {
                        reply.encode(session.proto, &mut out);
                    }
                }
                timers.record(Family::Strings, started.elapsed(), gets);
                i += gets;
            } else if writes >= 2 {
                for reply in router
                    .write_run(session, &commands[i..i + writes], peer)
                    .await
                {
                    if session.should_reply() {
                        reply.encode(session.proto, &mut out);
                    }
                }
                timers.record(Family::Strings, started.elapsed(), writes);
                i += writes;
            } else {
                let args = std::mem::take(&mut commands[i]);
                i += 1;
                // The command is looked up once here; the router and the engine reuse it.
                let index = table::lookup_index(&args[0]);
                let family = index.and_then(|i| table::TABLE.get(i)).map(|s| s.family());
                // A command the tests use to panic this connection's task.
                #[cfg(feature = "failpoints")]
                fail::fail_point!(
                    "conn-panic",
                    args[0].eq_ignore_ascii_case(b"dmc.test.panic"),
                    |_| Ok(())
                );
                if family == Some(Family::Internal) {
                    let cmd = index.and_then(|i| table::TABLE.get(i)).map(|s| s.cmd);
                    if let Some(
                        cmd @ (table::Cmd::DmcWarm
                        | table::Cmd::DmcTracking
                        | table::Cmd::DmcInvalidate
                        | table::Cmd::DmcOrigin
                        | table::Cmd::DmcUser
                        | table::Cmd::DmcKeep),
                    ) = cmd
                    {
                        // A cache update from a primary this agent backs up, or
                        // tracking news: only another agent of the cluster may send one.
                        let reply = match (peer, cmd) {
                            (false, _) => Reply::err("NOPERM DMC.* is for the cluster's agents"),
                            (true, table::Cmd::DmcWarm) => router.warm(&args),
                            (true, table::Cmd::DmcKeep) => router.keep_news(&args).await,
                            (true, table::Cmd::DmcUser) if args.len() <= 2 => {
                                dmc_engine::acl_cmd::act_for(engine, session, args.get(1))
                            }
                            (true, table::Cmd::DmcUser) => {
                                Reply::err("ERR DMC.USER expects at most a user name")
                            }
                            (true, table::Cmd::DmcOrigin) => {
                                match args.get(2).and_then(|id| dmc_engine::parse_i64(id)) {
                                    Some(id) if args.len() == 3 => {
                                        session.origin = Some((args[1].clone(), id as u64));
                                        Reply::ok()
                                    }
                                    _ => Reply::err(
                                        "ERR DMC.ORIGIN expects an address and a client id",
                                    ),
                                }
                            }
                            (true, _) => router.tracking_news(&args),
                        };
                        reply.encode(session.proto, &mut out);
                        continue;
                    }
                    // DMC.PEER SECRET: another agent of the cluster, whose commands
                    // are never forwarded again.
                    let secret = dmc_process::secret::installed();
                    let presented = args.get(1).map(|a| &a[..]).unwrap_or_default();
                    if secret.is_some_and(|s| s.matches(presented)) {
                        peer = true;
                        session.peer = true;
                        session.authenticated = true;
                        Reply::ok().encode(session.proto, &mut out);
                    } else {
                        Reply::err("NOPERM DMC.PEER needs this cluster's secret")
                            .encode(session.proto, &mut out);
                    }
                    continue;
                }
                let blocks = index
                    .and_then(|i| table::TABLE.get(i))
                    .is_some_and(|s| s.has_flag("blocking"));
                session.started = Some(started);
                let (reply, flow) = if blocks {
                    // A blocked command ends when its client goes away: its end of the
                    // connection is watched meanwhile (input that arrives is kept).
                    let run = router.execute_at(session, index, args, peer);
                    tokio::pin!(run);
                    let mut gone = false;
                    loop {
                        tokio::select! {
                            done = &mut run => break done,
                            read = rd.read_buf(&mut buf), if !gone => match read {
                                Ok(0) | Err(_) => {
                                    gone = true;
                                    client.kill();
                                }
                                // The limit holds while blocked too (the buffer
                                // grew without bound behind `BLPOP k 0`).
                                Ok(_) if buf.len() as u64 > engine.limits.client_query_buffer_limit() => {
                                    tracing::warn!(
                                        bytes = buf.len(),
                                        "closing a blocked client over client-query-buffer-limit"
                                    );
                                    gone = true;
                                    client.kill();
                                }
                                Ok(_) => unparsed = true,
                            },
                        }
                    }
                } else {
                    router.execute_at(session, index, args, peer).await
                };
                // Messages published meanwhile (to this client too) come first.
                deliver_messages(session, &mut out);
                if session.should_reply() {
                    reply.encode(session.proto, &mut out);
                }
                if let Some(family) = family {
                    let took = session.took.take().unwrap_or_else(|| started.elapsed());
                    timers.record(family, took, 1);
                }
                if flow == Flow::Close || client.is_killed() {
                    send(&mut wr, &out, engine, &client).await?;
                    return Ok(());
                }
            }
            if out.len() >= 64 << 10 {
                send(&mut wr, &out, engine, &client).await?;
                out.clear();
            }
        }
        if let Some(e) = bad {
            Reply::Error(e.to_string()).encode(session.proto, &mut out);
            send(&mut wr, &out, engine, &client).await?;
            return Ok(());
        }
        if !out.is_empty() {
            if *batch_replies {
                // Redis's event loop reads every ready client before it writes any
                // reply. One thread writing each reply as soon as it is made woke the
                // client once per reply, and the kernel then ran the client on this
                // thread's core: 0.07 context switches per request against 0.011,
                // and SET -P 16 at 0.69 M/s against 0.80 M/s.
                tokio::task::yield_now().await;
            }
            send(&mut wr, &out, engine, &client).await?;
            out.clear();
            if out.capacity() > 1 << 20 {
                out = BytesMut::new();
            }
        }
        if buf.len() as u64 > engine.limits.client_query_buffer_limit() {
            tracing::warn!(
                bytes = buf.len(),
                "closing a client over client-query-buffer-limit"
            );
            return Ok(());
        }
        if buf.is_empty() && buf.capacity() > 1 << 20 {
            buf = BytesMut::new();
        }
    }
}
