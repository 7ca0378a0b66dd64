//! `COMMAND INFO` rows and `COMMAND DOCS`: each command's summary, group, first Redis version and complexity,
//! as Redis 7 reports them (redis-cli builds its interactive help from this). The match
//! is exhaustive, so a new command does not compile without its documentation.

use dmc_resp::Reply;

mod collections;
mod data_model;

use crate::table::{Cmd, Spec};

/// (summary, group, since, complexity)
pub fn doc(cmd: Cmd) -> (&'static str, &'static str, &'static str, &'static str) {
    use Cmd::*;
    const O1: &str = "O(1)";
    const ON: &str = "O(N) where N is the number of keys";
    match cmd {
        Hash(h) => collections::hash_doc(h),
        List(l) => collections::list_doc(l),
        Sets(c) => collections::set_doc(c),
        ZSet(z) => collections::zset_doc(z),
        Bit(b) => data_model::bit_doc(b),
        Hll(h) => data_model::hll_doc(h),
        Geo(g) => data_model::geo_doc(g),
        Stream(c) => data_model::stream_doc(c),
        Sort => data_model::sort_doc(false),
        SortRo => data_model::sort_doc(true),
        Dump => data_model::dump_doc(false),
        Restore => data_model::dump_doc(true),
        Ping => (
            "Returns the server's liveliness response.",
            "connection",
            "1.0.0",
            O1,
        ),
        Echo => ("Returns the given string.", "connection", "1.0.0", O1),
        Hello => (
            "Handshakes with the Redis server.",
            "connection",
            "6.0.0",
            O1,
        ),
        Auth => ("Authenticates the connection.", "connection", "1.0.0", O1),
        Select => ("Changes the selected database.", "connection", "1.0.0", O1),
        Quit => ("Closes the connection.", "connection", "1.0.0", O1),
        Reset => ("Resets the connection.", "connection", "6.2.0", O1),
        Client => (
            "A container for client connection commands.",
            "connection",
            "2.4.0",
            "Depends on subcommand.",
        ),
        Info => (
            "Returns information and statistics about the server.",
            "server",
            "1.0.0",
            O1,
        ),
        Config => (
            "A container for server configuration commands.",
            "server",
            "2.0.0",
            "Depends on subcommand.",
        ),
        Command => (
            "Returns detailed information about all commands.",
            "server",
            "2.8.13",
            "O(N) where N is the total number of Redis commands",
        ),
        Time => ("Returns the server time.", "server", "2.6.0", O1),
        Dbsize => (
            "Returns the number of keys in the database.",
            "server",
            "1.0.0",
            O1,
        ),
        Memory => (
            "A container for memory diagnostics commands.",
            "server",
            "4.0.0",
            "Depends on subcommand.",
        ),
        Cluster => (
            "A container for Redis Cluster commands.",
            "cluster",
            "3.0.0",
            "Depends on subcommand.",
        ),
        ReadOnly => (
            "Enables read-only queries for a connection to a Redis Cluster replica node.",
            "cluster",
            "3.0.0",
            O1,
        ),
        ReadWrite => (
            "Enables read-write queries for a connection to a Reids Cluster replica node.",
            "cluster",
            "3.0.0",
            O1,
        ),
        Asking => (
            "Signals that a cluster client is following an -ASK redirect.",
            "cluster",
            "3.0.0",
            O1,
        ),
        Multi => ("Starts a transaction.", "transactions", "1.2.0", O1),
        Exec => (
            "Executes all commands in a transaction.",
            "transactions",
            "1.2.0",
            "Depends on commands in the transaction",
        ),
        Discard => (
            "Discards a transaction.",
            "transactions",
            "2.0.0",
            "O(N), when N is the number of queued commands",
        ),
        Watch => (
            "Monitors changes to keys to determine the execution of a transaction.",
            "transactions",
            "2.2.0",
            "O(1) for every key.",
        ),
        Unwatch => (
            "Forgets about watched keys of a transaction.",
            "transactions",
            "2.2.0",
            O1,
        ),
        Eval => (
            "Executes a server-side Lua script.",
            "scripting",
            "2.6.0",
            "Depends on the script that is executed.",
        ),
        EvalSha => (
            "Executes a server-side Lua script by SHA1 digest.",
            "scripting",
            "2.6.0",
            "Depends on the script that is executed.",
        ),
        EvalRo => (
            "Executes a read-only server-side Lua script.",
            "scripting",
            "7.0.0",
            "Depends on the script that is executed.",
        ),
        EvalShaRo => (
            "Executes a read-only server-side Lua script by SHA1 digest.",
            "scripting",
            "7.0.0",
            "Depends on the script that is executed.",
        ),
        Script => (
            "A container for Lua scripts management commands.",
            "scripting",
            "2.6.0",
            "Depends on subcommand.",
        ),
        Slowlog => (
            "A container for slow log commands.",
            "server",
            "2.2.12",
            "Depends on subcommand.",
        ),
        Monitor => (
            "Listens for all requests received by the server in real-time.",
            "server",
            "1.0.0",
            "",
        ),
        Debug => (
            "A container for debugging commands.",
            "server",
            "1.0.0",
            "Depends on subcommand.",
        ),
        Wait => (
            "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed.",
            "generic",
            "3.0.0",
            O1,
        ),
        FCall => (
            "Invokes a function.",
            "scripting",
            "7.0.0",
            "Depends on the function that is executed.",
        ),
        FCallRo => (
            "Invokes a read-only function.",
            "scripting",
            "7.0.0",
            "Depends on the function that is executed.",
        ),
        Function => (
            "A container for function commands.",
            "scripting",
            "7.0.0",
            "Depends on subcommand.",
        ),
        Acl => (
            "A container for Access List Control commands.",
            "server",
            "6.0.0",
            "Depends on subcommand.",
        ),
        LastSave => (
            "Returns the Unix timestamp of the last successful save to disk.",
            "server",
            "1.0.0",
            O1,
        ),
        Latency => (
            "A container for latency diagnostics commands.",
            "server",
            "2.8.13",
            "Depends on subcommand.",
        ),
        Subscribe => (
            "Listens for messages published to channels.",
            "pubsub",
            "2.0.0",
            "O(N) where N is the number of channels to subscribe to.",
        ),
        Unsubscribe => (
            "Stops listening to messages posted to channels.",
            "pubsub",
            "2.0.0",
            "O(N) where N is the number of channels to unsubscribe.",
        ),
        PSubscribe => (
            "Listens for messages published to channels that match one or more patterns.",
            "pubsub",
            "2.0.0",
            "O(N) where N is the number of patterns to subscribe to.",
        ),
        PUnsubscribe => (
            "Stops listening to messages published to channels that match one or more patterns.",
            "pubsub",
            "2.0.0",
            "O(N) where N is the number of patterns to unsubscribe.",
        ),
        SSubscribe => (
            "Listens for messages published to shard channels.",
            "pubsub",
            "7.0.0",
            "O(N) where N is the number of shard channels to subscribe to.",
        ),
        SUnsubscribe => (
            "Stops listening to messages posted to shard channels.",
            "pubsub",
            "7.0.0",
            "O(N) where N is the number of shard channels to unsubscribe.",
        ),
        Publish => (
            "Posts a message to a channel.",
            "pubsub",
            "2.0.0",
            "O(N+M) where N is the number of clients subscribed to the receiving channel and M is the total number of subscribed patterns (by any client).",
        ),
        SPublish => (
            "Post a message to a shard channel",
            "pubsub",
            "7.0.0",
            "O(N) where N is the number of clients subscribed to the receiving shard channel.",
        ),
        PubSub => (
            "A container for Pub/Sub commands.",
            "pubsub",
            "2.8.0",
            "Depends on subcommand.",
        ),
        DmcPeer => (
            "Marks a connection as another DMC agent forwarding writes (internal).",
            "connection",
            "0.1.0",
            O1,
        ),
        DmcUser => (
            "The user a peer connection's next commands run as, checked as that user (internal).",
            "connection",
            "0.1.0",
            O1,
        ),
        DmcWarm => (
            "A primary's cache update for an agent backing up its shard (internal).",
            "connection",
            "0.1.0",
            O1,
        ),
        DmcTracking => (
            "Announces an agent with CLIENT TRACKING clients (internal).",
            "connection",
            "0.1.0",
            O1,
        ),
        DmcInvalidate => (
            "A key changed on another agent, for this agent's tracking clients (internal).",
            "connection",
            "0.1.0",
            O1,
        ),
        DmcKeep => (
            "The instance's libraries or loaded scripts from the agent that changed them (internal).",
            "connection",
            "0.1.0",
            O1,
        ),
        DmcOrigin => (
            "Names the NOLOOP tracker a forwarded command is for (internal).",
            "connection",
            "0.1.0",
            O1,
        ),
        Object => (
            "A container for object introspection commands.",
            "generic",
            "2.2.3",
            "Depends on subcommand.",
        ),
        Get => ("Returns the string value of a key.", "string", "1.0.0", O1),
        Set => (
            "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.",
            "string",
            "1.0.0",
            O1,
        ),
        SetNx => (
            "Set the string value of a key only when the key doesn't exist.",
            "string",
            "1.0.0",
            O1,
        ),
        SetEx => (
            "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.",
            "string",
            "2.0.0",
            O1,
        ),
        PSetEx => (
            "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.",
            "string",
            "2.6.0",
            O1,
        ),
        GetDel => (
            "Returns the string value of a key after deleting the key.",
            "string",
            "6.2.0",
            O1,
        ),
        GetEx => (
            "Returns the string value of a key after setting its expiration time.",
            "string",
            "6.2.0",
            O1,
        ),
        GetSet => (
            "Returns the previous string value of a key after setting it to a new value.",
            "string",
            "1.0.0",
            O1,
        ),
        MGet => (
            "Atomically returns the string values of one or more keys.",
            "string",
            "1.0.0",
            "O(N) where N is the number of keys to retrieve.",
        ),
        MSet => (
            "Atomically creates or modifies the string values of one or more keys.",
            "string",
            "1.0.1",
            "O(N) where N is the number of keys to set.",
        ),
        MSetNx => (
            "Atomically modifies the string values of one or more keys only when all keys don't exist.",
            "string",
            "1.0.1",
            "O(N) where N is the number of keys to set.",
        ),
        Incr => (
            "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.",
            "string",
            "1.0.0",
            O1,
        ),
        Decr => (
            "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.",
            "string",
            "1.0.0",
            O1,
        ),
        IncrBy => (
            "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.",
            "string",
            "1.0.0",
            O1,
        ),
        DecrBy => (
            "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.",
            "string",
            "1.0.0",
            O1,
        ),
        IncrByFloat => (
            "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist.",
            "string",
            "2.6.0",
            O1,
        ),
        Append => (
            "Appends a string to the value of a key. Creates the key if it doesn't exist.",
            "string",
            "2.0.0",
            O1,
        ),
        Strlen => (
            "Returns the length of a string value.",
            "string",
            "2.2.0",
            O1,
        ),
        GetRange => (
            "Returns a substring of the string stored at a key.",
            "string",
            "2.4.0",
            "O(N) where N is the length of the returned string.",
        ),
        SetRange => (
            "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.",
            "string",
            "2.2.0",
            O1,
        ),
        Lcs => (
            "Finds the longest common substring.",
            "string",
            "7.0.0",
            "O(N*M) where N and M are the lengths of s1 and s2, respectively",
        ),
        Del => ("Deletes one or more keys.", "generic", "1.0.0", ON),
        Unlink => (
            "Asynchronously deletes one or more keys.",
            "generic",
            "4.0.0",
            ON,
        ),
        Exists => (
            "Determines whether one or more keys exist.",
            "generic",
            "1.0.0",
            ON,
        ),
        Type => (
            "Determines the type of value stored at a key.",
            "generic",
            "1.0.0",
            O1,
        ),
        Expire => (
            "Sets the expiration time of a key in seconds.",
            "generic",
            "1.0.0",
            O1,
        ),
        PExpire => (
            "Sets the expiration time of a key in milliseconds.",
            "generic",
            "2.6.0",
            O1,
        ),
        ExpireAt => (
            "Sets the expiration time of a key to a Unix timestamp.",
            "generic",
            "1.2.0",
            O1,
        ),
        PExpireAt => (
            "Sets the expiration time of a key to a Unix milliseconds timestamp.",
            "generic",
            "2.6.0",
            O1,
        ),
        Ttl => (
            "Returns the expiration time in seconds of a key.",
            "generic",
            "1.0.0",
            O1,
        ),
        PTtl => (
            "Returns the expiration time in milliseconds of a key.",
            "generic",
            "2.6.0",
            O1,
        ),
        ExpireTime => (
            "Returns the expiration time of a key as a Unix timestamp.",
            "generic",
            "7.0.0",
            O1,
        ),
        PExpireTime => (
            "Returns the expiration time of a key as a Unix milliseconds timestamp.",
            "generic",
            "7.0.0",
            O1,
        ),
        Persist => (
            "Removes the expiration time of a key.",
            "generic",
            "2.2.0",
            O1,
        ),
        Touch => (
            "Returns the number of existing keys out of those specified after updating the time they were last accessed.",
            "generic",
            "3.2.1",
            ON,
        ),
        Scan => (
            "Iterates over the key names in the database.",
            "generic",
            "2.8.0",
            "O(1) for every call. O(N) for a complete iteration.",
        ),
        Keys => (
            "Returns all key names that match a pattern.",
            "generic",
            "1.0.0",
            "O(N) with N being the number of keys in the database",
        ),
        RandomKey => (
            "Returns a random key name from the database.",
            "generic",
            "1.0.0",
            O1,
        ),
        FlushDb => (
            "Removes all keys from the current database.",
            "server",
            "1.0.0",
            "O(N) where N is the number of keys in the selected database",
        ),
        FlushAll => (
            "Removes all keys from all databases.",
            "server",
            "1.0.0",
            "O(N) where N is the total number of keys in all databases",
        ),
        Rename => (
            "Renames a key and overwrites the destination.",
            "generic",
            "1.0.0",
            O1,
        ),
        RenameNx => (
            "Renames a key only when the target key name doesn't exist.",
            "generic",
            "1.0.0",
            O1,
        ),
        Copy => (
            "Copies the value of a key to a new key.",
            "generic",
            "6.2.0",
            "O(N) worst case for collections, where N is the number of nested items. O(1) for string values.",
        ),
        Move => ("Moves a key to another database.", "generic", "1.0.0", O1),
        SwapDb => (
            "Swaps two Redis databases.",
            "server",
            "4.0.0",
            "O(1): DMC swaps two entries of its database map",
        ),
    }
}

/// One command's `COMMAND DOCS` entry (name, then its map).
pub fn entry(spec: &Spec) -> (Reply, Reply) {
    let (summary, group, since, complexity) = doc(spec.cmd);
    (
        Reply::bulk(spec.name),
        Reply::Map(vec![
            (Reply::bulk("summary"), Reply::bulk(summary)),
            (Reply::bulk("since"), Reply::bulk(since)),
            (Reply::bulk("group"), Reply::bulk(group)),
            (Reply::bulk("complexity"), Reply::bulk(complexity)),
        ]),
    )
}

/// `COMMAND INFO` row of a spec.
pub fn info_row(spec: &Spec) -> Reply {
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
