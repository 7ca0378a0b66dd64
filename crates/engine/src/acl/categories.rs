//! Redis 7.0's ACL categories, and each command's categories and key access: the
//! data `ACL SETUSER +@category`, `ACL CAT` and the key checks read.
//!
//! The rows below `COMMANDS` are generated from Redis 7.0.15's `src/commands/*.json`
//! (the release the redis-server these texts were checked against reports): a command's
//! `acl_categories`, plus the ones `setImplicitACLCategories` (`src/server.c`) adds from
//! its `command_flags` (`WRITE` → @write, `READONLY` → @read unless @scripting,
//! `ADMIN` → @admin @dangerous, `PUBSUB` → @pubsub, `FAST` → @fast, `BLOCKING` →
//! @blocking, and @slow for everything not @fast), and one entry per key spec in
//! `key_specs` order: read if the spec has `ACCESS`, write if it has `INSERT`, `DELETE`
//! or `UPDATE` (`ACLSelectorCheckKey`), neither (any key pattern will do), or not a key
//! (`NOT_KEY`: shard channels). They cover every command of DMC's table, every Redis
//! subcommand of its containers, and ACL's own. The last rows are DMC's, by hand.
//!
//! A container (`config`) has categories of its own, as in Redis: `+@slow` allows it and
//! all its subcommands, whatever theirs.

/// Redis 7.0's ACL categories, in its order (`ACL CAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    Keyspace,
    Read,
    Write,
    Set,
    SortedSet,
    List,
    Hash,
    String,
    Bitmap,
    HyperLogLog,
    Geo,
    Stream,
    PubSub,
    Admin,
    Fast,
    Slow,
    Blocking,
    Dangerous,
    Connection,
    Transaction,
    Scripting,
}

impl Category {
    /// Every category, in Redis's order.
    pub const ALL: [Category; 21] = [
        Category::Keyspace,
        Category::Read,
        Category::Write,
        Category::Set,
        Category::SortedSet,
        Category::List,
        Category::Hash,
        Category::String,
        Category::Bitmap,
        Category::HyperLogLog,
        Category::Geo,
        Category::Stream,
        Category::PubSub,
        Category::Admin,
        Category::Fast,
        Category::Slow,
        Category::Blocking,
        Category::Dangerous,
        Category::Connection,
        Category::Transaction,
        Category::Scripting,
    ];

    /// The name `ACL CAT` lists and `+@name` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Category::Keyspace => "keyspace",
            Category::Read => "read",
            Category::Write => "write",
            Category::Set => "set",
            Category::SortedSet => "sortedset",
            Category::List => "list",
            Category::Hash => "hash",
            Category::String => "string",
            Category::Bitmap => "bitmap",
            Category::HyperLogLog => "hyperloglog",
            Category::Geo => "geo",
            Category::Stream => "stream",
            Category::PubSub => "pubsub",
            Category::Admin => "admin",
            Category::Fast => "fast",
            Category::Slow => "slow",
            Category::Blocking => "blocking",
            Category::Dangerous => "dangerous",
            Category::Connection => "connection",
            Category::Transaction => "transaction",
            Category::Scripting => "scripting",
        }
    }

    /// The category named `name`, case-insensitively (Redis's `strcasecmp`).
    pub fn from_name(name: &[u8]) -> Option<Category> {
        Category::ALL
            .into_iter()
            .find(|c| c.name().as_bytes().eq_ignore_ascii_case(name))
    }

    /// This category's bit in a [`Categories`] mask.
    pub const fn bit(self) -> Categories {
        1 << self as u32
    }
}

/// A set of categories: bit `c as u32` for category `c`.
pub type Categories = u32;

