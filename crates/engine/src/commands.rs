//! The command table and dispatch. Arity is checked here, before any handler runs, and
//! the same table answers `COMMAND`.

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;
use dmc_resp::Reply;

use crate::{Engine, Flow, Session, introspect, keys, server, strings};

/// Which handler runs a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    Ping,
    Echo,
    Hello,
    Auth,
    Select,
    Quit,
    Reset,
    Client,
    Info,
    Config,
    Command,
    Time,
    Dbsize,
    Get,
    Set,
    SetNx,
    SetEx,
    PSetEx,
    GetDel,
    GetEx,
    GetSet,
    MGet,
    MSet,
    MSetNx,
    Incr,
    Decr,
    IncrBy,
    DecrBy,
    IncrByFloat,
    Append,
    Strlen,
    GetRange,
    SetRange,
    Del,
    Unlink,
    Exists,
    Type,
    Expire,
    PExpire,
    ExpireAt,
    PExpireAt,
    Ttl,
    PTtl,
    ExpireTime,
    PExpireTime,
    Persist,
    Touch,
    Scan,
    Keys,
    RandomKey,
    FlushDb,
    FlushAll,
    Rename,
    RenameNx,
    Copy,
    Move,
    SwapDb,
    Lcs,
    Object,
    Memory,
}

/// One row of the command table (the fields `COMMAND INFO` reports).
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub name: &'static str,
    /// Redis arity: positive = exact, negative = at least.
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub cmd: Cmd,
}

const W: &[&str] = &["write", "denyoom"];
const WF: &[&str] = &["write", "fast"];
const R: &[&str] = &["readonly", "fast"];
const C: &[&str] = &["fast", "stale", "loading"];

macro_rules! spec {
    ($name:expr, $arity:expr, $flags:expr, $f:expr, $l:expr, $s:expr, $cmd:ident) => {
        Spec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first_key: $f,
            last_key: $l,
            step: $s,
            cmd: Cmd::$cmd,
        }
    };
}

