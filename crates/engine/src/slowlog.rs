//! What this agent records about slow commands, as Redis does: the slow log (SLOWLOG
//! GET/LEN/RESET, `slowlog-log-slower-than` µs, `slowlog-max-len` entries) and the
//! latency monitor (LATENCY LATEST/HISTORY/RESET, `latency-monitor-threshold` ms; the
//! events `command` and `fast-command`, one sample a second, 160 kept per event).
//!
//! [`Engine::execute_at`](crate::Engine::execute_at) times every command it runs and
//! reports it here; blocking commands (whose time is mostly waiting) and EXEC (whose
//! commands are reported one by one) are not. Arguments of AUTH and of HELLO's AUTH are
//! redacted, as in Redis.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dmc_resp::Reply;
use parking_lot::Mutex;

use crate::subcommands::{help, refused};
use crate::table::{Cmd, Spec};

/// Arguments kept per entry; the rest are summarised.
const MAX_ARGS: usize = 32;
/// Bytes kept per argument; the rest are summarised.
const MAX_ARG_BYTES: usize = 128;
/// Samples kept per latency event.
const LATENCY_SAMPLES: usize = 160;

/// One slow command.
#[derive(Debug, Clone)]
struct Entry {
    id: u64,
    unix_secs: i64,
    micros: u64,
    args: Vec<Bytes>,
    addr: String,
    name: Bytes,
}

/// A latency event's samples: (unix seconds, ms), newest last, and the worst seen.
#[derive(Debug, Default)]
struct Event {
    samples: VecDeque<(i64, u64)>,
    max_ms: u64,
}

/// The slow log and the latency monitor of one agent.
#[derive(Debug)]
pub struct SlowLog {
    /// µs; negative: off, 0: every command.
    slower_than: AtomicI64,
    max_len: AtomicU64,
    /// ms; 0: the latency monitor is off.
    latency_threshold: AtomicU64,
    next_id: AtomicU64,
    entries: Mutex<VecDeque<Entry>>,
    events: Mutex<BTreeMap<&'static str, Event>>,
}

impl Default for SlowLog {
    /// Redis's defaults: slower than 10 000 µs, 128 entries, latency monitor off.
    fn default() -> Self {
        SlowLog {
            slower_than: AtomicI64::new(10_000),
            max_len: AtomicU64::new(128),
            latency_threshold: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
            entries: Mutex::new(VecDeque::new()),
            events: Mutex::new(BTreeMap::new()),
        }
    }
}

/// Who ran a command, for its slow log entry.
pub struct Caller {
    pub addr: String,
    pub name: Option<Bytes>,
}

impl SlowLog {
    /// Whether a command must be timed at all (either log is on).
    pub fn timing(&self) -> bool {
        self.slower_than.load(Ordering::Relaxed) >= 0
            || self.latency_threshold.load(Ordering::Relaxed) > 0
    }

