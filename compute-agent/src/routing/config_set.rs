//! `CONFIG SET maxmemory|maxmemory-policy` on a cluster member: an instance-wide
//! setting, changed at the manager and pushed to every agent; the reply waits until
//! this agent follows it. Called by the router before routing; other parameters fall
//! through to the engine.

use std::time::Duration;

use bytes::Bytes;
use dmc_engine::{Flow, Session};
use dmc_resp::Reply;

use super::Router;

impl Router {
    /// `CONFIG SET maxmemory|maxmemory-policy` on a cluster member changes the instance
    /// at the manager, which pushes it to every agent; the reply waits until this agent
    /// follows it. Other parameters of the same command are set here as usual.
    pub(super) async fn config_set(
        &self,
        session: &mut Session,
        args: &[Bytes],
    ) -> Option<(Reply, Flow)> {
        let url = self.manager.clone()?;
        if args.len() < 4
            || !args.len().is_multiple_of(2)
            || !args[0].eq_ignore_ascii_case(b"config")
            || !args[1].eq_ignore_ascii_case(b"set")
        {
            return None;
        }
        let (mut maxmemory, mut policy) = (None, None);
        let mut rest = vec![args[0].clone(), args[1].clone()];
        let failed = |name: &str, why: &str| {
            Some((
                Reply::err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                )),
                Flow::Continue,
            ))
        };
        for pair in args[2..].chunks(2) {
            let value = std::str::from_utf8(&pair[1]).unwrap_or("");
            match pair[0].to_ascii_lowercase().as_slice() {
                b"maxmemory" => match value.parse::<dmc_proto::ByteSize>() {
                    Ok(v) => maxmemory = Some(v.0),
                    Err(_) => {
                        return failed("maxmemory", "argument couldn't be parsed into an integer");
                    }
                },
                b"maxmemory-policy" => {
                    if dmc_dht::RedisPolicy::parse(value).is_none() {
                        return failed("maxmemory-policy", "argument must be a maxmemory-policy");
                    }
                    policy = Some(value.to_ascii_lowercase());
                }
                _ => rest.extend(pair.iter().cloned()),
            }
        }
        if maxmemory.is_none() && policy.is_none() {
            return None;
        }
        let p = policy.clone();
        let instance = self.map().map(|m| m.instance.name.clone())?;
        let done = tokio::task::spawn_blocking(move || {
            dmc_process::membership::resize_instance(&url, &instance, maxmemory, p.as_deref())
        })
        .await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Some((Reply::err(format!("ERR {e}")), Flow::Continue)),
            Err(e) => return Some((Reply::err(format!("ERR {e}")), Flow::Continue)),
        }
        // Reply once this agent follows the change (so a CONFIG GET here shows it).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let seen = self.version();
            let applied = self.map().is_some_and(|m| {
                maxmemory.is_none_or(|v| m.instance.maxmemory.0 == v)
                    && policy.as_ref().is_none_or(|p| m.instance.policy == *p)
            });
            if applied || tokio::time::Instant::now() > deadline {
                break;
            }
            self.newer_map(seen, Duration::from_millis(500)).await;
        }
        if rest.len() > 2 {
            return Some(self.engine.execute(session, rest).await);
        }
        Some((Reply::ok(), Flow::Continue))
    }
}
