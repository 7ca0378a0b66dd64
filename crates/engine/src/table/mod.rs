//! The command table: every command DMC answers, with its name, arity, flags and key
//! positions, the family that runs it, how proxy routing may split it, and whether the
//! pipelined fast paths may take it.
//!
//! It is the single source for dispatch ([`crate::dispatch`]), `COMMAND` and
//! `COMMAND DOCS`, the client registry's per-command counts, and the agent's routing
//! (which commands write, where their keys are, which belong to the cluster). It is a
//! leaf: every command family imports its types from here, and it imports no family.

/// A row of a family's commands: name, arity, flags, first key, last key, step, where
/// the key count is (0: none), and `Family(Command)`.
macro_rules! row {
    ($name:expr, $arity:expr, $flags:expr, $f:expr, $l:expr, $s:expr, $n:expr, $fam:ident($cmd:ident)) => {
        Spec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first_key: $f,
            last_key: $l,
            step: $s,
            numkeys: $n,
            cmd: Cmd::$fam(<row!(@enum $fam)>::$cmd),
        }
    };
    (@enum Hash) => { HashCmd };
    (@enum List) => { ListCmd };
    (@enum Sets) => { SetCmd };
    (@enum ZSet) => { ZSetCmd };
    (@enum Bit) => { BitCmd };
    (@enum Hll) => { HllCmd };
    (@enum Geo) => { GeoCmd };
    (@enum Stream) => { StreamCmd };
}

mod collections;
mod data_model;
mod last_found;

use std::sync::OnceLock;

pub use collections::{HashCmd, ListCmd, SetCmd, ZSetCmd};
pub use data_model::{BitCmd, GeoCmd, HllCmd, StreamCmd};

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
    /// `CLUSTER ...`, answered by the agent from the cluster map.
    Cluster,
    ReadOnly,
    ReadWrite,
    Asking,
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
    Eval,
    EvalSha,
    EvalRo,
    EvalShaRo,
    Script,
    Slowlog,
    Latency,
    Monitor,
    Wait,
    LastSave,
    Debug,
    Acl,
    FCall,
    FCallRo,
    Function,
    Subscribe,
    Unsubscribe,
    PSubscribe,
    PUnsubscribe,
    SSubscribe,
    SUnsubscribe,
    Publish,
    SPublish,
    PubSub,
    /// `DMC.PEER`: the first command of another agent's forwarding connection.
    DmcPeer,
    DmcUser,
    /// `DMC.WARM`: a cache update from the primary of a shard this agent backs up
    /// (peer connections only).
    DmcWarm,
    /// `DMC.TRACKING addr`: the agent at `addr` has CLIENT TRACKING clients (peer
    /// connections only).
    DmcTracking,
    /// `DMC.INVALIDATE [key]`: a key changed on the sending agent, for this agent's
    /// tracking clients (none: a flush; peer connections only).
    DmcInvalidate,
    /// `DMC.ORIGIN addr id`: the next command on this peer connection was forwarded
    /// for NOLOOP tracker `id` of the agent at `addr`.
    DmcOrigin,
    /// `DMC.KEEP functions|scripts version json`: the instance's libraries or loaded
    /// scripts of that version, from the agent that changed them (peer connections
    /// only).
    DmcKeep,
    /// The hash family.
    Hash(HashCmd),
    /// The list family.
    List(ListCmd),
    /// The set family.
    Sets(SetCmd),
    /// The sorted set family.
    ZSet(ZSetCmd),
    /// Bit operations on strings.
    Bit(BitCmd),
    /// HyperLogLog.
    Hll(HllCmd),
    /// Geo on sorted sets.
    Geo(GeoCmd),
    /// Streams.
    Stream(StreamCmd),
    /// `SORT` (may store its result).
    Sort,
    /// `DUMP key`.
    Dump,
    /// `RESTORE key ttl payload ...`.
    Restore,
    /// `SORT_RO`.
    SortRo,
}

