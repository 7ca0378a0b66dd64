//! Connection and server commands: PING, ECHO, HELLO, AUTH, SELECT, RESET, INFO,
//! CONFIG, COMMAND, TIME, DBSIZE (CLIENT is `client_cmd.rs`).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use dmc_dht::RedisPolicy;
use dmc_proto::ByteSize;
use dmc_resp::Reply;

use crate::docs;
use crate::glob::glob;
use crate::table::{self, Cmd, TABLE};
use crate::upper;
use crate::{Engine, NOT_INTEGER, Session, parse_i64, stats};

/// The Redis version reported to clients (they switch features on it).
pub const REDIS_VERSION: &str = "7.2.4";
pub const DMC_VERSION: &str = env!("CARGO_PKG_VERSION");

fn config_values(engine: &Engine) -> Vec<(&'static str, String)> {
    let dht = &engine.dht;
    vec![
        ("maxmemory", dht.maxmemory().to_string()),
        (
            "maxmemory-policy",
            dmc_dht::Policy::name(&dht.policy()).to_string(),
        ),
        ("maxmemory-samples", dht.samples().to_string()),
        (
            "adaptive-experts",
            dmc_dht::adaptive::experts_string(&dht.adaptive_experts()),
        ),
        ("databases", engine.config.databases.to_string()),
        ("port", engine.config.port.to_string()),
        ("save", String::new()),
        ("appendonly", "no".into()),
        (
            "enable-debug-command",
            engine.config.debug_command.name().into(),
        ),
        (
            "timeout",
            engine.timeout_secs.load(Ordering::Relaxed).to_string(),
        ),
        ("requirepass", engine.acl.requirepass()),
        (
            "busy-reply-threshold",
            engine.scripts.busy_ms.load(Ordering::Relaxed).to_string(),
        ),
        (
            "tracking-table-max-keys",
            engine.tracking.max_keys.load(Ordering::Relaxed).to_string(),
        ),
        (
            "notify-keyspace-events",
            crate::notify::format(engine.notifications.flags()),
        ),
        (
            "lua-time-limit",
            engine.scripts.busy_ms.load(Ordering::Relaxed).to_string(),
        ),
        (
            "lua-memory-limit",
            engine.scripts.states.memory_limit().to_string(),
        ),
    ]
    .into_iter()
    .chain(engine.limits.values())
    .chain(engine.slowlog.values())
    .collect()
}

fn hello_map(engine: &Engine, s: &Session) -> Reply {
    let _ = engine;
    Reply::Map(vec![
        (Reply::bulk("server"), Reply::bulk("redis")),
        (Reply::bulk("version"), Reply::bulk(REDIS_VERSION)),
        (Reply::bulk("proto"), Reply::Int(s.proto as i64)),
        (Reply::bulk("id"), Reply::Int(s.id as i64)),
        (Reply::bulk("mode"), Reply::bulk("standalone")),
        (Reply::bulk("role"), Reply::bulk("master")),
        (Reply::bulk("modules"), Reply::Array(Vec::new())),
    ])
}