const KEYSPACE: Categories = Category::Keyspace.bit();
const READ: Categories = Category::Read.bit();
const WRITE: Categories = Category::Write.bit();
const SET: Categories = Category::Set.bit();
const SORTEDSET: Categories = Category::SortedSet.bit();
const LIST: Categories = Category::List.bit();
const HASH: Categories = Category::Hash.bit();
const STRING: Categories = Category::String.bit();
const BITMAP: Categories = Category::Bitmap.bit();
const HYPERLOGLOG: Categories = Category::HyperLogLog.bit();
const GEO: Categories = Category::Geo.bit();
const STREAM: Categories = Category::Stream.bit();
const PUBSUB: Categories = Category::PubSub.bit();
const ADMIN: Categories = Category::Admin.bit();
const FAST: Categories = Category::Fast.bit();
const SLOW: Categories = Category::Slow.bit();
const BLOCKING: Categories = Category::Blocking.bit();
const DANGEROUS: Categories = Category::Dangerous.bit();
const CONNECTION: Categories = Category::Connection.bit();
const TRANSACTION: Categories = Category::Transaction.bit();
const SCRIPTING: Categories = Category::Scripting.bit();

/// What one key argument needs of the key patterns (Redis's `ACL_*_PERMISSION` bits).
pub type KeyAccess = u8;
/// Read: a `~` or `%R~` pattern.
pub const KEY_R: KeyAccess = 1;
/// Write: a `~` or `%W~` pattern.
pub const KEY_W: KeyAccess = 2;
/// Both: a `~` pattern, or `%R~` and `%W~` ones that both match.
pub const KEY_RW: KeyAccess = KEY_R | KEY_W;
/// Neither (EXISTS, TYPE, STRLEN: Redis's `RO` specs without `ACCESS`): any pattern.
pub const KEY_ANY: KeyAccess = 0;
/// Not a key at all (a shard channel): the key patterns are not asked.
pub const NOT_KEY: KeyAccess = 4;

/// One command's (or `container|subcommand`'s) row.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Lowercase, `container|sub` for a subcommand.
    pub name: &'static str,
    pub categories: Categories,
    /// One per Redis key spec, in order: a command's first key takes the first, later
    /// keys the next, and the last one the rest (see [`Entry::key_access`]).
    pub keys: &'static [KeyAccess],
}

impl Entry {
    /// What the command's `nth` key (0-based, in `Spec::key_positions` order) needs.
    /// DMC's key positions list each Redis spec's keys in spec order, and every command
    /// with several specs has one key in each but the last (RENAME, LMOVE, SINTERSTORE,
    /// ZUNIONSTORE, ...), so the `nth` key belongs to spec `min(nth, last)`.
    pub fn key_access(&self, nth: usize) -> Option<KeyAccess> {
        self.keys.get(nth).or_else(|| self.keys.last()).copied()
    }
}

const fn e(name: &'static str, categories: Categories, keys: &'static [KeyAccess]) -> Entry {
    Entry {
        name,
        categories,
        keys,
    }
}

/// Commands whose command check Redis skips (`NO_AUTH`): AUTH and HELLO must work
/// before authentication, QUIT and RESET for anyone.
pub const NO_AUTH: &[&str] = &["auth", "hello", "quit", "reset"];

