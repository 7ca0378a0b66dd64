//! The DMC cluster manager (DESIGN.md §6), being built: today its durable state
//! ([`state`]) over the shared shard map (`dmc_proto::shards`). Membership, the admin
//! API, allocation and the agent launcher come next (the cluster-manager issue).

pub mod state;
