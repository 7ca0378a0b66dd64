//! `CLUSTER ...`, `READONLY`, `READWRITE` and `ASKING` on a cluster member, answered
//! from the cluster map as a Redis Cluster node answers them (agents as nodes, shards
//! as slot ranges). Called by the router for commands of the table's cluster family;
//! it never changes the map.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use dmc_dht::hash::key_slot;
use dmc_engine::Session;
use dmc_engine::table::Cmd;
use dmc_proto::cluster::ClusterMap;
use dmc_proto::shards::{AgentId, HASH_SLOTS};
use dmc_resp::Reply;

use super::{Router, RoutingMode};

impl Router {
    /// A command of the table's cluster family, answered from the map (or refused,
    /// as Redis does, outside cluster mode).
    pub(super) async fn cluster_command(
        &self,
        session: &Session,
        cmd: Cmd,
        args: &[Bytes],
    ) -> Reply {
        if self.mode != RoutingMode::Cluster {
            return Reply::err("ERR This instance has cluster support disabled");
        }
        match cmd {
            Cmd::Cluster => self.cluster(session, args).await,
            // READONLY, READWRITE, ASKING: every agent serves reads of every slot.
            _ => Reply::ok(),
        }
    }

    async fn cluster(&self, _session: &Session, args: &[Bytes]) -> Reply {
        let map = match self.map() {
            Some(m) => m,
            None => return Reply::err("ERR the agent has no cluster map yet"),
        };
        let me = self.me.load(Ordering::Acquire);
        let sub = args
            .get(1)
            .map(|a| a.to_ascii_lowercase())
            .unwrap_or_default();
        let arity = |n: usize| args.len() == n;
        let wrong = || {
            Reply::err(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLUSTER HELP.",
                String::from_utf8_lossy(args.get(1).map(|a| &a[..]).unwrap_or(b""))
            ))
        };
        let ranges = owner_ranges(&map);
        match sub.as_slice() {
            b"myid" if arity(2) => Reply::Bulk(node_id(me).into()),
            b"keyslot" if arity(3) => Reply::Int(i64::from(key_slot(&args[2]))),
            b"slots" if arity(2) => Reply::Array(
                ranges
                    .iter()
                    .filter_map(|(first, last, owner)| {
                        let a = map.agent(*owner)?;
                        let (host, port) = split_addr(&a.listen);
                        Some(Reply::Array(vec![
                            Reply::Int(i64::from(*first)),
                            Reply::Int(i64::from(*last)),
                            Reply::Array(vec![
                                Reply::Bulk(host.into()),
                                Reply::Int(port),
                                Reply::Bulk(node_id(a.id).into()),
                            ]),
                        ]))
                    })
                    .collect(),
            ),
            b"shards" if arity(2) => Reply::Array(
                map.agents
                    .iter()
                    .map(|a| {
                        let (host, port) = split_addr(&a.listen);
                        let slots = ranges
                            .iter()
                            .filter(|r| r.2 == a.id)
                            .flat_map(|r| [Reply::Int(i64::from(r.0)), Reply::Int(i64::from(r.1))])
                            .collect();
                        let bulk = |s: &str| Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()));
                        Reply::Map(vec![
                            (bulk("slots"), Reply::Array(slots)),
                            (
                                bulk("nodes"),
                                Reply::Array(vec![Reply::Map(vec![
                                    (bulk("id"), Reply::Bulk(node_id(a.id).into())),
                                    (bulk("port"), Reply::Int(port)),
                                    (bulk("ip"), bulk(&host)),
                                    (bulk("endpoint"), bulk(&host)),
                                    (bulk("role"), bulk("master")),
                                    (bulk("replication-offset"), Reply::Int(0)),
                                    (bulk("health"), bulk("online")),
                                ])]),
                            ),
                        ])
                    })
                    .collect(),
            ),
            b"nodes" if arity(2) => {
                let mut text = String::new();
                for a in &map.agents {
                    let flags = if a.id == me {
                        "myself,master"
                    } else {
                        "master"
                    };
                    let (host, port) = split_addr(&a.listen);
                    text.push_str(&format!(
                        "{} {host}:{port}@{} {flags} - 0 0 {} connected",
                        node_id(a.id),
                        port + 10000,
                        map.version
                    ));
                    for (first, last, owner) in &ranges {
                        if *owner == a.id {
                            if first == last {
                                text.push_str(&format!(" {first}"));
                            } else {
                                text.push_str(&format!(" {first}-{last}"));
                            }
                        }
                    }
                    text.push('\n');
                }
                Reply::Verbatim(text.into())
            }
            b"info" if arity(2) => {
                let assigned: u64 = ranges.iter().map(|r| u64::from(r.1 - r.0) + 1).sum();
                let state = if assigned == u64::from(HASH_SLOTS) {
                    "ok"
                } else {
                    "fail"
                };
                let text = format!(
                    "cluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{assigned}\r\n\
                     cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{n}\r\n\
                     cluster_size:{n}\r\ncluster_current_epoch:{v}\r\ncluster_my_epoch:{v}\r\n\
                     cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n\
                     total_cluster_links_buffer_limit_exceeded:0\r\n",
                    n = map.agents.len(),
                    v = map.version
                );
                Reply::Verbatim(text.into())
            }
            b"countkeysinslot" if arity(3) => match parse_slot(&args[2]) {
                Some(slot) => match self.engine.dht.count_in_slot(slot).await {
                    Ok(n) => Reply::Int(n as i64),
                    Err(e) => dmc_engine::error_reply(e),
                },
                None => Reply::err("ERR Invalid slot"),
            },
            b"getkeysinslot" if arity(4) => {
                let (Some(slot), Some(count)) =
                    (parse_slot(&args[2]), dmc_engine::parse_i64(&args[3]))
                else {
                    return Reply::err("ERR Invalid slot or number of keys");
                };
                if count < 0 {
                    return Reply::err("ERR Invalid slot or number of keys");
                }
                match self.engine.dht.scan_slot(slot).await {
                    Ok(keys) => {
                        let mut keys: Vec<Bytes> = keys.into_iter().map(|(_, k)| k).collect();
                        keys.sort();
                        keys.dedup();
                        keys.truncate(count as usize);
                        Reply::Array(keys.into_iter().map(Reply::Bulk).collect())
                    }
                    Err(e) => dmc_engine::error_reply(e),
                }
            }
            _ => wrong(),
        }
    }
}

