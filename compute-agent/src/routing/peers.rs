//! Connections to other agents and forwarding over them: a pool of idle connections
//! per peer (opened with `AUTH` and `DMC.PEER`), single forwarded commands, pipelined
//! runs for one owner, and the mixed local/remote runs of pipelined SETs. Replies are
//! read with [`dmc_resp::parse_reply`]. Called by the router and the connection loop;
//! it never decides who owns a key (that is [`Router::route`](super::Router)).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use dmc_engine::{Engine, Session};
use dmc_resp::{Limits, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{PEER_HELLO, Route, Router, RoutingMode, not_owner, redirected};

/// A forwarding connection's byte stream: plain TCP or TLS over it.
pub(super) trait PeerIo:
    tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + Sync
{
}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + Sync> PeerIo for T {}

/// The longest a forwarded command may take before its connection is dropped.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest opening a forwarding connection may take, handshake included: a
/// stopped peer's kernel still accepts the TCP connection, and only the missing
/// answer to `DMC.PEER` shows it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How much longer than a blocking command's own timeout its forwarder waits.
const BLOCKING_MARGIN: Duration = Duration::from_secs(10);

/// How long the owner may take to answer `args`: [`FORWARD_TIMEOUT`], or a blocking
/// command's timeout plus a margin (a year for one that waits for ever: dropping the
/// forwarder when its client leaves closes the connection, which ends the wait).
fn forward_timeout(args: &[Bytes]) -> Duration {
    if let Some(block) = dmc_engine::blocking::stream_block(args) {
        return block.map_or(Duration::from_secs(365 * 24 * 3600), |t| {
            t + BLOCKING_MARGIN
        });
    }
    let Some(at) = args
        .first()
        .and_then(|name| dmc_engine::blocking::timeout_position(name, args.len()))
    else {
        return FORWARD_TIMEOUT;
    };
    match args.get(at).map(|t| dmc_engine::blocking::timeout_arg(t)) {
        Some(Ok(Some(t))) => t + BLOCKING_MARGIN,
        Some(Ok(None)) => Duration::from_secs(365 * 24 * 3600),
        // The owner answers the bad timeout at once.
        _ => FORWARD_TIMEOUT,
    }
}

/// Idle forwarding connections kept per peer.
const IDLE_PER_PEER: usize = 16;

/// An internal connection to another agent.
pub(super) struct PeerConn {
    stream: Box<dyn PeerIo>,
    buf: BytesMut,
    /// The database the connection has selected.
    db: u8,
    /// The protocol the connection speaks (`HELLO`): the client's, so the owner shapes
    /// replies (RESP2 flat pairs or RESP3 maps and doubles) for the client.
    proto: u8,
    /// The user the owner runs this connection's commands as (`DMC.USER`): a client's,
    /// or `None` for this agent's own.
    user: Option<Bytes>,
    engine: Arc<Engine>,
}

/// Whose commands a forward carries: the database and protocol they run in, and the
/// user they run as at the owner — the client's (checked there as that user), or
/// `None` for the agent's own (a relay, a cache feed, news for every agent).
#[derive(Clone, Copy)]
pub(super) struct Sender<'a> {
    pub db: u8,
    pub proto: u8,
    pub user: Option<&'a Bytes>,
}

impl<'a> Sender<'a> {
    /// A client's commands, as its session runs them.
    pub fn client(session: &'a Session) -> Sender<'a> {
        Sender {
            db: session.db,
            proto: session.proto,
            user: Some(session.user.name()),
        }
    }

    /// This agent's own commands (database 0, RESP2).
    pub const AGENT: Sender<'static> = Sender {
        db: 0,
        proto: 2,
        user: None,
    };
}

