//! DEBUG, the subset clients and test suites call (SLEEP, OBJECT, HELP), behind
//! `enable-debug-command` as in Redis: `no` (the default) refuses it, `local` allows it
//! from loopback connections only, `yes` from anywhere; the setting is the agent's
//! configuration, not CONFIG SET's. DEBUG SLEEP holds only the calling client (Redis's
//! blocks the whole server; an agent never stalls its other clients).

use std::time::Duration;

use bytes::Bytes;
use dmc_resp::Reply;

use crate::{Engine, Session};

/// Who may run DEBUG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    #[default]
    No,
    Local,
    Yes,
}

impl Access {
    /// `no`, `local` or `yes` (Redis also accepts `0`/`1` for no/yes).
    pub fn parse(value: &str) -> Option<Access> {
        match value.to_ascii_lowercase().as_str() {
            "no" | "0" => Some(Access::No),
            "local" => Some(Access::Local),
            "yes" | "1" => Some(Access::Yes),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Access::No => "no",
            Access::Local => "local",
            Access::Yes => "yes",
        }
    }

    /// Whether a client connected from `addr` may run DEBUG.
    fn allows(self, addr: &str) -> bool {
        match self {
            Access::No => false,
            Access::Yes => true,
            Access::Local => addr
                .parse::<std::net::SocketAddr>()
                .is_ok_and(|a| a.ip().is_loopback()),
        }
    }
}

/// `DEBUG SLEEP seconds | OBJECT key | HELP`.
pub async fn run(engine: &Engine, s: &Session, args: &[Bytes]) -> Reply {
    if !engine.config.debug_command.allows(&s.client.addr) {
        return Reply::err(
            "ERR DEBUG command not allowed. If the enable-debug-command option is set to \
             \"local\", you can run it from a local connection, otherwise you need to set \
             this option in the configuration file, and then restart the server.",
        );
    }
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_uppercase();
    match (sub.as_str(), args.len()) {
        ("SLEEP", 3) => {
            // atof: what does not parse sleeps 0 s, as Redis's does.
            let secs = std::str::from_utf8(&args[2])
                .ok()
                .and_then(|t| t.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .unwrap_or(0.0);
            tokio::time::sleep(Duration::from_secs_f64(secs.min(1e9))).await;
            Reply::ok()
        }
        ("OBJECT", 3) => crate::introspect::debug_object(engine, s, &args[2]).await,
        ("HELP", 2) => crate::subcommands::help(&[
            "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "OBJECT <key>",
            "    Show low level info about the `key` and associated value.",
            "SLEEP <seconds>",
            "    Stop the server for <seconds>. Decimals allowed.",
            "HELP",
            "    Prints this help.",
        ]),
        // DEBUG is not a subcommand container in Redis 7.0: one text for both cases.
        _ => Reply::Error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try DEBUG HELP.",
            String::from_utf8_lossy(&args[1])
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_means_loopback() {
        assert!(Access::Local.allows("127.0.0.1:5000"));
        assert!(Access::Local.allows("[::1]:5000"));
        assert!(!Access::Local.allows("10.0.0.2:5000"));
        assert!(!Access::No.allows("127.0.0.1:5000"));
        assert!(Access::Yes.allows("10.0.0.2:5000"));
        assert_eq!(Access::parse("LOCAL"), Some(Access::Local));
        assert_eq!(Access::parse("maybe"), None);
    }
}
