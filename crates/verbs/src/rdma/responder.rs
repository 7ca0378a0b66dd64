//! The memory node's side of RDMA: its regions registered for one-sided access and one
//! queue pair per client connection.
//!
//! A region is registered the first time a client asks for its key and stays
//! registered until it is dropped or created anew (a registration names one copy of
//! the region's memory; a new copy gets a new key, so a client holding the old key gets
//! a remote access error instead of writing into memory the node let go). Queue pairs
//! are connected on a client's `RdmaConnect` and live as long as its RPC connection;
//! [`RdmaResponder::revoke`] moves every queue pair of a client to the error state,
//! after which its one-sided verbs fail and it cannot connect again (its RPCs are
//! refused by the client fence): a revoked agent is fenced from the node's memory.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use hashbrown::HashMap;
use parking_lot::Mutex;

use super::device::{Access, RcDevice, RcQp, Registration};
use super::messages::Inbox;
use super::serve::{self, ResponderLink, Serving};
use super::stage::StagePool;
use crate::RegionId;
use crate::error::VerbsError;
use crate::node::NodeCore;
use crate::wire::Response;

pub struct RdmaResponder {
    device: Arc<dyn RcDevice>,
    regions: Mutex<HashMap<RegionId, Arc<dyn Registration>>>,
    clients: Mutex<HashMap<u64, Vec<Weak<dyn RcQp>>>>,
}

impl std::fmt::Debug for RdmaResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaResponder")
            .field("device", &self.device.name())
            .field("regions", &self.regions.lock().len())
            .finish()
    }
}

impl RdmaResponder {
    pub fn new(device: Arc<dyn RcDevice>) -> Self {
        RdmaResponder {
            device,
            regions: Mutex::new(HashMap::new()),
            clients: Mutex::new(HashMap::new()),
        }
    }

    pub fn device_name(&self) -> String {
        self.device.name()
    }

    /// Connects a queue pair to client `client`'s `peer` and answers the commit
    /// path's messages on it as `serving`; the caller keeps the link for as long as the
    /// client's connection lives. Answers the node's endpoint.
    pub fn accept(
        &self,
        client: u64,
        peer: &[u8],
        serving: Serving,
    ) -> Result<(ResponderLink, Bytes), VerbsError> {
        let qp = self.device.create_qp()?;
        let inbox = Inbox::new(&*self.device)?;
        inbox.post_all(&*qp)?;
        qp.connect(peer)?;
        {
            let mut clients = self.clients.lock();
            let qps = clients.entry(client).or_default();
            qps.retain(|q| q.strong_count() > 0);
            qps.push(Arc::downgrade(&qp));
        }
        let endpoint = qp.endpoint();
        let link = serve::start(qp, inbox, StagePool::new(self.device.clone()), serving)?;
        Ok((link, endpoint))
    }

    /// The key of `region`'s current copy, registering it on first ask.
    pub fn region(&self, core: &NodeCore, region: RegionId) -> Result<Response, VerbsError> {
        // Under the lock `forget` takes: a drop that lands after this read is followed
        // by a `forget` that removes what this registers.
        let mut regions = self.regions.lock();
        let mem = core.region(region)?;
        let reg = match regions.get(&region) {
            Some(r) if Arc::ptr_eq(r.memory(), &mem) => r.clone(),
            _ => {
                let r = self.device.register(mem, Access::Remote)?;
                tracing::debug!(region, rkey = r.rkey(), "registered a region for RDMA");
                regions.insert(region, r.clone());
                r
            }
        };
        Ok(Response::RdmaRegion {
            region,
            addr: reg.addr(),
            rkey: reg.rkey(),
            len: reg.memory().len(),
        })
    }

    /// Deregisters `region` (it was dropped or is being created anew).
    pub fn forget(&self, region: RegionId) {
        self.regions.lock().remove(&region);
    }

    /// Fences `client` out of the node's memory: its queue pairs go to the error state.
    pub fn revoke(&self, client: u64) {
        let qps = self.clients.lock().remove(&client).unwrap_or_default();
        let failed = qps
            .iter()
            .filter_map(Weak::upgrade)
            .map(|q| q.fail())
            .count();
        if failed > 0 {
            tracing::info!(
                client,
                queue_pairs = failed,
                "revoked a client's RDMA queue pairs"
            );
        }
    }
}