/// The module that runs a command: the families never import each other, and
/// [`crate::dispatch`] chooses one by this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Connection and server commands ([`crate::server`]).
    Server,
    /// Strings ([`crate::strings`]).
    Strings,
    /// Hashes ([`crate::hashes`]).
    Hashes,
    /// Lists ([`crate::lists`]).
    Lists,
    /// Sets ([`crate::sets`]).
    Sets,
    /// Sorted sets ([`crate::zsets`]).
    ZSets,
    /// Bitmaps ([`crate::bitmaps`]).
    Bitmaps,
    /// HyperLogLog ([`crate::hyperloglog`]).
    HyperLogLog,
    /// Geo ([`crate::geo`]).
    Geo,
    /// Streams ([`crate::streams`]).
    Streams,
    /// SORT and SORT_RO ([`crate::sort`]).
    Sort,
    /// DUMP and RESTORE ([`crate::dump`]).
    Dump,
    /// The keyspace ([`crate::keys`]).
    Keys,
    /// OBJECT and MEMORY ([`crate::introspect`]).
    Introspect,
    /// Cluster commands: a cluster member's router answers them from its map; the
    /// engine alone (standalone) says cluster support is disabled, as Redis does.
    Cluster,
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH ([`crate::multi`]).
    Transactions,
    /// EVAL and its kin, SCRIPT ([`crate::scripting`]).
    Scripting,
    /// SUBSCRIBE and its kin, PUBLISH, PUBSUB ([`crate::pubsub`]).
    PubSub,
    /// Commands between DMC processes, handled by the agent's connection loop.
    Internal,
}

/// A pipelined run the connection loop may execute as one batch (see
/// [`Engine::leading_gets`](crate::Engine::leading_gets)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastPath {
    None,
    /// `GET key`: a run is read from the pool as one batch.
    Get,
    /// `SET key value ...`: a run of distinct keys commits together.
    Set,
    /// `INCR key`, `DECR key`, `INCRBY key n`, `DECRBY key n`: run with SETs, as a run
    /// of writes of distinct keys.
    Counter,
}

impl Cmd {
    /// The family that runs this command; exhaustive, so a new command does not
    /// compile without one.
    pub const fn family(self) -> Family {
        use Cmd::*;
        match self {
            Ping | Echo | Hello | Auth | Select | Quit | Reset | Client | Info | Config
            | Command | Time | Dbsize | Slowlog | Latency | Monitor | Wait | LastSave | Debug
            | Acl => Family::Server,
            Get | Set | SetNx | SetEx | PSetEx | GetDel | GetEx | GetSet | MGet | MSet | MSetNx
            | Incr | Decr | IncrBy | DecrBy | IncrByFloat | Append | Strlen | GetRange
            | SetRange | Lcs => Family::Strings,
            Del | Unlink | Exists | Type | Expire | PExpire | ExpireAt | PExpireAt | Ttl | PTtl
            | ExpireTime | PExpireTime | Persist | Touch | Scan | Keys | RandomKey | FlushDb
            | FlushAll | Rename | RenameNx | Copy | Move | SwapDb => Family::Keys,
            Object | Memory => Family::Introspect,
            Cluster | ReadOnly | ReadWrite | Asking => Family::Cluster,
            Multi | Exec | Discard | Watch | Unwatch => Family::Transactions,
            Eval | EvalSha | EvalRo | EvalShaRo | Script | FCall | FCallRo | Function => {
                Family::Scripting
            }
            Subscribe | Unsubscribe | PSubscribe | PUnsubscribe | SSubscribe | SUnsubscribe
            | Publish | SPublish | PubSub => Family::PubSub,
            DmcPeer | DmcUser | DmcWarm | DmcTracking | DmcInvalidate | DmcOrigin | DmcKeep => {
                Family::Internal
            }
            Hash(_) => Family::Hashes,
            List(_) => Family::Lists,
            Sets(_) => Family::Sets,
            ZSet(_) => Family::ZSets,
            Bit(_) => Family::Bitmaps,
            Hll(_) => Family::HyperLogLog,
            Geo(_) => Family::Geo,
            Stream(_) => Family::Streams,
            Sort | SortRo => Family::Sort,
            Dump | Restore => Family::Dump,
        }
    }
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
    /// Where the number of keys is, for commands whose keys follow a count (LMPOP,
    /// ZUNIONSTORE, ...: Redis's `movablekeys`); 0 for none. Those keys come after
    /// the fixed ones `first_key..=last_key` name.
    pub numkeys: i32,
    pub cmd: Cmd,
}

