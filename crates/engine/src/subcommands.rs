//! What every container command (CLIENT, CONFIG, OBJECT, MEMORY, SCRIPT, PUBSUB,
//! SLOWLOG, LATENCY) answers alike, with Redis 7's texts: its HELP lines, and the error
//! for a call none of its arms took — an arity error naming `container|sub` when the
//! subcommand exists, else "unknown subcommand".

use dmc_resp::Reply;

use crate::table::Cmd;

/// Whether `cmd` is a container: its name and first argument make the command's full
/// name (`pubsub|numpat`) in Redis's texts.
pub fn is_container(cmd: Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Client
            | Cmd::Config
            | Cmd::Command
            | Cmd::Object
            | Cmd::Memory
            | Cmd::Script
            | Cmd::PubSub
            | Cmd::Slowlog
            | Cmd::Latency
            | Cmd::Acl
            | Cmd::Function
            | Cmd::Cluster
            | Cmd::Stream(crate::table::StreamCmd::XGroup | crate::table::StreamCmd::XInfo)
    )
}

/// HELP's lines, as status replies.
pub fn help(lines: &[&'static str]) -> Reply {
    Reply::Array(lines.iter().map(|l| Reply::Simple(l)).collect())
}

/// The error for `container sub ...` that no arm took; `known` lists the container's
/// subcommands (uppercase).
pub fn refused(container: &str, sub: &[u8], known: &[&str]) -> Reply {
    let name = String::from_utf8_lossy(sub);
    if known.iter().any(|k| k.eq_ignore_ascii_case(&name)) {
        Reply::Error(format!(
            "ERR wrong number of arguments for '{}|{}' command",
            container.to_ascii_lowercase(),
            name.to_ascii_lowercase()
        ))
    } else {
        Reply::Error(format!(
            "ERR unknown subcommand '{name}'. Try {container} HELP."
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_read_as_redis_7s() {
        assert_eq!(
            refused("PUBSUB", b"numpat", &["NUMPAT"]),
            Reply::err("ERR wrong number of arguments for 'pubsub|numpat' command")
        );
        assert_eq!(
            refused("SLOWLOG", b"Foo", &["GET"]),
            Reply::err("ERR unknown subcommand 'Foo'. Try SLOWLOG HELP.")
        );
    }
}
