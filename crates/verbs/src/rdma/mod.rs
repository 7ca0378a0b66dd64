//! The `rdma` backend: one-sided verbs over reliable-connected queue pairs.
//!
//! | module | owns |
//! |---|---|
//! | [`device`] | the interface to a device: registration, queue pairs, work requests |
//! | [`emulated`] | RC verbs emulated in software, in process (tests, any machine) |
//! | `ibverbs` | real verbs on `rdma-sys` (cargo feature `rdma`) |
//! | [`chain`] | a post's verbs as rounds of work-request chains |
//! | [`stage`] | registered staging buffers |
//! | [`messages`] | commit RPCs as SEND/RECV messages on the queue pair |
//! | [`transport`] | [`RdmaTransport`], the agent's side |
//! | [`responder`] | [`RdmaResponder`], the memory node's side |
//! | [`serve`] | the node answering commit RPC messages on a queue pair |
//!
//! The commit path's RPCs (prepare, commit, abort) are SEND/RECV messages on the queue
//! pair ([`messages`]); region management stays on the node's RPC channel (TCP), over
//! which the queue pair is set up (`RdmaConnect`) and region keys arrive
//! (`RdmaRegion`). Over RDMA a memory node's CPU sees no READ, WRITE, CAS or FAA.

pub mod chain;
pub mod device;
pub mod emulated;
#[cfg(feature = "rdma")]
pub mod ibverbs;
pub mod messages;
pub mod responder;
pub mod serve;
pub mod stage;
pub mod transport;

pub use device::{RcDevice, RcQp};
pub use emulated::EmulatedFabric;
pub use responder::RdmaResponder;
pub use transport::RdmaTransport;

use std::sync::Arc;

use crate::error::VerbsError;

/// Which RDMA device and port a process uses (its config's `rdma-device`,
/// `rdma-port` and `rdma-gid-index`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceChoice {
    /// A device name as `ibv_devices` lists it; none: the first device.
    pub name: Option<String>,
    pub port: u8,
    /// The GID table index (RoCE v2 is usually 1 or 3; InfiniBand 0).
    pub gid_index: u8,
}

impl Default for DeviceChoice {
    fn default() -> Self {
        DeviceChoice {
            name: None,
            port: 1,
            gid_index: 0,
        }
    }
}

/// Opens the chosen device: `Ok(None)` when this machine has none, an error when this
/// build has no RDMA support.
pub fn open_device(choice: &DeviceChoice) -> Result<Option<Arc<dyn RcDevice>>, VerbsError> {
    #[cfg(feature = "rdma")]
    {
        ibverbs::open(choice.name.as_deref(), choice.port, choice.gid_index)
            .map(|d| d.map(|d| Arc::new(d) as Arc<dyn RcDevice>))
    }
    #[cfg(not(feature = "rdma"))]
    {
        let _ = choice;
        Err(VerbsError::Remote(
            "this build has no RDMA support: build with `--features dmc-verbs/rdma` \
             (needs libibverbs-dev, librdmacm-dev, libclang-dev)"
                .into(),
        ))
    }
}

static PROCESS_CHOICE: std::sync::OnceLock<DeviceChoice> = std::sync::OnceLock::new();
static PROCESS_DEVICE: parking_lot::Mutex<Option<Arc<dyn RcDevice>>> =
    parking_lot::Mutex::new(None);

/// Sets the device this process's `rdma` connections use (before the first one; later
/// calls are ignored).
pub fn choose_device(choice: DeviceChoice) {
    let _ = PROCESS_CHOICE.set(choice);
}

/// The device this process's `rdma` connections use, opened on first use.
pub fn process_device() -> Result<Arc<dyn RcDevice>, VerbsError> {
    let mut device = PROCESS_DEVICE.lock();
    if let Some(d) = device.as_ref() {
        return Ok(d.clone());
    }
    let choice = PROCESS_CHOICE.get_or_init(DeviceChoice::default);
    let opened = open_device(choice)?.ok_or_else(|| {
        VerbsError::Remote(format!(
            "no RDMA device{} on this machine; use the tcp backend",
            choice
                .name
                .as_deref()
                .map(|n| format!(" named {n}"))
                .unwrap_or_default()
        ))
    })?;
    *device = Some(opened.clone());
    Ok(opened)
}
