//! Shard fencing: a shard's epoch raised on every memory node when the shard changes
//! owner, and the fencing domain memory nodes keep it under. Called by a shard's new
//! owner, and by `commit` to stamp every prepare with its domain.
//! `fence` never reports success before every node took the epoch: a node without it
//! would still accept the previous owner's writes.

use dmc_verbs::wire::{Request, Response};
use futures::future::join_all;

use super::{POOL_SHARD, Pool};
use crate::error::UmoError;

impl Pool {
    /// The fencing domain memory nodes keep `shard`'s epoch under: shards of pools
    /// with other superblock regions (other instances) are other domains. The pool's
    /// own transactions ([`POOL_SHARD`], epoch 0) are never fenced.
    pub(super) fn fencing_domain(&self, shard: u32) -> u32 {
        if shard == POOL_SHARD {
            return shard;
        }
        (u32::from(self.config.super_region) << 16) | (shard & 0xffff)
    }

    /// Raises `shard`'s epoch to `epoch` on every memory node, so a client still
    /// writing under an older epoch (a previous owner) is refused from now on.
    pub async fn fence(&self, shard: u32, epoch: u64) -> Result<(), UmoError> {
        let shard = self.fencing_domain(shard);
        let calls = join_all(
            self.nodes
                .iter()
                .map(|n| n.call(Request::Fence { shard, epoch })),
        )
        .await;
        for (n, r) in self.nodes.iter().zip(calls) {
            match r {
                Ok(Response::Ok) => {}
                Ok(other) => {
                    return Err(UmoError::node(n.node())(dmc_verbs::transport::unexpected(
                        &other,
                    )));
                }
                Err(e) => return Err(UmoError::node(n.node())(e)),
            }
        }
        Ok(())
    }
}