    /// Records command `args` (of `spec`) that took `took`, if it was slow.
    /// `unix_secs` and `caller` are asked for only when the command is logged (most
    /// commands cost two loads and two comparisons here).
    pub fn record(
        &self,
        spec: &Spec,
        args: &[Bytes],
        took: Duration,
        unix_secs: impl Fn() -> i64,
        caller: impl FnOnce() -> Caller,
    ) {
        let micros = took.as_micros() as u64;
        let ms = micros / 1000;
        let threshold = self.latency_threshold.load(Ordering::Relaxed);
        let slower_than = self.slower_than.load(Ordering::Relaxed);
        let latency = threshold > 0 && ms >= threshold;
        let slow = slower_than >= 0 && micros >= slower_than as u64;
        if !(latency || slow) || spec.has_flag("blocking") || spec.cmd == Cmd::Exec {
            return;
        }
        if latency {
            let unix_secs = unix_secs();
            let event = if spec.has_flag("fast") {
                "fast-command"
            } else {
                "command"
            };
            let mut events = self.events.lock();
            let e = events.entry(event).or_default();
            match e.samples.back_mut() {
                // One sample a second: the worst of that second.
                Some((t, worst)) if *t == unix_secs => *worst = (*worst).max(ms),
                _ => {
                    e.samples.push_back((unix_secs, ms));
                    if e.samples.len() > LATENCY_SAMPLES {
                        e.samples.pop_front();
                    }
                }
            }
            e.max_ms = e.max_ms.max(ms);
        }
        if !slow {
            return;
        }
        let caller = caller();
        let entry = Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            unix_secs: unix_secs(),
            micros,
            args: kept_args(spec, args),
            addr: caller.addr,
            name: caller.name.unwrap_or_default(),
        };
        let max = self.max_len.load(Ordering::Relaxed) as usize;
        let mut entries = self.entries.lock();
        entries.push_front(entry);
        entries.truncate(max);
    }

    /// CONFIG SET of one of this module's parameters: `Ok(false)` if `name` is not one.
    pub fn set(&self, name: &str, value: &str) -> Result<bool, String> {
        let int = || {
            value
                .parse::<i64>()
                .map_err(|_| "argument couldn't be parsed into an integer".to_string())
        };
        match name {
            "slowlog-log-slower-than" => self.slower_than.store(int()?, Ordering::Relaxed),
            "slowlog-max-len" => {
                let n = u64::try_from(int()?).map_err(|_| "argument must be a positive integer")?;
                self.max_len.store(n, Ordering::Relaxed);
                self.entries.lock().truncate(n as usize);
            }
            "latency-monitor-threshold" => {
                let n = u64::try_from(int()?).map_err(|_| "argument must be a positive integer")?;
                self.latency_threshold.store(n, Ordering::Relaxed);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// This module's parameters for CONFIG GET.
    pub fn values(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "slowlog-log-slower-than",
                self.slower_than.load(Ordering::Relaxed).to_string(),
            ),
            (
                "slowlog-max-len",
                self.max_len.load(Ordering::Relaxed).to_string(),
            ),
            (
                "latency-monitor-threshold",
                self.latency_threshold.load(Ordering::Relaxed).to_string(),
            ),
        ]
    }

    /// `SLOWLOG GET [count] | LEN | RESET | HELP`.
    pub fn slowlog_command(&self, args: &[Bytes]) -> Reply {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_uppercase();
        match (sub.as_str(), args.len()) {
            ("GET", 2 | 3) => {
                let count = match args.get(2) {
                    None => 10,
                    Some(c) => match crate::parse_i64(c) {
                        Some(-1) => usize::MAX,
                        Some(n) if n >= 0 => n as usize,
                        _ => return Reply::err("ERR count should be greater than or equal to -1"),
                    },
                };
                let entries = self.entries.lock();
                Reply::Array(entries.iter().take(count).map(entry_reply).collect())
            }
            ("LEN", 2) => Reply::Int(self.entries.lock().len() as i64),
            ("RESET", 2) => {
                self.entries.lock().clear();
                Reply::ok()
            }
            ("HELP", 2) => help(&[
                "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GET [<count>]",
                "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                "    Entries are made of:",
                "    id, timestamp, time in microseconds, arguments array, client IP and port,",
                "    client name",
                "LEN",
                "    Return the length of the slowlog.",
                "RESET",
                "    Reset the slowlog.",
                "HELP",
                "    Prints this help.",
            ]),
            _ => refused("SLOWLOG", &args[1], &["GET", "LEN", "RESET", "HELP"]),
        }
    }

    /// `LATENCY LATEST | HISTORY event | RESET [event ...] | HELP`.
    pub fn latency_command(&self, args: &[Bytes]) -> Reply {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_uppercase();
        match (sub.as_str(), args.len()) {
            ("LATEST", 2) => Reply::Array(
                self.events
                    .lock()
                    .iter()
                    .filter_map(|(name, e)| {
                        let (t, ms) = *e.samples.back()?;
                        Some(Reply::Array(vec![
                            Reply::bulk(*name),
                            Reply::Int(t),
                            Reply::Int(ms as i64),
                            Reply::Int(e.max_ms as i64),
                        ]))
                    })
                    .collect(),
            ),
            ("HISTORY", 3) => {
                let events = self.events.lock();
                let name = String::from_utf8_lossy(&args[2]);
                let samples = events.get(name.as_ref()).map(|e| &e.samples);
                Reply::Array(
                    samples
                        .into_iter()
                        .flatten()
                        .map(|&(t, ms)| Reply::Array(vec![Reply::Int(t), Reply::Int(ms as i64)]))
                        .collect(),
                )
            }
            ("RESET", _) => {
                let mut events = self.events.lock();
                let before = events.len();
                if args.len() == 2 {
                    events.clear();
                } else {
                    events.retain(|name, _| !args[2..].iter().any(|a| a == name.as_bytes()));
                }
                Reply::Int((before - events.len()) as i64)
            }
            ("HELP", 2) => help(&[
                "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "HISTORY <event>",
                "    Return time-latency samples for the <event> class.",
                "LATEST",
                "    Return the latest latency samples for all events.",
                "RESET [<event> ...]",
                "    Reset latency data of one or more <event> classes.",
                "    (default: reset all data for all event classes)",
                "HELP",
                "    Prints this help.",
            ]),
            _ => refused("LATENCY", &args[1], &["LATEST", "HISTORY", "RESET", "HELP"]),
        }
    }
}

fn entry_reply(e: &Entry) -> Reply {
    Reply::Array(vec![
        Reply::Int(e.id as i64),
        Reply::Int(e.unix_secs),
        Reply::Int(e.micros as i64),
        Reply::Array(e.args.iter().cloned().map(Reply::Bulk).collect()),
        Reply::bulk(e.addr.clone()),
        Reply::Bulk(e.name.clone()),
    ])
}

/// Whether argument `i` of `args` is a secret the slow log and MONITOR do not show:
/// AUTH's, and the user and password after HELLO's AUTH.
pub(crate) fn redacted(spec: &Spec, args: &[Bytes], i: usize) -> bool {
    match spec.cmd {
        Cmd::Auth => i > 0,
        Cmd::Hello => args.get(..i).is_some_and(|before| {
            before
                .iter()
                .rev()
                .take(2)
                .any(|a| a.eq_ignore_ascii_case(b"AUTH"))
        }),
        _ => false,
    }
}