pub const TABLE: &[Spec] = &[
    spec!("ping", -1, C, 0, 0, 0, Ping),
    spec!("echo", 2, C, 0, 0, 0, Echo),
    spec!(
        "hello",
        -1,
        &["noscript", "loading", "stale", "fast", "no-auth"],
        0,
        0,
        0,
        Hello
    ),
    spec!(
        "auth",
        -2,
        &["noscript", "loading", "stale", "fast", "no-auth"],
        0,
        0,
        0,
        Auth
    ),
    spec!("select", 2, C, 0, 0, 0, Select),
    spec!(
        "quit",
        -1,
        &["noscript", "loading", "stale", "fast", "no-auth"],
        0,
        0,
        0,
        Quit
    ),
    spec!(
        "reset",
        1,
        &["noscript", "loading", "stale", "fast", "no-auth"],
        0,
        0,
        0,
        Reset
    ),
    spec!(
        "client",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
        Client
    ),
    spec!("info", -1, &["loading", "stale"], 0, 0, 0, Info),
    spec!(
        "config",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
        Config
    ),
    spec!("command", -1, &["loading", "stale"], 0, 0, 0, Command),
    spec!("time", 1, &["loading", "stale", "fast"], 0, 0, 0, Time),
    spec!("dbsize", 1, R, 0, 0, 0, Dbsize),
    spec!("get", 2, R, 1, 1, 1, Get),
    spec!("set", -3, W, 1, 1, 1, Set),
    spec!("setnx", 3, &["write", "denyoom", "fast"], 1, 1, 1, SetNx),
    spec!("setex", 4, W, 1, 1, 1, SetEx),
    spec!("psetex", 4, W, 1, 1, 1, PSetEx),
    spec!("getdel", 2, WF, 1, 1, 1, GetDel),
    spec!("getex", -2, WF, 1, 1, 1, GetEx),
    spec!("getset", 3, &["write", "denyoom", "fast"], 1, 1, 1, GetSet),
    spec!("mget", -2, R, 1, -1, 1, MGet),
    spec!("mset", -3, W, 1, -1, 2, MSet),
    spec!("msetnx", -3, W, 1, -1, 2, MSetNx),
    spec!("incr", 2, &["write", "denyoom", "fast"], 1, 1, 1, Incr),
    spec!("decr", 2, &["write", "denyoom", "fast"], 1, 1, 1, Decr),
    spec!("incrby", 3, &["write", "denyoom", "fast"], 1, 1, 1, IncrBy),
    spec!("decrby", 3, &["write", "denyoom", "fast"], 1, 1, 1, DecrBy),
    spec!(
        "incrbyfloat",
        3,
        &["write", "denyoom", "fast"],
        1,
        1,
        1,
        IncrByFloat
    ),
    spec!("append", 3, &["write", "denyoom", "fast"], 1, 1, 1, Append),
    spec!("strlen", 2, R, 1, 1, 1, Strlen),
    spec!("getrange", 4, &["readonly"], 1, 1, 1, GetRange),
    spec!("setrange", 4, W, 1, 1, 1, SetRange),
    spec!("del", -2, &["write"], 1, -1, 1, Del),
    spec!("unlink", -2, &["write", "fast"], 1, -1, 1, Unlink),
    spec!("exists", -2, R, 1, -1, 1, Exists),
    spec!("type", 2, R, 1, 1, 1, Type),
    spec!("expire", -3, WF, 1, 1, 1, Expire),
    spec!("pexpire", -3, WF, 1, 1, 1, PExpire),
    spec!("expireat", -3, WF, 1, 1, 1, ExpireAt),
    spec!("pexpireat", -3, WF, 1, 1, 1, PExpireAt),
    spec!("ttl", 2, R, 1, 1, 1, Ttl),
    spec!("pttl", 2, R, 1, 1, 1, PTtl),
    spec!("expiretime", 2, R, 1, 1, 1, ExpireTime),
    spec!("pexpiretime", 2, R, 1, 1, 1, PExpireTime),
    spec!("persist", 2, WF, 1, 1, 1, Persist),
    spec!("touch", -2, R, 1, -1, 1, Touch),
    spec!("scan", -2, &["readonly"], 0, 0, 0, Scan),
    spec!("keys", 2, &["readonly"], 0, 0, 0, Keys),
    spec!("randomkey", 1, &["readonly"], 0, 0, 0, RandomKey),
    spec!("flushdb", -1, &["write"], 0, 0, 0, FlushDb),
    spec!("flushall", -1, &["write"], 0, 0, 0, FlushAll),
    spec!("rename", 3, &["write"], 1, 2, 1, Rename),
    spec!("renamenx", 3, &["write", "fast"], 1, 2, 1, RenameNx),
    spec!("copy", -3, &["write", "denyoom"], 1, 2, 1, Copy),
    spec!("move", 3, &["write", "fast"], 1, 1, 1, Move),
    spec!("swapdb", 3, &["write", "fast"], 0, 0, 0, SwapDb),
    spec!("lcs", -3, &["readonly"], 1, 2, 1, Lcs),
    spec!("object", -2, &["readonly"], 2, 2, 1, Object),
    spec!("memory", -2, &["readonly"], 0, 0, 0, Memory),
];

fn index() -> &'static HashMap<&'static str, usize> {
    static INDEX: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    INDEX.get_or_init(|| TABLE.iter().enumerate().map(|(i, s)| (s.name, i)).collect())
}

/// Looks a command up by name, case-insensitively.
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    lookup_index(name).map(|i| &TABLE[i])
}

/// The command's row number in [`TABLE`], looked up case-insensitively.
pub fn lookup_index(name: &[u8]) -> Option<usize> {
    let mut lower = [0u8; 32];
    if name.len() > lower.len() {
        return None;
    }
    for (d, s) in lower.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    std::str::from_utf8(&lower[..name.len()])
        .ok()
        .and_then(|n| index().get(n).copied())
}