pub async fn run(engine: &Engine, s: &mut Session, cmd: Cmd, args: &[Bytes]) -> Reply {
    match cmd {
        Cmd::Ping => match args.len() {
            1 => Reply::Simple("PONG"),
            2 => Reply::Bulk(args[1].clone()),
            _ => Reply::err("ERR wrong number of arguments for 'ping' command"),
        },
        Cmd::Echo => Reply::Bulk(args[1].clone()),
        Cmd::Hello => {
            let mut i = 1;
            if args.len() > 1 {
                match parse_i64(&args[1]) {
                    Some(v @ 2..=3) => s.proto = v as u8,
                    Some(_) => return Reply::err("NOPROTO unsupported protocol version"),
                    None => {
                        return Reply::err(
                            "ERR Protocol version is not an integer or out of range",
                        );
                    }
                }
                i = 2;
            }
            while i < args.len() {
                match upper(&args[i]).as_str() {
                    "AUTH" if i + 2 < args.len() => {
                        if let Err(r) = crate::acl_cmd::authenticate(
                            engine,
                            s,
                            &args[0],
                            Some(&args[i + 1]),
                            &args[i + 2],
                        ) {
                            return r;
                        }
                        i += 3;
                    }
                    "SETNAME" if i + 1 < args.len() => {
                        if let Err(r) = crate::client_cmd::check_name(&args[i + 1]) {
                            return r;
                        }
                        s.client.set_name(Some(args[i + 1].clone()));
                        i += 2;
                    }
                    _ => {
                        return Reply::Error(format!(
                            "ERR Syntax error in HELLO option '{}'",
                            String::from_utf8_lossy(&args[i])
                        ));
                    }
                }
            }
            if !s.authenticated {
                return Reply::err(
                    "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
                );
            }
            hello_map(engine, s)
        }
        Cmd::Auth => {
            let password = &args[args.len() - 1];
            if args.len() > 3 {
                return Reply::err(crate::SYNTAX);
            }
            let user = (args.len() == 3).then(|| &args[1][..]);
            match crate::acl_cmd::authenticate(engine, s, &args[0], user, password) {
                Ok(()) => Reply::ok(),
                Err(r) => r,
            }
        }
        Cmd::Select => match parse_i64(&args[1]) {
            Some(n) if (0..engine.config.databases as i64).contains(&n) => {
                s.db = n as u8;
                Reply::ok()
            }
            Some(_) => Reply::err("ERR DB index is out of range"),
            None => Reply::err(NOT_INTEGER),
        },
        Cmd::Reset => {
            s.db = 0;
            s.proto = 2;
            s.client.set_name(None);
            s.client.set_no_evict(false);
            s.reply_off = false;
            s.skip_replies = 0;
            s.tx.clear();
            engine.pubsub.remove_client(s.id);
            engine.forget_tracker(s.id);
            s.tracking = None;
            s.subscribed = false;
            s.monitoring = false;
            let (user, generation, open) = crate::acl_cmd::initial(engine);
            s.client.set_user(user.name());
            s.user = user;
            s.acl_generation = generation;
            s.authenticated = open;
            Reply::Simple("RESET")
        }
        Cmd::Client => crate::client_cmd::client(engine, s, args),
        Cmd::Info => {
            let sections: Vec<String> = args[1..].iter().map(|a| upper(a)).collect();
            Reply::Verbatim(Bytes::from(info(engine, &sections)))
        }
        Cmd::Config => config(engine, args),
        Cmd::Command => command(args),
        Cmd::Slowlog => engine.slowlog.slowlog_command(args),
        Cmd::Monitor => crate::monitor::start(engine, s),
        Cmd::Wait => crate::durability::wait(engine, args).await,
        Cmd::LastSave => crate::durability::lastsave(engine),
        Cmd::Acl => crate::acl_cmd::run(engine, s, args),
        Cmd::Debug => crate::debug::run(engine, s, args).await,
        Cmd::Latency => engine.slowlog.latency_command(args),
        Cmd::Time => {
            let us = engine.now_ms() * 1000;
            Reply::Array(vec![
                Reply::bulk((us / 1_000_000).to_string()),
                Reply::bulk((us % 1_000_000).to_string()),
            ])
        }
        Cmd::Dbsize => Reply::Int(engine.dht.key_count_db(engine.physical_db(s.db))),
        _ => Reply::err("ERR command not in the server family"),
    }
}

