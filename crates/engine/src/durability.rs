//! What Redis clients ask about durability, answered from the pool: WAIT counts the
//! copies that hold this client's writes beyond the first (every acknowledged write is
//! on all complete copies of its region: memory nodes replicate synchronously, so there
//! is no replica lag to wait out), and LASTSAVE is the agent's start (DMC keeps no RDB:
//! the pool's copies are its durability).

use std::time::Duration;

use bytes::Bytes;
use dmc_resp::Reply;

use crate::{Engine, parse_i64};

/// `WAIT numreplicas timeout`: the backup copies every acknowledged write is on. When
/// fewer than `numreplicas` exist it waits `timeout` ms (0: until the client leaves, as
/// Redis does) and answers what there is then; inside EXEC it answers at once.
pub async fn wait(engine: &Engine, args: &[Bytes]) -> Reply {
    let Some(wanted) = parse_i64(&args[1]) else {
        return Reply::err("ERR value is not an integer or out of range");
    };
    let Some(timeout) = parse_i64(&args[2]) else {
        return Reply::err("ERR timeout is not an integer or out of range");
    };
    if timeout < 0 {
        return Reply::err("ERR timeout is negative");
    }
    let backups = || engine.dht.pool().fewest_copies().saturating_sub(1) as i64;
    if wanted <= backups() || crate::multi::in_exec() {
        return Reply::Int(backups());
    }
    match timeout {
        0 => std::future::pending::<()>().await,
        ms => tokio::time::sleep(Duration::from_millis(ms as u64)).await,
    }
    Reply::Int(backups())
}

/// `LASTSAVE`: the unix time this agent started (it never saves an RDB).
pub fn lastsave(engine: &Engine) -> Reply {
    let now = engine.now_ms() / 1000;
    Reply::Int(now.saturating_sub(engine.uptime_secs()) as i64)
}