/// Every command DMC has, with its subcommands, and ACL's.
pub const COMMANDS: &[Entry] = &[
    e("acl", SLOW, &[]),
    e("acl|cat", SLOW, &[]),
    e("acl|deluser", ADMIN | SLOW | DANGEROUS, &[]),
    e("acl|dryrun", ADMIN | SLOW | DANGEROUS, &[]),
    e("acl|genpass", SLOW, &[]),
    e("acl|getuser", ADMIN | SLOW | DANGEROUS, &[]),
    e("acl|help", SLOW, &[]),
    e("acl|list", ADMIN | SLOW | DANGEROUS, &[]),
    e("acl|load", ADMIN | SLOW | DANGEROUS, &[]),
    e("acl|log", ADMIN | SLOW | DANGEROUS, &[]),
    e("acl|save", ADMIN | SLOW | DANGEROUS, &[]),
    e("acl|setuser", ADMIN | SLOW | DANGEROUS, &[]),
    e("acl|users", ADMIN | SLOW | DANGEROUS, &[]),
    e("acl|whoami", SLOW, &[]),
    e("append", WRITE | STRING | FAST, &[KEY_W]),
    e("asking", FAST | CONNECTION, &[]),
    e("auth", FAST | CONNECTION, &[]),
    e("bitcount", READ | BITMAP | SLOW, &[KEY_R]),
    e("bitfield", WRITE | BITMAP | SLOW, &[KEY_RW]),
    e("bitfield_ro", READ | BITMAP | FAST, &[KEY_R]),
    e("bitop", WRITE | BITMAP | SLOW, &[KEY_W, KEY_R]),
    e("bitpos", READ | BITMAP | SLOW, &[KEY_R]),
    e("blmove", WRITE | LIST | SLOW | BLOCKING, &[KEY_RW, KEY_W]),
    e("blmpop", WRITE | LIST | SLOW | BLOCKING, &[KEY_RW]),
    e("blpop", WRITE | LIST | SLOW | BLOCKING, &[KEY_RW]),
    e("brpop", WRITE | LIST | SLOW | BLOCKING, &[KEY_RW]),
    e(
        "brpoplpush",
        WRITE | LIST | SLOW | BLOCKING,
        &[KEY_RW, KEY_W],
    ),
    e("bzmpop", WRITE | SORTEDSET | SLOW | BLOCKING, &[KEY_RW]),
    e("bzpopmax", WRITE | SORTEDSET | FAST | BLOCKING, &[KEY_RW]),
    e("bzpopmin", WRITE | SORTEDSET | FAST | BLOCKING, &[KEY_RW]),
    e("client", SLOW, &[]),
    e("client|caching", SLOW | CONNECTION, &[]),
    e("client|getname", SLOW | CONNECTION, &[]),
    e("client|getredir", SLOW | CONNECTION, &[]),
    e("client|help", SLOW | CONNECTION, &[]),
    e("client|id", SLOW | CONNECTION, &[]),
    e("client|info", SLOW | CONNECTION, &[]),
    e("client|kill", ADMIN | SLOW | DANGEROUS | CONNECTION, &[]),
    e("client|list", ADMIN | SLOW | DANGEROUS | CONNECTION, &[]),
    e(
        "client|no-evict",
        ADMIN | SLOW | DANGEROUS | CONNECTION,
        &[],
    ),
    e("client|pause", ADMIN | SLOW | DANGEROUS | CONNECTION, &[]),
    e("client|reply", SLOW | CONNECTION, &[]),
    e("client|setname", SLOW | CONNECTION, &[]),
    e("client|tracking", SLOW | CONNECTION, &[]),
    e("client|trackinginfo", SLOW | CONNECTION, &[]),
    e("client|unblock", ADMIN | SLOW | DANGEROUS | CONNECTION, &[]),
    e("client|unpause", ADMIN | SLOW | DANGEROUS | CONNECTION, &[]),
    e("cluster", SLOW, &[]),
    e("cluster|addslots", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|addslotsrange", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|bumpepoch", ADMIN | SLOW | DANGEROUS, &[]),
    e(
        "cluster|count-failure-reports",
        ADMIN | SLOW | DANGEROUS,
        &[],
    ),
    e("cluster|countkeysinslot", SLOW, &[]),
    e("cluster|delslots", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|delslotsrange", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|failover", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|flushslots", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|forget", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|getkeysinslot", SLOW, &[]),
    e("cluster|help", SLOW, &[]),
    e("cluster|info", SLOW, &[]),
    e("cluster|keyslot", SLOW, &[]),
    e("cluster|links", SLOW, &[]),
    e("cluster|meet", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|myid", SLOW, &[]),
    e("cluster|nodes", SLOW, &[]),
    e("cluster|replicas", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|replicate", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|reset", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|saveconfig", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|set-config-epoch", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|setslot", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|shards", SLOW, &[]),
    e("cluster|slaves", ADMIN | SLOW | DANGEROUS, &[]),
    e("cluster|slots", SLOW, &[]),
    e("command", SLOW | CONNECTION, &[]),
    e("command|count", SLOW | CONNECTION, &[]),
    e("command|docs", SLOW | CONNECTION, &[]),
    e("command|getkeys", SLOW | CONNECTION, &[]),
    e("command|getkeysandflags", SLOW | CONNECTION, &[]),
    e("command|help", SLOW | CONNECTION, &[]),
    e("command|info", SLOW | CONNECTION, &[]),
    e("command|list", SLOW | CONNECTION, &[]),
    e("config", SLOW, &[]),
    e("config|get", ADMIN | SLOW | DANGEROUS, &[]),
    e("config|help", SLOW, &[]),
    e("config|resetstat", ADMIN | SLOW | DANGEROUS, &[]),
    e("config|rewrite", ADMIN | SLOW | DANGEROUS, &[]),
    e("config|set", ADMIN | SLOW | DANGEROUS, &[]),
    e("copy", KEYSPACE | WRITE | SLOW, &[KEY_R, KEY_W]),
    e("dbsize", KEYSPACE | READ | FAST, &[]),
    e("debug", ADMIN | SLOW | DANGEROUS, &[]),
    e("decr", WRITE | STRING | FAST, &[KEY_RW]),
    e("decrby", WRITE | STRING | FAST, &[KEY_RW]),
    e("del", KEYSPACE | WRITE | SLOW, &[KEY_W]),
    e("discard", FAST | TRANSACTION, &[]),
    e("dump", KEYSPACE | READ | SLOW, &[KEY_R]),
    e("echo", FAST | CONNECTION, &[]),
    e("eval", SLOW | SCRIPTING, &[KEY_RW]),
    e("eval_ro", SLOW | SCRIPTING, &[KEY_R]),
    e("fcall", SLOW | SCRIPTING, &[KEY_RW]),
    e("fcall_ro", SLOW | SCRIPTING, &[KEY_R]),
    e("function", SLOW, &[]),
    e("function|delete", WRITE | SLOW | SCRIPTING, &[]),
    e("function|dump", SLOW | SCRIPTING, &[]),
    e("function|flush", WRITE | SLOW | SCRIPTING, &[]),
    e("function|help", SLOW | SCRIPTING, &[]),
    e("function|kill", SLOW | SCRIPTING, &[]),
    e("function|list", SLOW | SCRIPTING, &[]),
    e("function|load", WRITE | SLOW | SCRIPTING, &[]),
    e("function|restore", WRITE | SLOW | SCRIPTING, &[]),
    e("function|stats", SLOW | SCRIPTING, &[]),
    e("evalsha", SLOW | SCRIPTING, &[KEY_RW]),
    e("evalsha_ro", SLOW | SCRIPTING, &[KEY_R]),
    e("exec", SLOW | TRANSACTION, &[]),
    e("exists", KEYSPACE | READ | FAST, &[KEY_ANY]),
    e("expire", KEYSPACE | WRITE | FAST, &[KEY_W]),
    e("expireat", KEYSPACE | WRITE | FAST, &[KEY_W]),
    e("expiretime", KEYSPACE | READ | FAST, &[KEY_R]),
    e("flushall", KEYSPACE | WRITE | SLOW | DANGEROUS, &[]),
    e("flushdb", KEYSPACE | WRITE | SLOW | DANGEROUS, &[]),
    e("geoadd", WRITE | GEO | SLOW, &[KEY_W]),
    e("geodist", READ | GEO | SLOW, &[KEY_R]),
    e("geohash", READ | GEO | SLOW, &[KEY_R]),
    e("geopos", READ | GEO | SLOW, &[KEY_R]),
    e("georadius", WRITE | GEO | SLOW, &[KEY_R, KEY_W, KEY_W]),
    e("georadius_ro", READ | GEO | SLOW, &[KEY_R]),
    e(
        "georadiusbymember",
        WRITE | GEO | SLOW,
        &[KEY_R, KEY_W, KEY_W],
    ),
    e("georadiusbymember_ro", READ | GEO | SLOW, &[KEY_R]),
    e("geosearch", READ | GEO | SLOW, &[KEY_R]),
    e("geosearchstore", WRITE | GEO | SLOW, &[KEY_W, KEY_R]),
    e("get", READ | STRING | FAST, &[KEY_R]),
    e("getbit", READ | BITMAP | FAST, &[KEY_R]),
    e("getdel", WRITE | STRING | FAST, &[KEY_RW]),
    e("getex", WRITE | STRING | FAST, &[KEY_RW]),
    e("getrange", READ | STRING | SLOW, &[KEY_R]),
    e("getset", WRITE | STRING | FAST, &[KEY_RW]),
    e("hdel", WRITE | HASH | FAST, &[KEY_W]),
    e("hello", FAST | CONNECTION, &[]),
    e("hexists", READ | HASH | FAST, &[KEY_ANY]),
    e("hget", READ | HASH | FAST, &[KEY_R]),
    e("hgetall", READ | HASH | SLOW, &[KEY_R]),
    e("hincrby", WRITE | HASH | FAST, &[KEY_RW]),
    e("hincrbyfloat", WRITE | HASH | FAST, &[KEY_RW]),
    e("hkeys", READ | HASH | SLOW, &[KEY_R]),
    e("hlen", READ | HASH | FAST, &[KEY_ANY]),
    e("hmget", READ | HASH | FAST, &[KEY_R]),
    e("hmset", WRITE | HASH | FAST, &[KEY_W]),
    e("hrandfield", READ | HASH | SLOW, &[KEY_R]),
    e("hscan", READ | HASH | SLOW, &[KEY_R]),
    e("hset", WRITE | HASH | FAST, &[KEY_W]),
    e("hsetnx", WRITE | HASH | FAST, &[KEY_W]),
    e("hstrlen", READ | HASH | FAST, &[KEY_ANY]),
    e("hvals", READ | HASH | SLOW, &[KEY_R]),
    e("incr", WRITE | STRING | FAST, &[KEY_RW]),
    e("incrby", WRITE | STRING | FAST, &[KEY_RW]),
    e("incrbyfloat", WRITE | STRING | FAST, &[KEY_RW]),
    e("info", SLOW | DANGEROUS, &[]),
    e("keys", KEYSPACE | READ | SLOW | DANGEROUS, &[]),
    e("lastsave", ADMIN | FAST | DANGEROUS, &[]),
    e("latency", SLOW, &[]),
    e("latency|doctor", ADMIN | SLOW | DANGEROUS, &[]),
    e("latency|graph", ADMIN | SLOW | DANGEROUS, &[]),
    e("latency|help", SLOW, &[]),
    e("latency|histogram", ADMIN | SLOW | DANGEROUS, &[]),
    e("latency|history", ADMIN | SLOW | DANGEROUS, &[]),
    e("latency|latest", ADMIN | SLOW | DANGEROUS, &[]),
    e("latency|reset", ADMIN | SLOW | DANGEROUS, &[]),
    e("lcs", READ | STRING | SLOW, &[KEY_R]),
    e("lindex", READ | LIST | SLOW, &[KEY_R]),
    e("linsert", WRITE | LIST | SLOW, &[KEY_W]),
    e("llen", READ | LIST | FAST, &[KEY_ANY]),
    e("lmove", WRITE | LIST | SLOW, &[KEY_RW, KEY_W]),
    e("lmpop", WRITE | LIST | SLOW, &[KEY_RW]),
    e("lpop", WRITE | LIST | FAST, &[KEY_RW]),
    e("lpos", READ | LIST | SLOW, &[KEY_R]),
    e("lpush", WRITE | LIST | FAST, &[KEY_W]),
    e("lpushx", WRITE | LIST | FAST, &[KEY_W]),
    e("lrange", READ | LIST | SLOW, &[KEY_R]),
    e("lrem", WRITE | LIST | SLOW, &[KEY_W]),
    e("lset", WRITE | LIST | SLOW, &[KEY_W]),
    e("ltrim", WRITE | LIST | SLOW, &[KEY_W]),
    e("memory", SLOW, &[]),
    e("memory|doctor", SLOW, &[]),
    e("memory|help", SLOW, &[]),
    e("memory|malloc-stats", SLOW, &[]),
    e("memory|purge", SLOW, &[]),
    e("memory|stats", SLOW, &[]),
    e("memory|usage", READ | SLOW, &[KEY_ANY]),
    e("mget", READ | STRING | FAST, &[KEY_R]),
    e("monitor", ADMIN | SLOW | DANGEROUS, &[]),
    e("move", KEYSPACE | WRITE | FAST, &[KEY_RW]),
    e("mset", WRITE | STRING | SLOW, &[KEY_W]),
    e("msetnx", WRITE | STRING | SLOW, &[KEY_W]),
    e("multi", FAST | TRANSACTION, &[]),
    e("object", SLOW, &[]),
    e("object|encoding", KEYSPACE | READ | SLOW, &[KEY_ANY]),
    e("object|freq", KEYSPACE | READ | SLOW, &[KEY_ANY]),
    e("object|help", KEYSPACE | SLOW, &[]),
    e("object|idletime", KEYSPACE | READ | SLOW, &[KEY_ANY]),
    e("object|refcount", KEYSPACE | READ | SLOW, &[KEY_ANY]),
    e("persist", KEYSPACE | WRITE | FAST, &[KEY_W]),
    e("pexpire", KEYSPACE | WRITE | FAST, &[KEY_W]),
    e("pexpireat", KEYSPACE | WRITE | FAST, &[KEY_W]),
    e("pexpiretime", KEYSPACE | READ | FAST, &[KEY_R]),
    e("pfadd", WRITE | HYPERLOGLOG | FAST, &[KEY_W]),
    e("pfcount", READ | HYPERLOGLOG | SLOW, &[KEY_R]),
    e(
        "pfdebug",
        WRITE | HYPERLOGLOG | ADMIN | SLOW | DANGEROUS,
        &[KEY_R],
    ),
    e("pfmerge", WRITE | HYPERLOGLOG | SLOW, &[KEY_RW, KEY_R]),
    e("ping", FAST | CONNECTION, &[]),
    e("psetex", WRITE | STRING | SLOW, &[KEY_W]),
    e("psubscribe", PUBSUB | SLOW, &[]),
    e("pttl", KEYSPACE | READ | FAST, &[KEY_R]),
    e("publish", PUBSUB | FAST, &[]),
    e("pubsub", SLOW, &[]),
    e("pubsub|channels", PUBSUB | SLOW, &[]),
    e("pubsub|help", SLOW, &[]),
    e("pubsub|numpat", PUBSUB | SLOW, &[]),
    e("pubsub|numsub", PUBSUB | SLOW, &[]),
    e("pubsub|shardchannels", PUBSUB | SLOW, &[]),
    e("pubsub|shardnumsub", PUBSUB | SLOW, &[]),
    e("punsubscribe", PUBSUB | SLOW, &[]),
    e("quit", FAST | CONNECTION, &[]),
    e("randomkey", KEYSPACE | READ | SLOW, &[]),
    e("readonly", FAST | CONNECTION, &[]),
    e("readwrite", FAST | CONNECTION, &[]),
    e("restore", KEYSPACE | WRITE | SLOW | DANGEROUS, &[KEY_W]),
    e("rename", KEYSPACE | WRITE | SLOW, &[KEY_RW, KEY_W]),
    e("renamenx", KEYSPACE | WRITE | FAST, &[KEY_RW, KEY_W]),
    e("reset", FAST | CONNECTION, &[]),
    e("rpop", WRITE | LIST | FAST, &[KEY_RW]),
    e("rpoplpush", WRITE | LIST | SLOW, &[KEY_RW, KEY_W]),
    e("rpush", WRITE | LIST | FAST, &[KEY_W]),
    e("rpushx", WRITE | LIST | FAST, &[KEY_W]),
    e("sadd", WRITE | SET | FAST, &[KEY_W]),
    e("scan", KEYSPACE | READ | SLOW, &[]),
    e("scard", READ | SET | FAST, &[KEY_ANY]),
    e("script", SLOW, &[]),
    e("script|debug", SLOW | SCRIPTING, &[]),
    e("script|exists", SLOW | SCRIPTING, &[]),
    e("script|flush", SLOW | SCRIPTING, &[]),
    e("script|help", SLOW | SCRIPTING, &[]),
    e("script|kill", SLOW | SCRIPTING, &[]),
    e("script|load", SLOW | SCRIPTING, &[]),
    e("sdiff", READ | SET | SLOW, &[KEY_R]),
    e("sdiffstore", WRITE | SET | SLOW, &[KEY_W, KEY_R]),
    e("select", FAST | CONNECTION, &[]),
    e("set", WRITE | STRING | SLOW, &[KEY_RW]),
    e("setbit", WRITE | BITMAP | SLOW, &[KEY_RW]),
    e("setex", WRITE | STRING | SLOW, &[KEY_W]),
    e("setnx", WRITE | STRING | FAST, &[KEY_W]),
    e("setrange", WRITE | STRING | SLOW, &[KEY_W]),
    e("sinter", READ | SET | SLOW, &[KEY_R]),
    e("sintercard", READ | SET | SLOW, &[KEY_R]),
    e("sinterstore", WRITE | SET | SLOW, &[KEY_W, KEY_R]),
    e("sismember", READ | SET | FAST, &[KEY_ANY]),
    e("slowlog", SLOW, &[]),
    e("slowlog|get", ADMIN | SLOW | DANGEROUS, &[]),
    e("slowlog|help", SLOW, &[]),
    e("slowlog|len", ADMIN | SLOW | DANGEROUS, &[]),
    e("slowlog|reset", ADMIN | SLOW | DANGEROUS, &[]),
    e("smembers", READ | SET | SLOW, &[KEY_R]),
    e("smismember", READ | SET | FAST, &[KEY_R]),
    e("smove", WRITE | SET | FAST, &[KEY_RW, KEY_W]),
    e(
        "sort",
        WRITE | SET | SORTEDSET | LIST | SLOW | DANGEROUS,
        &[KEY_R, KEY_W],
    ),
    e(
        "sort_ro",
        READ | SET | SORTEDSET | LIST | SLOW | DANGEROUS,
        &[KEY_R],
    ),
    e("spop", WRITE | SET | FAST, &[KEY_RW]),
    e("spublish", PUBSUB | FAST, &[NOT_KEY]),
    e("srandmember", READ | SET | SLOW, &[KEY_R]),
    e("srem", WRITE | SET | FAST, &[KEY_W]),
    e("sscan", READ | SET | SLOW, &[KEY_R]),
    e("ssubscribe", PUBSUB | SLOW, &[NOT_KEY]),
    e("strlen", READ | STRING | FAST, &[KEY_ANY]),
    e("subscribe", PUBSUB | SLOW, &[]),
    e("substr", READ | STRING | SLOW, &[KEY_R]),
    e("sunion", READ | SET | SLOW, &[KEY_R]),
    e("sunionstore", WRITE | SET | SLOW, &[KEY_W, KEY_R]),
    e("sunsubscribe", PUBSUB | SLOW, &[NOT_KEY]),
    e("swapdb", KEYSPACE | WRITE | FAST | DANGEROUS, &[]),
    e("time", FAST, &[]),
    e("touch", KEYSPACE | READ | FAST, &[KEY_ANY]),
    e("ttl", KEYSPACE | READ | FAST, &[KEY_R]),
    e("type", KEYSPACE | READ | FAST, &[KEY_ANY]),
    e("unlink", KEYSPACE | WRITE | FAST, &[KEY_W]),
    e("unsubscribe", PUBSUB | SLOW, &[]),
    e("unwatch", FAST | TRANSACTION, &[]),
    e("wait", SLOW | CONNECTION, &[]),
    e("watch", FAST | TRANSACTION, &[KEY_ANY]),
    e("xack", WRITE | STREAM | FAST, &[KEY_W]),
    e("xadd", WRITE | STREAM | FAST, &[KEY_W]),
    e("xautoclaim", WRITE | STREAM | FAST, &[KEY_W]),
    e("xclaim", WRITE | STREAM | FAST, &[KEY_W]),
    e("xdel", WRITE | STREAM | FAST, &[KEY_W]),
    e("xgroup", SLOW, &[]),
    e("xgroup|create", WRITE | STREAM | SLOW, &[KEY_W]),
    e("xgroup|createconsumer", WRITE | STREAM | SLOW, &[KEY_W]),
    e("xgroup|delconsumer", WRITE | STREAM | SLOW, &[KEY_W]),
    e("xgroup|destroy", WRITE | STREAM | SLOW, &[KEY_W]),
    e("xgroup|help", STREAM | SLOW, &[]),
    e("xgroup|setid", WRITE | STREAM | SLOW, &[KEY_W]),
    e("xinfo", SLOW, &[]),
    e("xinfo|consumers", READ | STREAM | SLOW, &[KEY_R]),
    e("xinfo|groups", READ | STREAM | SLOW, &[KEY_R]),
    e("xinfo|help", STREAM | SLOW, &[]),
    e("xinfo|stream", READ | STREAM | SLOW, &[KEY_R]),
    e("xlen", READ | STREAM | FAST, &[KEY_ANY]),
    e("xpending", READ | STREAM | SLOW, &[KEY_R]),
    e("xrange", READ | STREAM | SLOW, &[KEY_R]),
    e("xread", READ | STREAM | SLOW | BLOCKING, &[KEY_R]),
    e("xreadgroup", WRITE | STREAM | SLOW | BLOCKING, &[KEY_R]),
    e("xrevrange", READ | STREAM | SLOW, &[KEY_R]),
    e("xsetid", WRITE | STREAM | FAST, &[KEY_W]),
    e("xtrim", WRITE | STREAM | SLOW, &[KEY_W]),
    e("zadd", WRITE | SORTEDSET | FAST, &[KEY_W]),
    e("zcard", READ | SORTEDSET | FAST, &[KEY_ANY]),
    e("zcount", READ | SORTEDSET | FAST, &[KEY_R]),
    e("zdiff", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zdiffstore", WRITE | SORTEDSET | SLOW, &[KEY_W, KEY_R]),
    e("zincrby", WRITE | SORTEDSET | FAST, &[KEY_RW]),
    e("zinter", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zintercard", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zinterstore", WRITE | SORTEDSET | SLOW, &[KEY_W, KEY_R]),
    e("zlexcount", READ | SORTEDSET | FAST, &[KEY_R]),
    e("zmpop", WRITE | SORTEDSET | SLOW, &[KEY_RW]),
    e("zmscore", READ | SORTEDSET | FAST, &[KEY_R]),
    e("zpopmax", WRITE | SORTEDSET | FAST, &[KEY_RW]),
    e("zpopmin", WRITE | SORTEDSET | FAST, &[KEY_RW]),
    e("zrandmember", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zrange", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zrangebylex", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zrangebyscore", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zrangestore", WRITE | SORTEDSET | SLOW, &[KEY_W, KEY_R]),
    e("zrank", READ | SORTEDSET | FAST, &[KEY_R]),
    e("zrem", WRITE | SORTEDSET | FAST, &[KEY_W]),
    e("zremrangebylex", WRITE | SORTEDSET | SLOW, &[KEY_W]),
    e("zremrangebyrank", WRITE | SORTEDSET | SLOW, &[KEY_W]),
    e("zremrangebyscore", WRITE | SORTEDSET | SLOW, &[KEY_W]),
    e("zrevrange", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zrevrangebylex", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zrevrangebyscore", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zrevrank", READ | SORTEDSET | FAST, &[KEY_R]),
    e("zscan", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zscore", READ | SORTEDSET | FAST, &[KEY_R]),
    e("zunion", READ | SORTEDSET | SLOW, &[KEY_R]),
    e("zunionstore", WRITE | SORTEDSET | SLOW, &[KEY_W, KEY_R]),
    // DMC's own. CLIENT SETINFO is Redis 7.2's (DMC answers it): 7.2's categories.
    e("client|setinfo", SLOW | CONNECTION, &[]),
    // Commands between DMC processes: like Redis's REPLCONF and PSYNC, @admin.
    e("dmc.peer", ADMIN | SLOW | DANGEROUS, &[]),
    e("dmc.user", ADMIN | SLOW | DANGEROUS, &[]),
    e("dmc.warm", ADMIN | SLOW | DANGEROUS, &[]),
    e("dmc.tracking", ADMIN | SLOW | DANGEROUS, &[]),
    e("dmc.invalidate", ADMIN | SLOW | DANGEROUS, &[]),
    e("dmc.origin", ADMIN | SLOW | DANGEROUS, &[]),
    e("dmc.keep", ADMIN | SLOW | DANGEROUS, &[]),
];
