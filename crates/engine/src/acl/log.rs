//! `ACL LOG`: the refusals and failed AUTHs of one process, newest first, at most
//! `acllog-max-len` of them, a repeat of a recent entry counted on it instead of added
//! (Redis 7.0's `addACLLogEntry`), and each entry's reply map.

use std::collections::VecDeque;

use bytes::Bytes;
use dmc_resp::Reply;

use super::AclError;
use super::check::Denied;

/// Redis's default `acllog-max-len`.
pub const DEFAULT_MAX_LEN: usize = 128;

/// Entries this far apart (milliseconds) are never merged
/// (`ACL_LOG_GROUPING_MAX_TIME_DELTA`).
const GROUPING_MAX_MS: u64 = 60_000;

/// How many of the newest entries a new one is compared with.
const MERGE_SCAN: usize = 10;

/// What was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Command,
    Key,
    Channel,
    /// A failed AUTH (or HELLO AUTH).
    Auth,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

/// Where the refused call ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// Sent by the client.
    Toplevel,
    /// Queued in MULTI, or checked again at EXEC.
    Multi,
    /// `redis.call` in a script.
    Lua,
}

impl Context {
    pub fn name(self) -> &'static str {
        match self {
            Context::Toplevel => "toplevel",
            Context::Multi => "multi",
            Context::Lua => "lua",
        }
    }
}

/// One entry.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    /// How many times it happened (merged repeats).
    pub count: u64,
    pub reason: Reason,
    pub context: Context,
    /// The command's full name, the key, the channel, or for AUTH the command (`auth`,
    /// `hello`).
    pub object: Bytes,
    pub username: Bytes,
    /// Milliseconds since the Unix epoch of the last occurrence.
    pub time_ms: u64,
    /// The client's `CLIENT LIST` line at the last occurrence.
    pub client_info: String,
}

impl LogEntry {
    /// A new entry for a refused call.
    pub fn denied(
        denied: &Denied,
        context: Context,
        username: Bytes,
        client_info: String,
        now_ms: u64,
    ) -> LogEntry {
        LogEntry {
            count: 1,
            reason: denied.reason(),
            context,
            object: denied.object(),
            username,
            time_ms: now_ms,
            client_info,
        }
    }

    /// A new entry for a failed AUTH or HELLO AUTH: `command` as the client sent it
    /// (Redis logs `argv[0]`), `username` the name tried.
    pub fn auth(
        command: Bytes,
        context: Context,
        username: Bytes,
        client_info: String,
        now_ms: u64,
    ) -> LogEntry {
        LogEntry {
            count: 1,
            reason: Reason::Auth,
            context,
            object: command,
            username,
            time_ms: now_ms,
            client_info,
        }
    }

    /// `ACLLogMatchEntry`: same reason, context, object and user, close in time.
    fn matches(&self, other: &LogEntry) -> bool {
        self.reason == other.reason
            && self.context == other.context
            && self.time_ms.abs_diff(other.time_ms) <= GROUPING_MAX_MS
            && self.object == other.object
            && self.username == other.username
    }

    /// The entry as `ACL LOG` replies it: `count`, `reason`, `context`, `object`,
    /// `username`, `age-seconds` (a double), `client-info`.
    pub fn reply(&self, now_ms: u64) -> Reply {
        let age = now_ms.saturating_sub(self.time_ms) as f64 / 1000.0;
        Reply::Map(vec![
            (Reply::bulk("count"), Reply::Int(self.count as i64)),
            (Reply::bulk("reason"), Reply::bulk(self.reason.name())),
            (Reply::bulk("context"), Reply::bulk(self.context.name())),
            (Reply::bulk("object"), Reply::Bulk(self.object.clone())),
            (Reply::bulk("username"), Reply::Bulk(self.username.clone())),
            (Reply::bulk("age-seconds"), Reply::Double(age)),
            (
                Reply::bulk("client-info"),
                Reply::bulk(self.client_info.clone()),
            ),
        ])
    }
}

/// The log, newest entry first.
#[derive(Debug, Clone)]
pub struct AclLog {
    entries: VecDeque<LogEntry>,
    max_len: usize,
}

impl Default for AclLog {
    fn default() -> Self {
        AclLog::new(DEFAULT_MAX_LEN)
    }
}

impl AclLog {
    pub fn new(max_len: usize) -> AclLog {
        AclLog {
            entries: VecDeque::new(),
            max_len,
        }
    }

    /// `CONFIG SET acllog-max-len`: as in Redis, a shorter log is cut at the next
    /// entry added, not now.
    pub fn set_max_len(&mut self, max_len: usize) {
        self.max_len = max_len;
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Adds an entry, or counts it on a matching one among the newest few, which then
    /// moves to the front with the new time and client.
    pub fn add(&mut self, entry: LogEntry) {
        let scan = self.entries.len().min(MERGE_SCAN);
        if let Some(at) = (0..scan).find(|&i| self.entries[i].matches(&entry))
            && let Some(mut found) = self.entries.remove(at)
        {
            found.count += 1;
            found.time_ms = entry.time_ms;
            found.client_info = entry.client_info;
            self.entries.push_front(found);
            return;
        }
        self.entries.push_front(entry);
        self.entries.truncate(self.max_len);
    }

    /// `ACL LOG RESET`.
    pub fn reset(&mut self) {
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, newest first.
    pub fn entries(&self) -> impl Iterator<Item = &LogEntry> {
        self.entries.iter()
    }

    /// `ACL LOG [count | RESET]` with its argument (after `LOG`): RESET empties the
    /// log, a count (default 10, negative as 0) replies that many newest entries.
    pub fn command(&mut self, arg: Option<&[u8]>, now_ms: u64) -> Result<Reply, AclError> {
        let count = match arg {
            None => 10,
            Some(a) if a.eq_ignore_ascii_case(b"reset") => {
                self.reset();
                return Ok(Reply::ok());
            }
            Some(a) => crate::parse_i64(a).ok_or(AclError::NotInteger)?,
        };
        let count = usize::try_from(count).unwrap_or(0);
        Ok(Reply::Array(
            self.entries
                .iter()
                .take(count)
                .map(|e| e.reply(now_ms))
                .collect(),
        ))
    }
}
