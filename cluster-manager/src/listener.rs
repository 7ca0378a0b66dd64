//! The admin API's listener, hardened against peers that never authenticate: at most
//! [`MAX_CONNECTIONS`] connections at once (a further one waits in the kernel's
//! backlog), and a connection on which nothing arrives for [`IDLE_TIMEOUT`] is closed,
//! so a client that opens connections and sends half a request (slowloris) cannot pin
//! the manager's file descriptors; with a certificate, each connection's TLS handshake
//! runs in its own task (bounded in time) before axum sees it. Used by `serve` in place
//! of a bare `TcpListener`; it never looks at what the bytes say (the router and its
//! secret check do).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most admin-API connections open at once (agents and nodes use one or two each).
pub const MAX_CONNECTIONS: usize = 1024;
/// A connection that sends nothing for this long is closed (long polls of the map
/// wait at most 30 s server-side and write their answer before this).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The byte stream of one accepted connection: plain TCP or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// A `TcpListener` with a connection cap, an idle timeout per connection, and TLS if
/// it has a certificate.
pub struct GuardedListener {
    local: std::net::SocketAddr,
    /// Connections ready for axum (handshaken, if TLS), each holding its slot.
    ready: tokio::sync::mpsc::Receiver<(GuardedStream, std::net::SocketAddr)>,
}

impl GuardedListener {
    pub fn new(
        inner: TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> io::Result<GuardedListener> {
        GuardedListener::with_limits(inner, tls, MAX_CONNECTIONS, IDLE_TIMEOUT)
    }

    pub fn with_limits(
        inner: TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
        max: usize,
        idle: Duration,
    ) -> io::Result<GuardedListener> {
        let local = inner.local_addr()?;
        let slots = Arc::new(Semaphore::new(max));
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(accept_loop(inner, tls, slots, idle, tx));
        Ok(GuardedListener { local, ready })
    }
}

/// Accepts connections while a slot is free, handshakes TLS ones in tasks of their
/// own (a slow handshake delays no one else), and hands them to the listener.
async fn accept_loop(
    inner: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    slots: Arc<Semaphore>,
    idle: Duration,
    ready: tokio::sync::mpsc::Sender<(GuardedStream, std::net::SocketAddr)>,
) {
    loop {
        // Wait for a free slot before accepting: excess connections queue in the
        // kernel instead of costing this process anything.
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, addr) = match inner.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "admin API accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let ready = ready.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let io: Box<dyn Io> = match tls {
                None => Box::new(stream),
                Some(acceptor) => match tokio::time::timeout(idle, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => Box::new(s),
                    _ => return,
                },
            };
            let guarded = GuardedStream {
                stream: io,
                _permit: permit,
                idle,
                deadline: Box::pin(tokio::time::sleep(idle)),
            };
            let _ = ready.send((guarded, addr)).await;
        });
    }
}

impl axum::serve::Listener for GuardedListener {
    type Io = GuardedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept loop ended (the runtime is shutting down).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// One accepted connection: its slot is given back when it is dropped, and a read
/// that waits longer than the idle timeout fails.
pub struct GuardedStream {
    stream: Box<dyn Io>,
    _permit: OwnedSemaphorePermit,
    idle: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    let next = tokio::time::Instant::now() + self.idle;
                    self.deadline.as_mut().reset(next);
                }
                Poll::Ready(r)
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "admin API connection idle",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpStream;

    /// A silent connection is closed after the idle timeout, and its slot serves the
    /// next connection; connections past the cap wait instead of being served.
    #[tokio::test]
    async fn idle_connections_are_closed_and_slots_reused() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut l =
            GuardedListener::with_limits(inner, None, 1, Duration::from_millis(200)).unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (mut io, _) = l.accept().await;
        let mut buf = [0u8; 8];
        let read = io.read(&mut buf).await;
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::TimedOut);
        // The only slot is taken until the first stream is gone.
        let _second = TcpStream::connect(addr).await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(300), l.accept()).await;
        assert!(waiting.is_err(), "a connection past the cap was accepted");
        drop(io);
        let accepted = tokio::time::timeout(Duration::from_secs(10), l.accept()).await;
        assert!(accepted.is_ok(), "the freed slot was not reused");
    }
}
