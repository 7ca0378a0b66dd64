//! A plain RESP2 test connection: sends commands, reads whole (binary-safe) replies.

use std::time::Duration;

use anyhow::Result;

/// A reply as a RESP2 client sees it.
pub use redis_protocol::resp2::types::OwnedFrame as Frame;

/// A plain RESP2 connection that sends commands and reads whole replies (binary-safe:
/// a reply is decoded, not cut at a line end). A read waits at most 30 s.
pub struct RespConn {
    stream: std::net::TcpStream,
    buf: Vec<u8>,
    /// Where the next reply starts in `buf` (replies are not drained one by one: a
    /// burst of many would cost quadratic copying).
    start: usize,
}

impl RespConn {
    pub fn connect(port: &str) -> Result<RespConn> {
        let stream = std::net::TcpStream::connect(format!("127.0.0.1:{port}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(RespConn {
            stream,
            buf: Vec::new(),
            start: 0,
        })
    }

    /// Sends one command without reading its reply.
    pub fn send(&mut self, args: &[&[u8]]) -> Result<()> {
        use std::io::Write;
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&out)?;
        Ok(())
    }

    /// Reads the next whole reply.
    pub fn read(&mut self) -> Result<Frame> {
        use std::io::Read;
        loop {
            if let Some((frame, used)) =
                redis_protocol::resp2::decode::decode(&self.buf[self.start..])
                    .map_err(|e| anyhow::anyhow!("a reply that is not RESP2: {e:?}"))?
            {
                self.start += used;
                if self.start == self.buf.len() {
                    self.buf.clear();
                    self.start = 0;
                }
                return Ok(frame);
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk)?;
            anyhow::ensure!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends a command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Frame> {
        self.send(args)?;
        self.read()
    }

    /// [`call`](Self::call) with text arguments.
    pub fn cmd(&mut self, args: &[&str]) -> Result<Frame> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.call(&args)
    }
}

/// The text of an error reply, or a panic naming what came instead.
pub fn error_text(frame: &Frame) -> &str {
    match frame {
        Frame::Error(e) => e,
        other => panic!("expected an error reply, got {other:?}"),
    }
}