impl Spec {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.contains(&flag)
    }

    pub fn is_write(&self) -> bool {
        self.has_flag("write")
    }

    pub fn family(&self) -> Family {
        self.cmd.family()
    }

    /// Whether `argc` arguments (the name included) fit the command's arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let n = i64::try_from(argc).unwrap_or(i64::MAX);
        let arity = i64::from(self.arity);
        if arity >= 0 { n == arity } else { n >= -arity }
    }

    /// Argument positions of the command's keys for `argc` arguments (Redis's first
    /// key, last key, step; a negative last key counts from the end). Call it only on
    /// an arity-checked command: a key group cut short is left out, never indexed.
    pub fn key_positions(&self, args: &[bytes::Bytes]) -> Vec<usize> {
        let mut keys = self.fixed_key_positions(args.len());
        if let Ok(at) = usize::try_from(self.numkeys)
            && at > 0
        {
            keys.extend(counted_key_positions(args, at));
        }
        let store = match self.cmd {
            Cmd::Sort => {
                data_model::store_key_position(args, 2, &["store"], data_model::sort_option_width)
            }
            Cmd::Geo(GeoCmd::GeoRadius | GeoCmd::GeoRadiusByMember) => {
                data_model::store_key_position(args, 5, &["store", "storedist"], |_| 0)
            }
            Cmd::Stream(StreamCmd::XRead | StreamCmd::XReadGroup) => {
                keys.extend(data_model::xread_key_positions(args));
                None
            }
            Cmd::Stream(StreamCmd::XGroup | StreamCmd::XInfo) => {
                (args.len() > 2 && !args[1].eq_ignore_ascii_case(b"help")).then_some(2)
            }
            _ => None,
        };
        keys.extend(store);
        keys
    }

    fn fixed_key_positions(&self, argc: usize) -> Vec<usize> {
        let (first, step) = (self.first_key, self.step);
        let argc = i64::try_from(argc).unwrap_or(i64::MAX);
        if first <= 0 || step <= 0 || i64::from(first) >= argc {
            return Vec::new();
        }
        let last = if self.last_key < 0 {
            argc + i64::from(self.last_key)
        } else {
            i64::from(self.last_key).min(argc - 1)
        };
        (i64::from(first)..=last)
            .step_by(step as usize)
            .filter_map(|i| usize::try_from(i).ok())
            .collect()
    }

    /// How many arguments make one key's part of the command, when a multi-key write
    /// whose keys have several owners is the sum of per-key commands (MSET: key and
    /// value; DEL, UNLINK, TOUCH: the key); `None` when it cannot be split.
    pub fn split_width(&self) -> Option<usize> {
        match self.cmd {
            Cmd::MSet => Some(2),
            Cmd::Del | Cmd::Unlink | Cmd::Touch => Some(1),
            _ => None,
        }
    }

    /// Which pipelined fast path may run this command.
    pub fn fast_path(&self) -> FastPath {
        match self.cmd {
            Cmd::Get => FastPath::Get,
            Cmd::Set => FastPath::Set,
            Cmd::Incr | Cmd::Decr | Cmd::IncrBy | Cmd::DecrBy => FastPath::Counter,
            _ => FastPath::None,
        }
    }
}

/// The keys a count at `at` announces, as far as the arguments reach (the command
/// itself answers a bad or oversized count).
fn counted_key_positions(args: &[bytes::Bytes], at: usize) -> std::ops::Range<usize> {
    let n = args
        .get(at)
        .and_then(|c| crate::parse_i64(c))
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let start = at + 1;
    start..start.saturating_add(n).min(args.len()).max(start)
}

