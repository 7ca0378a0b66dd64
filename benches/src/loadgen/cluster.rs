//! Cluster mode: the slot map from `CLUSTER SLOTS`, requests routed to the node that
//! owns their key's hash slot, `-MOVED` followed (and the map updated) and `-ASK`
//! followed with `ASKING`, as a cluster-aware Redis client does.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::client::{ReplyKind, Target, connect, encode, parse_reply};

const SLOTS: usize = 16384;
/// Redirections followed for one request before it counts as failed.
const MAX_REDIRECTS: usize = 16;

/// A decoded reply, for the few replies this client reads in full.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Str(Vec<u8>),
    Array(Vec<Value>),
    Null,
    Error(String),
}

/// Decodes one RESP2/RESP3 reply (maps and sets as arrays).
pub fn decode(buf: &[u8]) -> Result<Option<(Value, usize)>, String> {
    let Some(&t) = buf.first() else {
        return Ok(None);
    };
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&buf[1..end]).map_err(|_| "non-UTF-8 reply header")?;
    let num = || {
        text.parse::<i64>()
            .map_err(|_| format!("bad number {text:?}"))
    };
    let next = end + 2;
    Ok(Some(match t {
        b'+' => (Value::Str(text.as_bytes().to_vec()), next),
        b'-' => (Value::Error(text.to_string()), next),
        b':' => (Value::Int(num()?), next),
        b'_' => (Value::Null, next),
        b'$' => {
            let n = num()?;
            if n < 0 {
                return Ok(Some((Value::Null, next)));
            }
            let stop = next + n as usize;
            if buf.len() < stop + 2 {
                return Ok(None);
            }
            (Value::Str(buf[next..stop].to_vec()), stop + 2)
        }
        b'*' | b'~' | b'%' => {
            let n = num()?;
            if n < 0 {
                return Ok(Some((Value::Null, next)));
            }
            let items = if t == b'%' { 2 * n } else { n };
            let mut pos = next;
            let mut v = Vec::with_capacity(items as usize);
            for _ in 0..items {
                match decode(&buf[pos..])? {
                    Some((x, used)) => {
                        v.push(x);
                        pos += used;
                    }
                    None => return Ok(None),
                }
            }
            (Value::Array(v), pos)
        }
        other => return Err(format!("unexpected reply type {:?}", other as char)),
    }))
}

/// Which node serves each hash slot.
#[derive(Debug, Clone)]
pub struct SlotMap {
    owner: Vec<Option<String>>,
}

impl SlotMap {
    /// Parses a `CLUSTER SLOTS` reply.
    pub fn from_cluster_slots(v: &Value) -> Result<SlotMap> {
        let Value::Array(ranges) = v else {
            bail!("CLUSTER SLOTS did not return an array: {v:?}");
        };
        let mut owner = vec![None; SLOTS];
        for r in ranges {
            let Value::Array(f) = r else {
                bail!("bad CLUSTER SLOTS entry {r:?}")
            };
            let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(node))) =
                (f.first(), f.get(1), f.get(2))
            else {
                bail!("bad CLUSTER SLOTS entry {r:?}");
            };
            let (Some(Value::Str(ip)), Some(Value::Int(port))) = (node.first(), node.get(1)) else {
                bail!("bad CLUSTER SLOTS node {node:?}");
            };
            let addr = format!("{}:{port}", String::from_utf8_lossy(ip));
            let (lo, hi) = (*lo as usize, (*hi as usize).min(SLOTS - 1));
            for o in owner.iter_mut().take(hi + 1).skip(lo) {
                *o = Some(addr.clone());
            }
        }
        Ok(SlotMap { owner })
    }

    /// Every slot on one node: a starting point that MOVED replies correct.
    pub fn single(addr: &str) -> SlotMap {
        SlotMap {
            owner: vec![Some(addr.to_string()); SLOTS],
        }
    }

    pub fn node(&self, slot: u16) -> Option<&str> {
        self.owner[slot as usize % SLOTS].as_deref()
    }

    pub fn set(&mut self, slot: u16, addr: &str) {
        self.owner[slot as usize % SLOTS] = Some(addr.to_string());
    }
}

