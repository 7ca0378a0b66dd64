//! The ways a verb or an RPC to a memory node can fail.
//!
//! Errors cross the wire: a memory node encodes a [`VerbsError`] into an error response
//! with [`VerbsError::code`] and the client rebuilds it with [`VerbsError::from_wire`], so
//! a remote failure reads the same as a local one.

use crate::RegionId;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    #[error("region {0} is not held by this memory node")]
    NoSuchRegion(RegionId),
    #[error("region {0} already exists on this memory node")]
    RegionExists(RegionId),
    #[error(
        "access out of bounds: region {region} offset {offset} length {len} (region size {size})"
    )]
    OutOfBounds {
        region: RegionId,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("atomic verb at offset {offset} is not 8-byte aligned")]
    Misaligned { offset: u64 },
    #[error("memory node is full: {need} bytes requested, {free} free")]
    CapacityExceeded { need: u64, free: u64 },
    #[error("invalid region size {0}: must be a non-zero multiple of 8")]
    BadRegionSize(u64),
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { len: u64, max: u64 },
    #[error("authentication failed or missing: present the cluster secret first")]
    Unauthenticated,
    #[error("unknown transaction {0}")]
    UnknownTx(u64),
    #[error("{context}: {message}")]
    Io { context: String, message: String },
    #[error("timed out after {0} ms waiting for the memory node")]
    Timeout(u64),
    #[error("the memory node closed the connection")]
    Closed,
    #[error("memory node error: {0}")]
    Remote(String),
    /// The cluster manager revoked this client (its agent was failed over): the node
    /// executes nothing more it sends, on any connection.
    #[error(
        "client {0:#x} was revoked by the cluster manager (its agent was failed over); \
         restart the agent to rejoin"
    )]
    Revoked(u64),
}

impl VerbsError {
    /// The node could not be reached or stopped answering (as opposed to refusing a
    /// request): what a failed or partitioned node looks like.
    pub fn is_node_failure(&self) -> bool {
        matches!(
            self,
            VerbsError::Io { .. } | VerbsError::Timeout(_) | VerbsError::Closed
        )
    }

    pub fn io(context: &str, err: std::io::Error) -> Self {
        VerbsError::Io {
            context: context.to_string(),
            message: err.to_string(),
        }
    }

    /// A stable numeric code for the wire.
    pub fn code(&self) -> u16 {
        match self {
            VerbsError::NoSuchRegion(_) => 1,
            VerbsError::RegionExists(_) => 2,
            VerbsError::OutOfBounds { .. } => 3,
            VerbsError::Misaligned { .. } => 4,
            VerbsError::CapacityExceeded { .. } => 5,
            VerbsError::BadRegionSize(_) => 6,
            VerbsError::Malformed(_) => 7,
            VerbsError::FrameTooLarge { .. } => 8,
            VerbsError::Unauthenticated => 9,
            VerbsError::UnknownTx(_) => 10,
            VerbsError::Io { .. } => 11,
            VerbsError::Timeout(_) => 12,
            VerbsError::Closed => 13,
            VerbsError::Remote(_) => 14,
            VerbsError::Revoked(_) => 15,
        }
    }

    /// Rebuilds an error received from a memory node. Variants whose fields do not
    /// survive the trip keep their message text.
    pub fn from_wire(code: u16, arg: u64, message: String) -> Self {
        match code {
            1 => VerbsError::NoSuchRegion(arg as RegionId),
            2 => VerbsError::RegionExists(arg as RegionId),
            9 => VerbsError::Unauthenticated,
            10 => VerbsError::UnknownTx(arg),
            15 => VerbsError::Revoked(arg),
            7 => VerbsError::Malformed(message),
            _ => VerbsError::Remote(message),
        }
    }

    /// The text sent along with [`code`](Self::code): the message of the variants that
    /// carry one (so a relayed error is not wrapped again at every hop, which made
    /// `Remote("x")` arrive as `Remote("memory node error: x")`), else the display.
    pub fn wire_message(&self) -> String {
        match self {
            VerbsError::Malformed(m) | VerbsError::Remote(m) => m.clone(),
            other => other.to_string(),
        }
    }

    /// The numeric argument sent along with [`code`](Self::code).
    pub fn wire_arg(&self) -> u64 {
        match self {
            VerbsError::NoSuchRegion(r) | VerbsError::RegionExists(r) => u64::from(*r),
            VerbsError::UnknownTx(t) | VerbsError::Revoked(t) => *t,
            _ => 0,
        }
    }
}