fn config(engine: &Engine, args: &[Bytes]) -> Reply {
    let sub = upper(&args[1]);
    match sub.as_str() {
        "GET" if args.len() >= 3 => {
            let mut pairs = Vec::new();
            for (name, value) in config_values(engine) {
                if args[2..].iter().any(|p| glob(p, name.as_bytes(), true)) {
                    pairs.push((Reply::bulk(name), Reply::bulk(value)));
                }
            }
            Reply::Map(pairs)
        }
        "SET" if args.len() >= 4 && args.len().is_multiple_of(2) => {
            for kv in args[2..].chunks(2) {
                let name = String::from_utf8_lossy(&kv[0]).to_ascii_lowercase();
                let value = String::from_utf8_lossy(&kv[1]).into_owned();
                let bad = || {
                    Reply::Error(format!(
                        "ERR CONFIG SET failed (possibly related to argument '{name}') - argument couldn't be parsed"
                    ))
                };
                match name.as_str() {
                    "maxmemory" => match value.parse::<ByteSize>() {
                        Ok(v) => engine.dht.set_maxmemory(v.0),
                        Err(_) => return bad(),
                    },
                    "maxmemory-policy" => match RedisPolicy::parse(&value) {
                        Some(p) => engine.dht.set_policy(p),
                        None => return bad(),
                    },
                    "maxmemory-samples" => match value.parse::<usize>() {
                        Ok(v) if v > 0 && v <= 64 => engine.dht.set_samples(v),
                        _ => return bad(),
                    },
                    "adaptive-experts" => match dmc_dht::adaptive::parse_experts(&value) {
                        Ok(v) => engine.dht.set_adaptive_experts(v),
                        Err(_) => return bad(),
                    },
                    // Durability is the memory nodes' replication; there is nothing to
                    // snapshot or append to, and saying yes to either would be a lie.
                    "save" if value.trim().is_empty() => {}
                    "appendonly" if value.eq_ignore_ascii_case("no") => {}
                    "enable-debug-command" => {
                        return Reply::Error(format!(
                            "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config"
                        ));
                    }
                    "save" | "appendonly" => {
                        return Reply::Error(format!(
                            "ERR CONFIG SET failed (possibly related to argument '{name}') - DMC keeps data in replicated memory nodes and has no RDB or AOF persistence"
                        ));
                    }
                    "timeout" => match value.parse::<u64>() {
                        Ok(v) => engine.timeout_secs.store(v, Ordering::Relaxed),
                        Err(_) => return bad(),
                    },
                    "requirepass" => engine.acl.set_requirepass(&kv[1]),
                    "tracking-table-max-keys" => match value.parse::<u64>() {
                        Ok(v) => engine.tracking.max_keys.store(v, Ordering::Relaxed),
                        Err(_) => return bad(),
                    },
                    "notify-keyspace-events" => match crate::notify::parse(&value) {
                        Some(flags) => engine.notifications.set(flags),
                        None => {
                            return Reply::Error(format!(
                                "ERR CONFIG SET failed (possibly related to argument '{name}') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'."
                            ));
                        }
                    },
                    "busy-reply-threshold" | "lua-time-limit" => match value.parse::<u64>() {
                        Ok(v) => engine.scripts.busy_ms.store(v, Ordering::Relaxed),
                        Err(_) => return bad(),
                    },
                    "lua-memory-limit" => {
                        let set = value
                            .parse::<dmc_proto::ByteSize>()
                            .map_err(|e| e.to_string())
                            .and_then(|b| {
                                let bytes = usize::try_from(b.0).map_err(|e| e.to_string())?;
                                engine.scripts.states.set_memory_limit(bytes)
                            });
                        if let Err(e) = set {
                            return Reply::Error(format!(
                                "ERR CONFIG SET failed (possibly related to argument '{name}') - {e}"
                            ));
                        }
                    }
                    other => match engine
                        .limits
                        .set(other, &value)
                        .and_then(|done| match done {
                            true => Ok(true),
                            false => engine.slowlog.set(other, &value),
                        }) {
                        Ok(true) => {}
                        Ok(false) => {
                            return Reply::Error(format!(
                                "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                            ));
                        }
                        Err(why) => {
                            return Reply::Error(format!(
                                "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                            ));
                        }
                    },
                }
            }
            Reply::ok()
        }
        "RESETSTAT" if args.len() == 2 => {
            engine.stats.reset();
            Reply::ok()
        }
        _ => crate::subcommands::refused("CONFIG", &args[1], &["GET", "SET", "RESETSTAT"]),
    }
}

fn command(args: &[Bytes]) -> Reply {
    let sub = args.get(1).map(|a| upper(a));
    match sub.as_deref() {
        None => Reply::Array(TABLE.iter().map(docs::info_row).collect()),
        Some("COUNT") => Reply::Int(TABLE.len() as i64),
        Some("INFO") => Reply::Array(
            args[2..]
                .iter()
                .map(|n| {
                    table::lookup(n)
                        .map(docs::info_row)
                        .unwrap_or(Reply::NullArray)
                })
                .collect(),
        ),
        Some("LIST") => Reply::Array(TABLE.iter().map(|s| Reply::bulk(s.name)).collect()),
        Some("GETKEYS") if args.len() >= 4 => {
            let cmd = &args[2..];
            let Some(spec) = table::lookup(&cmd[0]) else {
                return Reply::err("ERR Invalid command specified");
            };
            if !spec.arity_ok(cmd.len()) {
                return Reply::err("ERR Invalid number of arguments specified for command");
            }
            // A key count past the arguments names no key (Redis answers an empty list).
            let counted = usize::try_from(spec.numkeys).ok().filter(|&at| at > 0);
            if let Some(at) = counted
                && cmd
                    .get(at)
                    .and_then(|n| crate::parse_i64(n))
                    .is_some_and(|n| n < 0 || at as i64 + 1 + n > cmd.len() as i64)
            {
                return Reply::Array(Vec::new());
            }
            let keys = spec.key_positions(cmd);
            if keys.is_empty() && counted.is_none() {
                return Reply::err("ERR The command has no key arguments");
            }
            Reply::Array(
                keys.iter()
                    .filter_map(|&i| cmd.get(i))
                    .cloned()
                    .map(Reply::Bulk)
                    .collect(),
            )
        }
        Some("GETKEYS") => {
            Reply::err("ERR wrong number of arguments for 'command|getkeys' command")
        }
        // Every command, or the named ones that exist.
        Some("DOCS") if args.len() == 2 => Reply::Map(TABLE.iter().map(docs::entry).collect()),
        Some("DOCS") => Reply::Map(
            args[2..]
                .iter()
                .filter_map(|n| table::lookup(n))
                .map(docs::entry)
                .collect(),
        ),
        Some(other) => Reply::Error(format!(
            "ERR unknown subcommand '{other}'. Try COMMAND HELP."
        )),
    }
}

/// `INFO [section [section ...]]` (uppercase names; none: the default sections), with
/// Redis's field names.
pub fn info(engine: &Engine, sections: &[String]) -> String {
    let want = |name: &str| {
        sections.is_empty()
            || sections.iter().any(|s| {
                matches!(s.as_str(), "ALL" | "DEFAULT" | "EVERYTHING")
                    || s.eq_ignore_ascii_case(name)
            })
    };
    let dht = engine.dht.stats();
    let pubsub = engine.pubsub.totals();
    let pool = engine.dht.pool_stats();
    let st = &engine.stats;
    st.note_memory(dht.used_memory);
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed).to_string();
    let mut sections: Vec<(&str, Vec<(&str, String)>)> = Vec::new();
    if want("server") {
        let now_us = engine.now_ms() * 1000;
        sections.push((
            "Server",
            vec![
                ("redis_version", REDIS_VERSION.into()),
                ("dmc_version", DMC_VERSION.into()),
                ("redis_git_sha1", "00000000".into()),
                ("redis_git_dirty", "0".into()),
                ("redis_build_id", "0".into()),
                ("redis_mode", "standalone".into()),
                ("os", os_name()),
                ("arch_bits", (usize::BITS).to_string()),
                ("monotonic_clock", "POSIX clock_gettime".into()),
                ("multiplexing_api", "epoll".into()),
                ("atomicvar_api", "c11-builtin".into()),
                ("gcc_version", "0.0.0".into()),
                ("process_id", std::process::id().to_string()),
                ("process_supervised", "no".into()),
                ("run_id", engine.run_id.clone()),
                ("tcp_port", engine.config.port.to_string()),
                ("server_time_usec", now_us.to_string()),
                ("uptime_in_seconds", engine.uptime_secs().to_string()),
                ("uptime_in_days", (engine.uptime_secs() / 86400).to_string()),
                ("hz", "10".into()),
                ("configured_hz", "10".into()),
                (
                    "lru_clock",
                    ((now_us / 1_000_000) & ((1 << 24) - 1)).to_string(),
                ),
                (
                    "executable",
                    std::env::current_exe()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                ),
                ("io_threads_active", "0".into()),
            ],
        ));
    }
    if want("clients") {
        sections.push((
            "Clients",
            vec![
                ("connected_clients", n(&st.connected_clients)),
                ("cluster_connections", n(&st.peer_connections)),
                ("maxclients", engine.limits.maxclients().to_string()),
                ("client_recent_max_input_buffer", "0".into()),
                ("client_recent_max_output_buffer", "0".into()),
                (
                    "blocked_clients",
                    engine.blocking.blocked_clients().to_string(),
                ),
                ("tracking_clients", engine.tracking.clients().to_string()),
                ("clients_in_timeout_table", "0".into()),
            ],
        ));
    }
    if want("memory") {
        let used = dht.used_memory;
        let rss = stats::rss_bytes();
        let system = stats::system_memory_bytes();
        let peak = st.used_memory_peak.load(Ordering::Relaxed);
        let maxmemory = engine.dht.maxmemory();
        let adaptive = engine.dht.adaptive_status();
        let weights: Vec<String> = adaptive
            .weights
            .iter()
            .map(|(name, w)| format!("{name}={w:.4}"))
            .collect();
        let mut rows = vec![
            ("used_memory", used.to_string()),
            ("used_memory_human", stats::human(used)),
            ("used_memory_rss", rss.to_string()),
            ("used_memory_rss_human", stats::human(rss)),
            ("used_memory_peak", peak.to_string()),
            ("used_memory_peak_human", stats::human(peak)),
            ("used_memory_dataset", used.to_string()),
            ("total_system_memory", system.to_string()),
            ("total_system_memory_human", stats::human(system)),
            ("maxmemory", maxmemory.to_string()),
            ("maxmemory_human", stats::human(maxmemory)),
            (
                "maxmemory_policy",
                dmc_dht::Policy::name(&engine.dht.policy()).into(),
            ),
            ("adaptive_weights", weights.join(",")),
            ("adaptive_regrets", adaptive.regrets.to_string()),
            ("adaptive_history", adaptive.history.to_string()),
            (
                "mem_fragmentation_ratio",
                format!("{:.2}", rss as f64 / used.max(1) as f64),
            ),
            ("mem_allocator", "libc".into()),
            (
                "used_memory_lua",
                engine.scripts.states.idle_memory().to_string(),
            ),
            (
                "used_memory_lua_human",
                stats::human(engine.scripts.states.idle_memory() as u64),
            ),
            (
                "lua_memory_limit",
                engine.scripts.states.memory_limit().to_string(),
            ),
            (
                "number_of_cached_scripts",
                engine.scripts.counts().0.to_string(),
            ),
            ("pool_regions", pool.regions.to_string()),
            ("pool_region_size", pool.region_size.to_string()),
            // Hash slots sharing one partition of the index (small instances group
            // them so the index grows with the keys).
            (
                "table_slot_group",
                (1u32 << engine.dht.slot_group_bits()).to_string(),
            ),
            ("pool_allocated", pool.alloc.allocated.to_string()),
        ];
        if let Some(c) = &engine.cache {
            let c = c.stats();
            rows.extend([
                ("local_cache_keys", c.keys.to_string()),
                ("local_cache_bytes", c.bytes.to_string()),
                ("local_cache_hits", c.hits.to_string()),
                ("local_cache_misses", c.misses.to_string()),
                ("local_cache_rejected", c.rejected.to_string()),
                ("local_cache_warm_keys", c.warm.to_string()),
            ]);
        }
        sections.push(("Memory", rows));
    }
    if want("persistence") {
        let started = engine.now_ms() / 1000 - engine.uptime_secs();
        sections.push((
            "Persistence",
            vec![
                ("loading", "0".into()),
                ("async_loading", "0".into()),
                ("rdb_changes_since_last_save", "0".into()),
                ("rdb_bgsave_in_progress", "0".into()),
                ("rdb_last_save_time", started.to_string()),
                ("rdb_last_bgsave_status", "ok".into()),
                ("aof_enabled", "0".into()),
                ("aof_rewrite_in_progress", "0".into()),
                ("aof_last_bgrewrite_status", "ok".into()),
            ],
        ));
    }
    if want("stats") {
        let rates = st.rates();
        sections.push((
            "Stats",
            vec![
                ("total_connections_received", n(&st.connections_received)),
                ("total_commands_processed", n(&st.commands)),
                ("instantaneous_ops_per_sec", rates.ops_per_sec.to_string()),
                ("total_net_input_bytes", n(&st.net_input_bytes)),
                ("total_net_output_bytes", n(&st.net_output_bytes)),
                (
                    "instantaneous_input_kbps",
                    format!("{:.2}", rates.input_kbps),
                ),
                (
                    "instantaneous_output_kbps",
                    format!("{:.2}", rates.output_kbps),
                ),
                ("rejected_connections", n(&st.rejected_connections)),
                ("expired_keys", dht.expired.to_string()),
                ("evicted_scripts", engine.scripts.counts().1.to_string()),
                ("evicted_keys", dht.evicted.to_string()),
                ("keyspace_hits", dht.hits.to_string()),
                ("keyspace_misses", dht.misses.to_string()),
                ("pubsub_channels", pubsub.0.to_string()),
                ("pubsub_patterns", pubsub.1.to_string()),
                ("pubsubshard_channels", pubsub.2.to_string()),
                (
                    "tracking_total_keys",
                    engine.tracking.table_keys().to_string(),
                ),
                ("tracking_invalidations_sent", n(&engine.tracking.sent)),
                ("dmc_relay_dropped", n(&engine.relay.dropped)),
                ("total_error_replies", n(&st.error_replies)),
                ("total_reads_processed", n(&st.reads_processed)),
                ("total_writes_processed", n(&st.writes_processed)),
            ],
        ));
    }
    if want("replication") {
        sections.push((
            "Replication",
            vec![
                ("role", "master".into()),
                ("connected_slaves", "0".into()),
                ("master_failover_state", "no-failover".into()),
                ("master_replid", engine.run_id.clone()),
                ("master_repl_offset", "0".into()),
                ("repl_backlog_active", "0".into()),
            ],
        ));
    }
    if want("cpu") {
        let [sys, user, csys, cuser] = stats::cpu_seconds();
        sections.push((
            "CPU",
            vec![
                ("used_cpu_sys", format!("{sys:.6}")),
                ("used_cpu_user", format!("{user:.6}")),
                ("used_cpu_sys_children", format!("{csys:.6}")),
                ("used_cpu_user_children", format!("{cuser:.6}")),
            ],
        ));
    }
    if want("cluster") {
        let enabled = if engine.config.cluster_enabled {
            "1"
        } else {
            "0"
        };
        let pool = engine.dht.pool_stats();
        // This process's traffic to the pool: posts (doorbells), one-sided verbs and
        // their bytes, and RPCs with their bytes on the wire.
        let traffic = dmc_verbs::stats::traffic();
        let verbs = traffic.total();
        sections.push((
            "Cluster",
            vec![
                ("cluster_enabled", enabled.into()),
                ("dmc_instance", engine.config.instance.clone()),
                ("dmc_agent_id", n(&st.agent_id)),
                ("dmc_map_version", n(&st.map_version)),
                ("dmc_owned_slots", n(&st.owned_slots)),
                ("dmc_forwarded_commands", n(&st.forwarded_commands)),
                ("dmc_combined_changes", n(&st.combined_changes)),
                ("dmc_combined_batches", n(&st.combined_batches)),
                ("dmc_moved_replies", n(&st.moved_replies)),
                ("dmc_pool_nodes", n(&st.pool_nodes)),
                ("dmc_pool_connections", n(&st.pool_connections)),
                ("dmc_pool_frozen_waits", pool.frozen_waits.to_string()),
                (
                    "dmc_pool_failover_retries",
                    pool.failover_retries.to_string(),
                ),
                ("dmc_pool_lease_refusals", pool.lease_refusals.to_string()),
                ("dmc_pool_posts", verbs.posts.to_string()),
                ("dmc_pool_verbs", verbs.verbs().to_string()),
                ("dmc_pool_verbs_read", verbs.reads.to_string()),
                ("dmc_pool_verbs_write", verbs.writes.to_string()),
                ("dmc_pool_verbs_cas", verbs.cas.to_string()),
                ("dmc_pool_verbs_faa", verbs.faa.to_string()),
                ("dmc_pool_verb_bytes", verbs.bytes.to_string()),
                ("dmc_pool_rpcs", traffic.rpcs.to_string()),
                (
                    "dmc_pool_rpc_bytes_sent",
                    traffic.rpc_bytes_sent.to_string(),
                ),
                (
                    "dmc_pool_rpc_bytes_received",
                    traffic.rpc_bytes_received.to_string(),
                ),
                ("dmc_warm_fed", n(&st.warm_fed)),
                ("dmc_warm_feed_dropped", n(&st.warm_feed_dropped)),
                ("dmc_warm_confirmed", n(&st.warm_confirmed)),
                ("dmc_warm_stale", n(&st.warm_stale)),
            ],
        ));
    }
    let mut out = String::new();
    for (name, rows) in sections {
        let _ = write!(out, "# {name}\r\n");
        for (k, v) in rows {
            let _ = write!(out, "{k}:{v}\r\n");
        }
        out.push_str("\r\n");
    }
    if want("keyspace") {
        out.push_str("# Keyspace\r\n");
        for db in 0..engine.config.databases {
            let stored = engine.physical_db(db);
            let keys = engine.dht.key_count_db(stored);
            if keys > 0 {
                let expires = engine.dht.volatile_count_db(stored);
                let _ = write!(out, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
            }
        }
    }
    out
}

/// `Linux 6.1.0 x86_64`, as Redis prints `os`.
fn os_name() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{} {} {}",
        if cfg!(target_os = "linux") {
            "Linux"
        } else {
            std::env::consts::OS
        },
        release.trim(),
        std::env::consts::ARCH
    )
}
