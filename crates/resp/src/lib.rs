//! RESP for the compute agent: an incremental, zero-copy request parser and the RESP2 /
//! RESP3 reply encoder. This crate knows nothing of the server: [`parse_command`] turns
//! bytes into arguments (or "need more", or a protocol error with Redis's exact text),
//! and [`Reply::encode`] turns a reply into bytes for the connection's protocol;
//! [`parse_reply`] reads a reply back (what a peer agent answered a forwarded write).

mod decode;
mod parse;
mod reply;

pub use decode::{MAX_DEPTH, ReplyError, parse_reply};
pub use parse::{Limits, ProtocolError, RequestParser, parse_command};
pub use reply::{Reply, format_double, format_human};
