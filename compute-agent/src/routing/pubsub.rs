//! Pub/sub across the agents of an instance: a PUBLISH (or SPUBLISH) on this agent
//! delivers to its own subscribers and is sent once to every other agent, over the peer
//! connections forwarding uses, where it reaches theirs; the reply counts them all.
//! A client's PUBLISHes run one after another, each sent to every agent before its
//! reply, so its messages arrive in order everywhere. PUBSUB CHANNELS / NUMSUB /
//! NUMPAT (and the shard forms) ask every agent and add up, as DBSIZE does. A peer's
//! PUBLISH is delivered where it lands and never sent on.
//!
//! An agent that does not answer misses the message (its subscribers' connections are
//! on that agent, which is failing): the publisher is not held up beyond the peer
//! timeout, as a Redis Cluster node does not wait on a dead bus link.

use bytes::Bytes;
use dmc_engine::table::{self, Cmd, Family};
use dmc_engine::{Flow, Session};
use dmc_resp::Reply;

use super::Router;

impl Router {
    /// PUBLISH, SPUBLISH and PUBSUB's counting subcommands on every agent of the
    /// instance (see the module doc); `None` for every other command, and for a
    /// command another agent sent here (`peer`).
    pub(super) async fn pubsub(
        &self,
        session: &mut Session,
        spec: Option<&'static table::Spec>,
        index: Option<usize>,
        args: &[Bytes],
        peer: bool,
    ) -> Option<(Reply, Flow)> {
        let spec = spec.filter(|s| s.family() == Family::PubSub && s.arity_ok(args.len()))?;
        if peer {
            return None;
        }
        let merge = match spec.cmd {
            Cmd::Publish | Cmd::SPublish => Merge::Sum,
            Cmd::PubSub => match args.get(1).map(|a| a.to_ascii_uppercase()).as_deref() {
                Some(b"NUMPAT") => Merge::Sum,
                Some(b"CHANNELS" | b"SHARDCHANNELS") => Merge::Union,
                Some(b"NUMSUB" | b"SHARDNUMSUB") => Merge::PairSums,
                _ => return None,
            },
            _ => return None,
        };
        let (mut reply, flow) = self.engine.execute_at(session, index, args.to_vec()).await;
        if matches!(reply, Reply::Error(_)) {
            return Some((reply, flow));
        }
        for addr in self.other_agents() {
            match self.forward(&addr, session, args).await {
                Ok(Reply::Error(e)) => {
                    tracing::debug!(%addr, error = %e, "a peer refused a pub/sub command")
                }
                Ok(theirs) => merge.add(&mut reply, theirs),
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "a peer did not take a pub/sub command")
                }
            }
        }
        Some((reply, flow))
    }
}

/// How the agents' replies add up.
#[derive(Debug, Clone, Copy)]
enum Merge {
    /// Integers: PUBLISH's receivers, NUMPAT.
    Sum,
    /// Channel names, each once.
    Union,
    /// `channel, count` pairs in the order asked: counts added.
    PairSums,
}

impl Merge {
    fn add(self, mine: &mut Reply, theirs: Reply) {
        match (self, mine, theirs) {
            (Merge::Sum, Reply::Int(total), Reply::Int(n)) => *total += n,
            (Merge::Union, Reply::Array(names), Reply::Array(more)) => {
                for name in more {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
            (Merge::PairSums, Reply::Array(pairs), Reply::Array(more)) => {
                for (at, item) in more.into_iter().enumerate() {
                    if let (Some(Reply::Int(total)), Reply::Int(n)) = (pairs.get_mut(at), item) {
                        *total += n;
                    }
                }
            }
            (merge, _, theirs) => {
                tracing::debug!(?merge, ?theirs, "a peer's pub/sub reply had another shape")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_add_up() {
        let mut n = Reply::Int(2);
        Merge::Sum.add(&mut n, Reply::Int(3));
        assert_eq!(n, Reply::Int(5));
        let mut names = Reply::Array(vec![Reply::bulk("a"), Reply::bulk("b")]);
        Merge::Union.add(
            &mut names,
            Reply::Array(vec![Reply::bulk("b"), Reply::bulk("c")]),
        );
        assert_eq!(
            names,
            Reply::Array(vec![Reply::bulk("a"), Reply::bulk("b"), Reply::bulk("c")])
        );
        let mut pairs = Reply::Array(vec![Reply::bulk("a"), Reply::Int(1)]);
        Merge::PairSums.add(
            &mut pairs,
            Reply::Array(vec![Reply::bulk("a"), Reply::Int(2)]),
        );
        assert_eq!(pairs, Reply::Array(vec![Reply::bulk("a"), Reply::Int(3)]));
    }
}
