//! MONITOR: every command this agent runs, as a line to each MONITOR client
//! (`+<unix time>.<µs> [<db> <client address>] "arg" ...`, arguments quoted and escaped
//! as Redis's `sdscatrepr` does, passwords redacted, administrative commands left out,
//! as in Redis). The lines travel through the MONITOR client's mailbox
//! ([`crate::pubsub::Mailbox`]), bounded like a subscriber's. A MONITOR client may not
//! touch the keyspace any more ("Replica can't interact with the keyspace"); RESET or
//! QUIT ends it.

use std::fmt::Write;

use bytes::Bytes;
use dmc_resp::Reply;

use crate::table::Spec;
use crate::{Engine, Session};

/// `MONITOR`: this client receives every command from now on.
pub fn start(engine: &Engine, s: &mut Session) -> Reply {
    let mailbox = engine.pubsub.monitor(&s.client, s.id, s.mailbox.take());
    s.mailbox = Some(mailbox);
    s.monitoring = true;
    Reply::ok()
}

/// Sends the MONITOR line of command `args` (run by `s`) to every MONITOR client, if
/// there is one.
pub fn feed(engine: &Engine, s: &Session, spec: &Spec, args: &[Bytes]) {
    if !engine.pubsub.monitored() || spec.has_flag("admin") {
        return;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let from = if s.in_script { "lua" } else { &s.client.addr };
    let mut line = format!(
        "{}.{:06} [{} {from}]",
        now.as_secs(),
        now.subsec_micros(),
        s.db,
    );
    for (i, a) in args.iter().enumerate() {
        line.push(' ');
        match crate::slowlog::redacted(spec, args, i) {
            true => line.push_str("\"(redacted)\""),
            false => repr(&mut line, a),
        }
    }
    engine
        .pubsub
        .feed_monitors(&line, engine.limits.output().pubsub);
}

/// `bytes` quoted as Redis's `sdscatrepr` writes it.
fn repr(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            7 => out.push_str("\\a"),
            8 => out.push_str("\\b"),
            b if b.is_ascii_graphic() || b == b' ' => out.push(b as char),
            b => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_quoted_as_redis_quotes_them() {
        let mut out = String::new();
        repr(&mut out, b"a\"b");
        out.push(' ');
        repr(&mut out, b"x\ny\x01\\ \xff");
        assert_eq!(out, r#""a\"b" "x\ny\x01\\ \xff""#);
    }
}