const W: &[&str] = &["write", "denyoom"];
const WF: &[&str] = &["write", "fast"];
const R: &[&str] = &["readonly", "fast"];
const C: &[&str] = &["fast", "stale", "loading"];
const TX: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];
const PS: &[&str] = &["pubsub", "noscript", "loading", "stale"];
const PUB: &[&str] = &["pubsub", "loading", "stale", "fast"];
const EVAL: &[&str] = &["write", "noscript", "stale", "skip_monitor", "movablekeys"];
/// SORT: its STORE option names a key of its own.
const SORT: &[&str] = &["write", "denyoom", "movablekeys"];
const EVAL_RO: &[&str] = &[
    "readonly",
    "noscript",
    "stale",
    "skip_monitor",
    "movablekeys",
];

/// A row of EVAL and its kin: `script numkeys key... arg...`, the key count at 2.
const fn script_row(name: &'static str, flags: &'static [&'static str], cmd: Cmd) -> Spec {
    Spec {
        name,
        arity: -3,
        flags,
        first_key: 0,
        last_key: 0,
        step: 0,
        numkeys: 2,
        cmd,
    }
}

macro_rules! spec {
    ($name:expr, $arity:expr, $flags:expr, $f:expr, $l:expr, $s:expr, $cmd:ident) => {
        Spec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first_key: $f,
            last_key: $l,
            step: $s,
            numkeys: 0,
            cmd: Cmd::$cmd,
        }
    };
}

/// Every command DMC answers: the core rows here, then the collections'.
pub static TABLE: std::sync::LazyLock<Vec<Spec>> = std::sync::LazyLock::new(|| {
    CORE.iter()
        .chain(collections::ROWS.iter())
        .chain(data_model::ROWS.iter())
        .copied()
        .collect()
});

const CORE: &[Spec] = &[
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
    // Redis's old name of GETRANGE, which redis-py still sends for `substr`.
    spec!("substr", 4, &["readonly"], 1, 1, 1, GetRange),
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
    spec!("sort", -2, SORT, 1, 1, 1, Sort),
    spec!("dump", 2, &["readonly"], 1, 1, 1, Dump),
    spec!("restore", -4, &["write", "denyoom"], 1, 1, 1, Restore),
    spec!("sort_ro", -2, &["readonly", "movablekeys"], 1, 1, 1, SortRo),
    spec!("object", -2, &["readonly"], 2, 2, 1, Object),
    spec!("memory", -2, &["readonly"], 0, 0, 0, Memory),
    spec!("cluster", -2, &[], 0, 0, 0, Cluster),
    spec!(
        "readonly",
        1,
        &["loading", "stale", "fast"],
        0,
        0,
        0,
        ReadOnly
    ),
    spec!(
        "readwrite",
        1,
        &["loading", "stale", "fast"],
        0,
        0,
        0,
        ReadWrite
    ),
    spec!("asking", 1, &["fast"], 0, 0, 0, Asking),
    spec!("multi", 1, TX, 0, 0, 0, Multi),
    spec!(
        "exec",
        1,
        &["noscript", "loading", "stale", "skip_slowlog"],
        0,
        0,
        0,
        Exec
    ),
    spec!("discard", 1, TX, 0, 0, 0, Discard),
    spec!("watch", -2, TX, 1, -1, 1, Watch),
    spec!("unwatch", 1, TX, 0, 0, 0, Unwatch),
    script_row("eval", EVAL, Cmd::Eval),
    script_row("evalsha", EVAL, Cmd::EvalSha),
    script_row("eval_ro", EVAL_RO, Cmd::EvalRo),
    script_row("evalsha_ro", EVAL_RO, Cmd::EvalShaRo),
    spec!("script", -2, &["noscript"], 0, 0, 0, Script),
    script_row("fcall", EVAL, Cmd::FCall),
    script_row("fcall_ro", EVAL_RO, Cmd::FCallRo),
    spec!("function", -2, &["noscript"], 0, 0, 0, Function),
    spec!(
        "slowlog",
        -2,
        &["admin", "loading", "stale"],
        0,
        0,
        0,
        Slowlog
    ),
    spec!(
        "monitor",
        1,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
        Monitor
    ),
    // `blocking`: it may wait, so the connection loop watches the client meanwhile.
    spec!("wait", 3, &["noscript", "blocking"], 0, 0, 0, Wait),
    // A container: its subcommands' flags are Redis's (`acl|setuser` admin, ...).
    spec!("acl", -2, &[], 0, 0, 0, Acl),
    spec!(
        "lastsave",
        1,
        &["loading", "stale", "fast"],
        0,
        0,
        0,
        LastSave
    ),
    spec!(
        "debug",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
        Debug
    ),
    spec!(
        "latency",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
        Latency
    ),
    spec!("subscribe", -2, PS, 0, 0, 0, Subscribe),
    spec!("unsubscribe", -1, PS, 0, 0, 0, Unsubscribe),
    spec!("psubscribe", -2, PS, 0, 0, 0, PSubscribe),
    spec!("punsubscribe", -1, PS, 0, 0, 0, PUnsubscribe),
    // Shard channels are keys, as in Redis Cluster: a cluster member answers MOVED
    // for another agent's slot, so they are subscribed and published at the owner.
    spec!("ssubscribe", -2, PS, 1, -1, 1, SSubscribe),
    spec!("sunsubscribe", -1, PS, 1, -1, 1, SUnsubscribe),
    spec!("publish", 3, PUB, 0, 0, 0, Publish),
    spec!("spublish", 3, PUB, 1, 1, 1, SPublish),
    spec!("pubsub", -2, &[], 0, 0, 0, PubSub),
    spec!(
        "dmc.peer",
        2,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
        DmcPeer
    ),
    // DMC.USER [name]: the user a peer connection's next commands run as (none: the
    // agent's own, unchecked).
    spec!(
        "dmc.user",
        -1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
        DmcUser
    ),
    spec!(
        "dmc.warm",
        -3,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
        DmcWarm
    ),
    spec!(
        "dmc.tracking",
        2,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
        DmcTracking
    ),
    spec!(
        "dmc.invalidate",
        -1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
        DmcInvalidate
    ),
    spec!(
        "dmc.origin",
        3,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
        DmcOrigin
    ),
    spec!(
        "dmc.keep",
        4,
        &["noscript", "loading", "stale"],
        0,
        0,
        0,
        DmcKeep
    ),
];