/// Reads `CLUSTER SLOTS` from the seed.
pub async fn discover(seed: &Target) -> Result<SlotMap> {
    let mut s = connect(seed).await?;
    let mut out = Vec::new();
    encode(&mut out, &[b"CLUSTER", b"SLOTS"]);
    s.write_all(&out).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        if let Some((v, _)) = decode(&buf).map_err(anyhow::Error::msg)? {
            if let Value::Error(e) = &v {
                bail!(
                    "CLUSTER SLOTS failed on {}: {e} (is it a cluster node?)",
                    seed.addr
                );
            }
            return SlotMap::from_cluster_slots(&v);
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            bail!("{} closed the connection", seed.addr);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One request for [`ClusterClient::exec`]: its key (for routing) and its encoding.
pub struct Request {
    pub key: Vec<u8>,
    pub wire: Vec<u8>,
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// A worker's connections to every node it has needed, and the shared slot map.
pub struct ClusterClient {
    target: Target,
    map: Arc<RwLock<SlotMap>>,
    conns: HashMap<String, Conn>,
    /// MOVED and ASK redirections followed.
    pub redirects: u64,
    /// Connections a node dropped (their requests were sent again).
    pub reconnects: u64,
}

fn slot_of(key: &[u8]) -> u16 {
    dmc_dht::hash::key_slot(key)
}

impl ClusterClient {
    pub fn new(target: Target, map: Arc<RwLock<SlotMap>>) -> ClusterClient {
        ClusterClient {
            target,
            map,
            conns: HashMap::new(),
            redirects: 0,
            reconnects: 0,
        }
    }

    async fn conn(&mut self, addr: &str) -> Result<&mut Conn> {
        if !self.conns.contains_key(addr) {
            let t = Target {
                addr: addr.to_string(),
                ..self.target.clone()
            };
            let stream = connect(&t).await?;
            self.conns.insert(
                addr.to_string(),
                Conn {
                    stream,
                    buf: Vec::new(),
                },
            );
        }
        self.conns.get_mut(addr).context("connection just made")
    }

    async fn read(conn: &mut Conn) -> Result<(ReplyKind, Option<String>)> {
        let mut chunk = [0u8; 16 << 10];
        loop {
            if let Some((kind, n)) = parse_reply(&conn.buf).map_err(anyhow::Error::msg)? {
                // Keep the full error text of a redirection: it names the new node.
                let text = match &kind {
                    ReplyKind::Error(_) => {
                        Some(String::from_utf8_lossy(&conn.buf[1..n - 2]).into_owned())
                    }
                    _ => None,
                };
                conn.buf.drain(..n);
                return Ok((kind, text));
            }
            let got = conn.stream.read(&mut chunk).await?;
            if got == 0 {
                bail!("a cluster node closed the connection");
            }
            conn.buf.extend_from_slice(&chunk[..got]);
        }
    }

    /// Sends one node's requests pipelined and reads their replies.
    async fn send_group(
        &mut self,
        node: &str,
        group: &[(usize, bool)],
        reqs: &[Request],
    ) -> Result<Vec<(ReplyKind, Option<String>)>> {
        let conn = self.conn(node).await?;
        let mut out = Vec::new();
        for (i, asking) in group {
            if *asking {
                encode(&mut out, &[b"ASKING"]);
            }
            out.extend_from_slice(&reqs[*i].wire);
        }
        conn.stream.write_all(&out).await?;
        let mut replies = Vec::with_capacity(group.len());
        for (_, asking) in group {
            if *asking {
                Self::read(conn).await?;
            }
            replies.push(Self::read(conn).await?);
        }
        Ok(replies)
    }

    /// Sends every request to its slot's node (pipelined per node) and returns the
    /// replies in request order, following redirections.
    pub async fn exec(&mut self, reqs: &[Request]) -> Result<Vec<ReplyKind>> {
        let shared_map = self.map.clone();
        let mut replies: Vec<Option<ReplyKind>> = vec![None; reqs.len()];
        // (request index, node to ask with ASKING, if redirected by ASK)
        let mut todo: Vec<(usize, Option<String>)> = (0..reqs.len()).map(|i| (i, None)).collect();
        for _ in 0..=MAX_REDIRECTS {
            if todo.is_empty() {
                break;
            }
            let mut groups: Vec<(String, Vec<(usize, bool)>)> = Vec::new();
            {
                let map = self
                    .map
                    .read()
                    .map_err(|_| anyhow::anyhow!("slot map poisoned"))?;
                for (i, ask) in &todo {
                    let (node, asking) = match ask {
                        Some(a) => (a.clone(), true),
                        None => (
                            map.node(slot_of(&reqs[*i].key))
                                .unwrap_or(&self.target.addr)
                                .to_string(),
                            false,
                        ),
                    };
                    match groups.iter_mut().find(|(n, _)| *n == node) {
                        Some((_, g)) => g.push((*i, asking)),
                        None => groups.push((node, vec![(*i, asking)])),
                    }
                }
            }
            let mut retry = Vec::new();
            for (node, group) in groups {
                // A node that drops the connection (a reshard, a restart) is asked
                // again on a new one; its requests keep their place in the order.
                let replies_of = match self.send_group(&node, &group, reqs).await {
                    Ok(r) => r,
                    Err(_) => {
                        self.reconnects += 1;
                        self.conns.remove(&node);
                        retry.extend(group.iter().map(|(i, _)| (*i, None)));
                        continue;
                    }
                };
                for ((i, _), (kind, text)) in group.into_iter().zip(replies_of) {
                    let redirect = text.as_deref().and_then(|t| {
                        let mut w = t.split(' ');
                        match (w.next(), w.next(), w.next()) {
                            (Some(k @ ("MOVED" | "ASK")), Some(slot), Some(addr)) => {
                                Some((k == "MOVED", slot.parse::<u16>().ok()?, addr.to_string()))
                            }
                            _ => None,
                        }
                    });
                    match redirect {
                        Some((moved, slot, addr)) => {
                            if moved && let Ok(mut m) = shared_map.write() {
                                m.set(slot, &addr);
                            }
                            retry.push((i, (!moved).then_some(addr)));
                        }
                        None => replies[i] = Some(kind),
                    }
                }
            }
            self.redirects += retry.len() as u64;
            todo = retry;
        }
        Ok(replies
            .into_iter()
            .map(|r| r.unwrap_or(ReplyKind::Error("MOVED".into())))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_slots_replies_become_a_slot_map() {
        let wire = b"*2\r\n*3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n\
                     *3\r\n:8192\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n$2\r\nid\r\n";
        let (v, used) = decode(wire).unwrap().unwrap();
        assert_eq!(used, wire.len());
        let mut map = SlotMap::from_cluster_slots(&v).unwrap();
        assert_eq!(map.node(0), Some("127.0.0.1:7000"));
        assert_eq!(map.node(16383), Some("127.0.0.1:7001"));
        map.set(5, "127.0.0.1:7002");
        assert_eq!(map.node(5), Some("127.0.0.1:7002"));
        assert!(decode(&wire[..20]).unwrap().is_none(), "partial");
    }
}