impl Drop for PeerConn {
    fn drop(&mut self) {
        self.engine
            .stats
            .peer_connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Router {
    /// Sends `args` to the agent at `addr` on a pooled connection and reads its reply.
    pub(super) async fn forward(
        &self,
        addr: &str,
        session: &Session,
        args: &[Bytes],
    ) -> std::io::Result<Reply> {
        // A NOLOOP tracker's write: the owner is told whose it is, so the invalidation
        // it sends back skips the writer.
        let origin = match &session.tracking {
            Some(mode) if mode.noloop => self.my_address().map(|me| {
                [
                    Bytes::from_static(b"DMC.ORIGIN"),
                    Bytes::from(me),
                    Bytes::from(session.id.to_string()),
                ]
            }),
            _ => None,
        };
        let commands: Vec<&[Bytes]> = origin.iter().map(|o| &o[..]).chain([args]).collect();
        let mut replies = self
            .forward_many_within(
                addr,
                Sender::client(session),
                &commands,
                forward_timeout(args),
            )
            .await?;
        replies
            .pop()
            .ok_or_else(|| std::io::Error::other("no reply from the owner"))
    }

    /// Sends `command` to every other agent of the instance at once and waits for all
    /// (an agent that does not answer within the peer timeout is logged as missing
    /// `what`).
    pub(super) async fn tell_other_agents(&self, command: &[Bytes], what: &str) {
        let sends = self.other_agents().into_iter().map(|addr| async move {
            match self.forward_many(&addr, Sender::AGENT, &[command]).await {
                Ok(replies) if replies.iter().all(|r| !matches!(r, Reply::Error(_))) => {}
                other => tracing::warn!(%addr, ?other, "a peer did not take {what}"),
            }
        });
        futures::future::join_all(sends).await;
    }

    /// Sends commands of database `db` to the agent at `addr` pipelined on one pooled
    /// connection and reads their replies, in order.
    pub(super) async fn forward_many(
        &self,
        addr: &str,
        sender: Sender<'_>,
        commands: &[&[Bytes]],
    ) -> std::io::Result<Vec<Reply>> {
        self.forward_many_within(addr, sender, commands, FORWARD_TIMEOUT)
            .await
    }

    /// [`forward_many`](Self::forward_many) allowing the owner `within` to answer.
    async fn forward_many_within(
        &self,
        addr: &str,
        sender: Sender<'_>,
        commands: &[&[Bytes]],
        within: Duration,
    ) -> std::io::Result<Vec<Reply>> {
        let Sender { db, proto, user } = sender;
        let pooled = self.peers.lock().get_mut(addr).and_then(|v| v.pop());
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect(addr).await?,
        };
        let mut out = BytesMut::new();
        let hello = conn.proto != proto;
        if hello {
            encode_command(
                &[Bytes::from_static(b"HELLO"), Bytes::from(proto.to_string())],
                &mut out,
            );
        }
        let select = conn.db != db;
        if select {
            encode_command(
                &[Bytes::from_static(b"SELECT"), Bytes::from(db.to_string())],
                &mut out,
            );
        }
        // Sent before HELLO's and SELECT's replies are read, as they are: if the owner
        // refuses the user, it runs the commands that follow as nobody (fails closed),
        // and the connection is not pooled again.
        let act = conn.user.as_ref() != user;
        if act {
            let mut cmd = vec![Bytes::from_static(b"DMC.USER")];
            cmd.extend(user.cloned());
            encode_command(&cmd, &mut out);
        }
        for args in commands {
            encode_command(args, &mut out);
        }
        let replies = tokio::time::timeout(within, async {
            conn.stream.write_all(&out).await?;
            if hello {
                match conn.read_reply().await? {
                    Reply::Error(e) => {
                        return Err(std::io::Error::other(format!(
                            "the owner refused HELLO: {e}"
                        )));
                    }
                    _ => conn.proto = proto,
                }
            }
            if select {
                match conn.read_reply().await? {
                    Reply::Error(e) => {
                        return Err(std::io::Error::other(format!(
                            "the owner refused SELECT: {e}"
                        )));
                    }
                    _ => conn.db = db,
                }
            }
            if act {
                match conn.read_reply().await? {
                    // The commands' replies (refusals) follow: read, not returned.
                    Reply::Error(e) => {
                        for _ in commands.iter() {
                            conn.read_reply().await?;
                        }
                        return Err(std::io::Error::other(format!(
                            "the owner refused the client's user: {e}"
                        )));
                    }
                    _ => conn.user = user.cloned(),
                }
            }
            let mut replies = Vec::with_capacity(commands.len());
            for _ in commands {
                replies.push(conn.read_reply().await?);
            }
            Ok(replies)
        })
        .await
        .map_err(|_| std::io::Error::other("the owner did not answer in time"))??;
        // Pooled only while the peer is in the map (it may have left meanwhile).
        let member = self
            .map()
            .is_some_and(|m| m.agents.iter().any(|a| a.listen == addr));
        let mut peers = self.peers.lock();
        let idle = peers.entry(addr.to_string()).or_default();
        if member && idle.len() < IDLE_PER_PEER {
            idle.push(conn);
        }
        Ok(replies)
    }

    /// Runs pipelined writes of distinct keys (SETs and counter updates, see
    /// `Engine::leading_writes`) where they belong: the ones this agent owns as one concurrent batch, the ones other agents
    /// own forwarded pipelined, one round trip per owner, all at once (writes of
    /// distinct keys commute); the rest (redirections in cluster mode, a slot that moved
    /// meanwhile) one at a time. Replies in command order.
    pub async fn write_run(
        &self,
        session: &mut Session,
        commands: &[Vec<Bytes>],
        peer: bool,
    ) -> Vec<Reply> {
        let engine = &self.engine;
        if self.map.read().is_none() {
            return engine.write_batch(session, commands).await;
        }
        let mut local = Vec::new();
        let mut remote: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, c) in commands.iter().enumerate() {
            match self.route(c) {
                Route::Local => local.push(i),
                Route::Forward(addr) if !peer => {
                    match remote.iter_mut().find(|(a, _)| *a == addr) {
                        Some((_, v)) => v.push(i),
                        None => remote.push((addr, vec![i])),
                    }
                }
                // Redirections and the like: one at a time below.
                _ => {}
            }
        }
        let mut replies: Vec<Option<Reply>> = vec![None; commands.len()];
        {
            let shared: &Session = session;
            let local_cmds: Vec<Vec<Bytes>> = local.iter().map(|&i| commands[i].clone()).collect();
            let local_run = async {
                if local_cmds.is_empty() {
                    Vec::new()
                } else {
                    engine.write_batch(shared, &local_cmds).await
                }
            };
            let remote_runs = futures::future::join_all(remote.iter().map(|(addr, idx)| {
                let refs: Vec<&[Bytes]> = idx.iter().map(|&i| &commands[i][..]).collect();
                async move { self.forward_many(addr, Sender::client(shared), &refs).await }
            }));
            let (local_replies, remote_replies) = tokio::join!(local_run, remote_runs);
            for (&i, r) in local.iter().zip(local_replies) {
                // Fenced meanwhile (the slot moved): nothing was written; route it again.
                if !not_owner(&r) {
                    replies[i] = Some(r);
                }
            }
            for ((_, idx), got) in remote.iter().zip(remote_replies) {
                let Ok(got) = got else { continue };
                engine
                    .stats
                    .commands
                    .fetch_add(idx.len() as u64, Ordering::Relaxed);
                for (&i, r) in idx.iter().zip(got) {
                    if !redirected(&r) {
                        engine
                            .stats
                            .forwarded_commands
                            .fetch_add(1, Ordering::Relaxed);
                        replies[i] = Some(r);
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(commands.len());
        for (i, r) in replies.into_iter().enumerate() {
            out.push(match r {
                Some(r) => r,
                None => {
                    Box::pin(self.execute(session, commands[i].clone(), peer))
                        .await
                        .0
                }
            });
        }
        out
    }

    /// The owner and length of the leading run of pipelined `commands` (at most `max`,
    /// at least two) that are writes this agent forwards to one and the same agent, so
    /// that [`forward_run`](Self::forward_run) sends them in one round trip. Proxy mode
    /// only, never on a connection of another agent.
    pub fn leading_forwards(
        &self,
        session: &Session,
        commands: &[Vec<Bytes>],
        max: usize,
        peer: bool,
    ) -> Option<(String, usize)> {
        if commands.len() < 2
            || peer
            || !self.engine.plain(session)
            || self.mode != RoutingMode::Proxy
        {
            // In MULTI commands are queued here, not run.
            return None;
        }
        // A blocking command is forwarded on its own: it may hold its connection long.
        let blocks = |args: &Vec<Bytes>| {
            args.first()
                .and_then(|n| dmc_engine::table::lookup(n))
                .is_some_and(|s| s.has_flag("blocking"))
        };
        let owner = |args: &Vec<Bytes>| match args.is_empty() || blocks(args) {
            true => None,
            false => match self.route(args) {
                Route::Forward(addr) => Some(addr),
                _ => None,
            },
        };
        let first = owner(&commands[0])?;
        let n = commands
            .iter()
            .take(max)
            .take_while(|c| owner(c).as_deref() == Some(first.as_str()))
            .count();
        (n >= 2).then_some((first, n))
    }

    /// Forwards a run found by [`leading_forwards`](Self::leading_forwards) to `addr` in
    /// one round trip. A reply saying the owner changed meanwhile (nothing was written)
    /// sends that command down the one-at-a-time path, which routes it again; so does a
    /// run whose connection failed.
    pub async fn forward_run(
        &self,
        session: &mut Session,
        addr: &str,
        commands: &[Vec<Bytes>],
    ) -> Vec<Reply> {
        let stats = &self.engine.stats;
        stats
            .commands
            .fetch_add(commands.len() as u64, Ordering::Relaxed);
        let refs: Vec<&[Bytes]> = commands.iter().map(|c| &c[..]).collect();
        let mut replies = Vec::with_capacity(commands.len());
        match self
            .forward_many(addr, Sender::client(session), &refs)
            .await
        {
            Ok(got) => {
                for (args, reply) in commands.iter().zip(got) {
                    if redirected(&reply) {
                        replies.push(Box::pin(self.execute(session, args.clone(), false)).await.0);
                    } else {
                        stats.forwarded_commands.fetch_add(1, Ordering::Relaxed);
                        replies.push(reply);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(%addr, error = %e, "forwarding a run failed; one at a time");
                for args in commands {
                    replies.push(Box::pin(self.execute(session, args.clone(), false)).await.0);
                }
            }
        }
        replies
    }

    /// Opens a forwarding connection to the agent listening at `addr`: to its TLS port
    /// when both ends have TLS (the peer's certificate checked against the cluster CA,
    /// this agent's presented as the client's), else to its plain port. Bounded by
    /// [`CONNECT_TIMEOUT`], handshake included.
    async fn connect(&self, addr: &str) -> std::io::Result<PeerConn> {
        tokio::time::timeout(CONNECT_TIMEOUT, self.connect_unbounded(addr))
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("opening a forwarding connection to {addr} timed out"),
                )
            })?
    }

    async fn connect_unbounded(&self, addr: &str) -> std::io::Result<PeerConn> {
        let tls_addr = self.map().and_then(|m| {
            m.agents
                .iter()
                .find(|a| a.listen == addr)?
                .tls_listen
                .clone()
        });
        let target = match (&self.peer_tls, &tls_addr) {
            (Some(_), Some(t)) => t.as_str(),
            _ => addr,
        };
        let tcp = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(target))
            .await
            .map_err(|_| std::io::Error::other("connecting timed out"))??;
        tcp.set_nodelay(true)?;
        let stream: Box<dyn PeerIo> = match (&self.peer_tls, &tls_addr) {
            (Some(connector), Some(t)) => {
                let host = t.rsplit_once(':').map_or(t.as_str(), |(h, _)| h);
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(std::io::Error::other)?;
                let s = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
                    .await
                    .map_err(|_| std::io::Error::other("TLS handshake with a peer timed out"))??;
                Box::new(s)
            }
            _ => Box::new(tcp),
        };
        self.engine
            .stats
            .peer_connections
            .fetch_add(1, Ordering::Relaxed);
        let mut conn = PeerConn {
            stream,
            buf: BytesMut::with_capacity(4096),
            db: 0,
            proto: 2,
            user: None,
            engine: self.engine.clone(),
        };
        let mut out = BytesMut::new();
        if let Some(pw) = &self.password {
            encode_command(&[Bytes::from_static(b"AUTH"), pw.clone()], &mut out);
        }
        // The peer takes forwarded commands only with the cluster secret.
        let secret = dmc_process::secret::installed()
            .map(|s| s.bytes().clone())
            .unwrap_or_default();
        encode_command(&[Bytes::from_static(PEER_HELLO), secret], &mut out);
        conn.stream.write_all(&out).await?;
        // DMC.PEER with the secret is what admits a peer: a refused AUTH (the
        // instance's password changed since this agent started) does not matter.
        if self.password.is_some()
            && let Reply::Error(e) = conn.read_reply().await?
        {
            tracing::debug!(%addr, error = %e, "a peer refused the startup password; DMC.PEER decides");
        }
        if let Reply::Error(e) = conn.read_reply().await? {
            return Err(std::io::Error::other(format!("peer refused DMC.PEER: {e}")));
        }
        tracing::debug!(%addr, "opened a forwarding connection");
        Ok(conn)
    }
}

impl PeerConn {
    async fn read_reply(&mut self) -> std::io::Result<Reply> {
        loop {
            match dmc_resp::parse_reply(&mut self.buf, &Limits::default()) {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {}
                Err(e) => return Err(std::io::Error::other(format!("bad reply from a peer: {e}"))),
            }
            self.buf.reserve(4096);
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::Error::other("the peer closed the connection"));
            }
        }
    }
}

fn encode_command(args: &[Bytes], out: &mut BytesMut) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stopped peer (SIGSTOP) still has its TCP connections accepted by the kernel
    /// and answers nothing: opening a forwarding connection to it fails after
    /// [`CONNECT_TIMEOUT`] instead of hanging the client's command for good (a
    /// redis-cli SET hung for minutes in `tests/tests/faults.rs`).
    #[tokio::test]
    async fn a_peer_that_accepts_but_never_answers_times_out() {
        let engine = crate::test_engine().await;
        let router = Router::new(engine, RoutingMode::Proxy, None, None, None);
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        let held = tokio::spawn(async move {
            let mut kept = Vec::new();
            while let Ok((s, _)) = silent.accept().await {
                kept.push(s);
            }
        });
        let err = tokio::time::timeout(Duration::from_secs(30), router.connect(&addr))
            .await
            .expect("opening the connection hung")
            .err()
            .expect("no answer, no connection");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        held.abort();
    }
}