/// Row numbers by lowercase name. hashbrown's default hasher (foldhash) is several
/// times faster than SipHash on these short names, and every command is looked up.
fn index() -> &'static hashbrown::HashMap<&'static [u8], usize> {
    static INDEX: OnceLock<hashbrown::HashMap<&'static [u8], usize>> = OnceLock::new();
    INDEX.get_or_init(|| {
        TABLE
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_bytes(), i))
            .collect()
    })
}

/// The fast path of the command named `name` (case-insensitive), without a full
/// lookup: only the few rows that have one are compared, so the connection loop can
/// ask of every pipelined command at the cost of a length check.
pub fn fast_path_of(name: &[u8]) -> FastPath {
    static FAST: OnceLock<Vec<(&'static [u8], FastPath)>> = OnceLock::new();
    let fast = FAST.get_or_init(|| {
        TABLE
            .iter()
            .filter(|s| s.fast_path() != FastPath::None)
            .map(|s| (s.name.as_bytes(), s.fast_path()))
            .collect()
    });
    fast.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map_or(FastPath::None, |&(_, f)| f)
}

/// Looks a command up by name, case-insensitively.
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    lookup_index(name).map(|i| &TABLE[i])
}

/// The command's row number in [`TABLE`], looked up case-insensitively.
///
/// A pipeline's commands are looked up several times each (to prefetch their keys, to
/// form runs, to run them) and are mostly one command over and over, so each thread
/// remembers the last name it found, as it was spelled: a repeat costs a short compare
/// instead of lowering and hashing the name (together 2 % of a pipelined SET).
pub fn lookup_index(name: &[u8]) -> Option<usize> {
    if let Some(i) = last_found::recall(name) {
        return Some(i);
    }
    let mut lower = [0u8; 32];
    let lower = lower.get_mut(..name.len())?;
    for (d, s) in lower.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let found = index().get(&*lower).copied();
    if let Some(i) = found {
        last_found::remember(name, i);
    }
    found
}