/// The arguments an entry keeps: at most 32 (the last saying how many more there were),
/// each at most 128 bytes (saying how many more it had), passwords redacted.
fn kept_args(spec: &Spec, args: &[Bytes]) -> Vec<Bytes> {
    let redacted = |i: usize| redacted(spec, args, i);
    let shown = args.len().min(MAX_ARGS);
    let mut out = Vec::with_capacity(shown);
    for (i, a) in args.iter().enumerate().take(shown) {
        if i + 1 == MAX_ARGS && args.len() > MAX_ARGS {
            out.push(Bytes::from(format!(
                "... ({} more arguments)",
                args.len() - MAX_ARGS + 1
            )));
        } else if redacted(i) {
            out.push(Bytes::from_static(b"(redacted)"));
        } else if a.len() > MAX_ARG_BYTES {
            let mut s = a[..MAX_ARG_BYTES].to_vec();
            s.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_ARG_BYTES).as_bytes());
            out.push(Bytes::from(s));
        } else {
            out.push(a.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> &'static Spec {
        crate::table::lookup(name.as_bytes()).expect("a command")
    }

    fn caller() -> Caller {
        Caller {
            addr: "127.0.0.1:1".into(),
            name: None,
        }
    }

    #[test]
    fn long_commands_are_summarised_and_passwords_redacted() {
        let log = SlowLog::default();
        log.set("slowlog-log-slower-than", "0").unwrap();
        let many: Vec<Bytes> = std::iter::once(Bytes::from_static(b"DEL"))
            .chain((0..40).map(|i| Bytes::from(format!("k{i}"))))
            .collect();
        log.record(spec("del"), &many, Duration::ZERO, || 1, caller);
        let long = vec![Bytes::from_static(b"GET"), Bytes::from(vec![b'x'; 200])];
        log.record(spec("get"), &long, Duration::ZERO, || 1, caller);
        let auth = vec![Bytes::from_static(b"AUTH"), Bytes::from_static(b"secret")];
        log.record(spec("auth"), &auth, Duration::ZERO, || 1, caller);
        let hello: Vec<Bytes> = ["HELLO", "3", "AUTH", "u", "pw", "SETNAME", "n"]
            .iter()
            .map(|s| Bytes::from(s.to_string()))
            .collect();
        log.record(spec("hello"), &hello, Duration::ZERO, || 1, caller);
        let entries = log.entries.lock();
        let args = |i: usize| entries[i].args.clone();
        assert_eq!(
            args(0)[3..5],
            [Bytes::from("(redacted)"), Bytes::from("(redacted)")]
        );
        assert_eq!(args(0)[5], Bytes::from("SETNAME"));
        assert_eq!(args(1)[1], Bytes::from("(redacted)"));
        assert!(args(2)[1].ends_with(b"... (72 more bytes)"));
        assert_eq!(args(3).len(), 32);
        assert_eq!(args(3)[31], Bytes::from("... (10 more arguments)"));
    }

    #[test]
    fn the_log_keeps_its_newest_entries_and_skips_fast_ones() {
        let log = SlowLog::default();
        let get = vec![Bytes::from_static(b"GET"), Bytes::from_static(b"k")];
        log.record(
            spec("get"),
            &get,
            Duration::from_micros(9_999),
            || 1,
            caller,
        );
        assert_eq!(log.entries.lock().len(), 0, "under the 10 ms default");
        log.set("slowlog-max-len", "2").unwrap();
        for _ in 0..3 {
            log.record(spec("get"), &get, Duration::from_millis(11), || 1, caller);
        }
        let ids: Vec<u64> = log.entries.lock().iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![2, 1]);
        log.set("slowlog-log-slower-than", "-1").unwrap();
        log.record(spec("get"), &get, Duration::from_secs(1), || 1, caller);
        assert_eq!(log.entries.lock().len(), 2, "off");
    }

    #[test]
    fn latency_events_keep_the_worst_sample_of_each_second() {
        let log = SlowLog::default();
        log.set("latency-monitor-threshold", "5").unwrap();
        let keys = vec![Bytes::from_static(b"KEYS"), Bytes::from_static(b"*")];
        log.record(
            spec("keys"),
            &keys,
            Duration::from_millis(7),
            || 100,
            caller,
        );
        log.record(
            spec("keys"),
            &keys,
            Duration::from_millis(9),
            || 100,
            caller,
        );
        log.record(
            spec("keys"),
            &keys,
            Duration::from_millis(6),
            || 101,
            caller,
        );
        log.record(
            spec("keys"),
            &keys,
            Duration::from_millis(1),
            || 102,
            caller,
        );
        let events = log.events.lock();
        let e = &events["command"];
        assert_eq!(e.samples, VecDeque::from(vec![(100, 9), (101, 6)]));
        assert_eq!(e.max_ms, 9);
    }
}