fn arity_ok(spec: &Spec, n: usize) -> bool {
    let n = n as i32;
    if spec.arity >= 0 {
        n == spec.arity
    } else {
        n >= -spec.arity
    }
}

fn unknown(args: &[Bytes]) -> Reply {
    let name = String::from_utf8_lossy(&args[0]);
    let mut text = format!("ERR unknown command '{name}', with args beginning with: ");
    for a in args.iter().skip(1).take(20) {
        text.push_str(&format!("'{}' ", String::from_utf8_lossy(a)));
    }
    Reply::Error(text)
}

pub async fn dispatch(engine: &Engine, session: &mut Session, args: Vec<Bytes>) -> (Reply, Flow) {
    let Some(index) = lookup_index(&args[0]) else {
        return (unknown(&args), Flow::Continue);
    };
    let spec = &TABLE[index];
    session
        .client
        .touch(&engine.clients, index, session.db, session.proto);
    if !arity_ok(spec, args.len()) {
        return (
            Reply::Error(format!(
                "ERR wrong number of arguments for '{}' command",
                spec.name
            )),
            Flow::Continue,
        );
    }
    if !session.authenticated && !spec.flags.contains(&"no-auth") {
        return (
            Reply::err("NOAUTH Authentication required."),
            Flow::Continue,
        );
    }
    let reply = match spec.cmd {
        Cmd::Ping
        | Cmd::Echo
        | Cmd::Hello
        | Cmd::Auth
        | Cmd::Select
        | Cmd::Reset
        | Cmd::Client
        | Cmd::Info
        | Cmd::Config
        | Cmd::Command
        | Cmd::Time
        | Cmd::Dbsize => server::run(engine, session, spec.cmd, &args).await,
        Cmd::Quit => return (Reply::ok(), Flow::Close),
        Cmd::Del
        | Cmd::Unlink
        | Cmd::Exists
        | Cmd::Type
        | Cmd::Expire
        | Cmd::PExpire
        | Cmd::ExpireAt
        | Cmd::PExpireAt
        | Cmd::Ttl
        | Cmd::PTtl
        | Cmd::ExpireTime
        | Cmd::PExpireTime
        | Cmd::Persist
        | Cmd::Touch
        | Cmd::Scan
        | Cmd::Keys
        | Cmd::RandomKey
        | Cmd::FlushDb
        | Cmd::FlushAll
        | Cmd::Rename
        | Cmd::RenameNx
        | Cmd::Copy
        | Cmd::Move
        | Cmd::SwapDb => keys::run(engine, session, spec.cmd, &args).await,
        Cmd::Object => introspect::object(engine, session, &args).await,
        Cmd::Memory => introspect::memory(engine, session, &args).await,
        _ => strings::run(engine, session, spec.cmd, &args).await,
    };
    (reply, Flow::Continue)
}

/// `COMMAND INFO` row of a spec.
pub fn info(spec: &Spec) -> Reply {
    Reply::Array(vec![
        Reply::bulk(spec.name),
        Reply::Int(spec.arity as i64),
        Reply::Set(spec.flags.iter().map(|f| Reply::Simple(f)).collect()),
        Reply::Int(spec.first_key as i64),
        Reply::Int(spec.last_key as i64),
        Reply::Int(spec.step as i64),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let mut names = std::collections::HashSet::new();
        for s in TABLE {
            assert!(names.insert(s.name), "{} twice", s.name);
            assert_eq!(s.name, s.name.to_lowercase());
            assert!(lookup(s.name.to_uppercase().as_bytes()).is_some());
        }
        assert!(lookup(b"nosuch").is_none());
        assert!(arity_ok(lookup(b"get").unwrap(), 2) && !arity_ok(lookup(b"get").unwrap(), 3));
        assert!(arity_ok(lookup(b"set").unwrap(), 5));
    }
}