/// A Redis Cluster node id (40 hex digits) for an agent.
fn node_id(id: AgentId) -> String {
    format!("{id:040x}")
}

fn split_addr(listen: &str) -> (String, i64) {
    match listen.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse().unwrap_or(0)),
        None => (listen.to_string(), 0),
    }
}

fn parse_slot(arg: &[u8]) -> Option<u16> {
    dmc_engine::parse_i64(arg)
        .filter(|s| (0..i64::from(HASH_SLOTS)).contains(s))
        .map(|s| s as u16)
}

/// Maximal slot ranges with one owner: (first, last, agent).
fn owner_ranges(map: &ClusterMap) -> Vec<(u16, u16, AgentId)> {
    let mut out: Vec<(u16, u16, AgentId)> = Vec::new();
    for shard in &map.shards.shards {
        let Some(owner) = shard.primary else { continue };
        let r = map.shards.slots(shard.id);
        if r.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.2 == owner && last.1 + 1 == r.start => last.1 = r.end - 1,
            _ => out.push((r.start, r.end - 1, owner)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmc_proto::cluster::ClusterMap;

    #[test]
    fn owner_ranges_merge_adjacent_shards() {
        let mut shards = dmc_proto::shards::ShardMap::new(8);
        shards.assign(&[1, 2]);
        let map = ClusterMap {
            cluster_id: "c1".into(),
            version: 3,
            shards,
            agents: vec![],
            pool: dmc_proto::cluster::PoolSpec {
                transport: dmc_proto::cluster::PoolTransport::Shm,
                nodes: vec![],
                node_ids: vec![],
                replicas: 2,
                region_size: dmc_proto::ByteSize(1 << 30),
                segment_size: dmc_proto::ByteSize(16 << 20),
            },
            instance: Default::default(),
            draining: vec![],
            lease_ms: 0,
            regions: vec![],
        };
        let r = owner_ranges(&map);
        assert_eq!(r.first().map(|x| x.0), Some(0));
        assert_eq!(r.last().map(|x| x.1), Some(HASH_SLOTS - 1));
        let covered: u32 = r.iter().map(|x| u32::from(x.1 - x.0) + 1).sum();
        assert_eq!(covered, u32::from(HASH_SLOTS));
        assert!(
            r.windows(2)
                .all(|w| w[0].2 != w[1].2 && w[0].1 + 1 == w[1].0)
        );
    }
}