/// The key positions of a command line (words split at spaces), for the tables' tests.
#[cfg(test)]
pub(crate) fn keys_of_line(line: &str) -> Vec<usize> {
    let args: Vec<bytes::Bytes> = line
        .split(' ')
        .map(|w| bytes::Bytes::copy_from_slice(w.as_bytes()))
        .collect();
    lookup(&args[0]).expect("a command").key_positions(&args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_lookups_answer_as_the_first() {
        for name in [
            "SET", "set", "Set", "GET", "set", "incrby", "INCRBY", "nosuch", "set",
        ] {
            let expected = TABLE.iter().position(|s| s.name.eq_ignore_ascii_case(name));
            for _ in 0..2 {
                assert_eq!(lookup_index(name.as_bytes()), expected, "{name}");
            }
        }
        // A name longer than what is remembered is looked up each time, and found.
        let long = TABLE
            .iter()
            .position(|s| s.name.len() > 16)
            .expect("a command name over 16 bytes");
        for _ in 0..2 {
            assert_eq!(lookup_index(TABLE[long].name.as_bytes()), Some(long));
            assert_eq!(
                lookup_index(b"get"),
                TABLE.iter().position(|s| s.name == "get")
            );
        }
        assert_eq!(lookup_index("a".repeat(20).as_bytes()), None);
        assert_eq!(
            lookup_index(b"zrangebyscore"),
            TABLE.iter().position(|s| s.name == "zrangebyscore")
        );
        assert_eq!(
            lookup_index(b"zrangebyscor"),
            None,
            "a prefix of the last is not it"
        );
    }

    #[test]
    fn table_is_consistent() {
        let mut names = std::collections::HashSet::new();
        for s in TABLE.iter() {
            assert!(names.insert(s.name), "{} twice", s.name);
            assert_eq!(s.name, s.name.to_lowercase());
            assert!(lookup(s.name.to_uppercase().as_bytes()).is_some());
        }
        assert!(lookup(b"nosuch").is_none());
        let spec = |n: &str| lookup(n.as_bytes()).expect(n);
        assert!(spec("get").arity_ok(2) && !spec("get").arity_ok(3));
        assert!(spec("set").arity_ok(5));
    }

    #[test]
    fn key_positions_follow_the_command_table() {
        let keys = |name: &str, argc: usize| {
            let args: Vec<bytes::Bytes> = (0..argc).map(|_| bytes::Bytes::from("1")).collect();
            lookup(name.as_bytes()).expect(name).key_positions(&args)
        };
        assert_eq!(keys("set", 3), vec![1]);
        assert_eq!(keys("mset", 5), vec![1, 3]);
        assert_eq!(keys("del", 4), vec![1, 2, 3]);
        assert_eq!(keys("rename", 3), vec![1, 2]);
        assert!(keys("set", 1).is_empty());
        assert!(keys("ping", 2).is_empty());
        // An MSET cut short (arity not checked yet) names only the keys it has.
        assert_eq!(keys("mset", 4), vec![1, 3]);
    }

    #[test]
    fn routing_properties_come_from_the_table() {
        let spec = |n: &str| lookup(n.as_bytes()).expect(n);
        assert_eq!(spec("get").fast_path(), FastPath::Get);
        assert_eq!(spec("SET").fast_path(), FastPath::Set);
        assert_eq!(spec("incrby").fast_path(), FastPath::Counter);
        assert_eq!(spec("INCRBYFLOAT").fast_path(), FastPath::None);
        for s in TABLE.iter() {
            assert_eq!(
                fast_path_of(s.name.to_uppercase().as_bytes()),
                s.fast_path()
            );
        }
        assert_eq!(fast_path_of(b"nosuch"), FastPath::None);
        assert_eq!(spec("mset").split_width(), Some(2));
        assert_eq!(spec("rename").split_width(), None);
        assert_eq!(spec("cluster").family(), Family::Cluster);
        assert_eq!(spec("dmc.peer").family(), Family::Internal);
        assert!(spec("set").is_write() && !spec("get").is_write());
    }
}
