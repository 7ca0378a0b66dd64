//! Server commands redis-py's own suite found missing or partial, as redis-server 7.0
//! answers them: COMMAND GETKEYS, SUBSTR (GETRANGE's old name), INFO with several
//! sections.

mod support;

use dmc_resp::Reply;
use support::{Backend, engine, run};

fn bulks(items: &[&str]) -> Reply {
    Reply::Array(items.iter().map(|s| Reply::bulk(s.to_string())).collect())
}

#[tokio::test]
async fn command_getkeys_names_the_keys_as_redis_does() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    let cases: &[(&[&str], Reply)] = &[
        (
            &["COMMAND", "GETKEYS", "MSET", "a", "b", "c", "d"],
            bulks(&["a", "c"]),
        ),
        (
            &["COMMAND", "GETKEYS", "EVAL", "x", "1", "a", "b"],
            bulks(&["a"]),
        ),
        // A key count past the arguments names no key.
        (&["COMMAND", "GETKEYS", "EVAL", "x", "5", "a"], bulks(&[])),
        (
            &[
                "COMMAND",
                "GETKEYS",
                "ZUNIONSTORE",
                "d",
                "2",
                "a",
                "b",
                "WEIGHTS",
                "1",
                "2",
            ],
            bulks(&["d", "a", "b"]),
        ),
        (
            &["COMMAND", "GETKEYS", "GET", "a", "b"],
            Reply::err("ERR Invalid number of arguments specified for command"),
        ),
        (
            &["COMMAND", "GETKEYS", "PING", "x"],
            Reply::err("ERR The command has no key arguments"),
        ),
        (
            &["COMMAND", "GETKEYS", "NOPE", "a"],
            Reply::err("ERR Invalid command specified"),
        ),
        (
            &["COMMAND", "GETKEYS", "GET"],
            Reply::err("ERR wrong number of arguments for 'command|getkeys' command"),
        ),
    ];
    for (cmd, want) in cases {
        assert_eq!(&run(&engine, &mut s, cmd).await, want, "{cmd:?}");
    }
}

#[tokio::test]
async fn substr_is_getrange() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    run(&engine, &mut s, &["SET", "a", "0123456789"]).await;
    assert_eq!(
        run(&engine, &mut s, &["SUBSTR", "a", "3", "-2"]).await,
        Reply::bulk("345678")
    );
    assert_eq!(
        run(&engine, &mut s, &["SUBSTR", "a", "3"]).await,
        Reply::err("ERR wrong number of arguments for 'substr' command")
    );
}

#[tokio::test]
async fn info_answers_every_section_asked_for() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    let Reply::Verbatim(text) = run(&engine, &mut s, &["INFO", "clients", "server"]).await else {
        panic!("INFO answers a verbatim string");
    };
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.contains("# Server") && text.contains("redis_version:"),
        "{text}"
    );
    assert!(
        text.contains("# Clients") && text.contains("connected_clients:"),
        "{text}"
    );
    assert!(!text.contains("# Memory"), "{text}");
}

/// WAIT answers the pool's backup copies of every acknowledged write (replication to the
/// memory nodes is synchronous); asking for more waits out the timeout and answers what
/// there is. Texts from redis-server 7.0.
#[tokio::test]
async fn wait_counts_the_pools_backup_copies() {
    for backend in [Backend::Local, Backend::Shm] {
        let (_h, engine) = engine(backend).await;
        let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
        run(&engine, &mut s, &["SET", "k", "v"]).await;
        let backups = engine.dht.pool().fewest_copies() as i64 - 1;
        assert_eq!(
            backups as usize,
            engine.dht.pool().config().replicas - 1,
            "{backend:?}"
        );
        assert_eq!(
            run(&engine, &mut s, &["WAIT", "0", "0"]).await,
            Reply::Int(backups)
        );
        let more = (backups + 1).to_string();
        assert_eq!(
            run(&engine, &mut s, &["WAIT", &more, "10"]).await,
            Reply::Int(backups)
        );
        for (cmd, err) in [
            (
                &["WAIT", "x", "0"][..],
                "ERR value is not an integer or out of range",
            ),
            (
                &["WAIT", "0", "x"],
                "ERR timeout is not an integer or out of range",
            ),
            (&["WAIT", "0", "-5"], "ERR timeout is negative"),
            (
                &["WAIT", "0"],
                "ERR wrong number of arguments for 'wait' command",
            ),
        ] {
            assert_eq!(run(&engine, &mut s, cmd).await, Reply::err(err), "{cmd:?}");
        }
        let Reply::Int(at) = run(&engine, &mut s, &["LASTSAVE"]).await else {
            panic!("LASTSAVE answers an integer");
        };
        assert!(at > 1_700_000_000 && at as u64 <= engine.now_ms() / 1000);
    }
}

/// A container command's call that no subcommand takes is refused with Redis 7.0's
/// texts: an arity error naming `container|sub` for a subcommand it has, "unknown
/// subcommand" otherwise (texts taken from redis-server 7.0).
#[tokio::test]
async fn container_commands_refuse_as_redis_7_does() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    let arity = |name: &str| format!("ERR wrong number of arguments for '{name}' command");
    let unknown = |sub: &str, c: &str| format!("ERR unknown subcommand '{sub}'. Try {c} HELP.");
    let cases: Vec<(&[&str], String)> = vec![
        (&["PUBSUB", "NUMPAT", "x"], arity("pubsub|numpat")),
        (&["PUBSUB", "FOO"], unknown("FOO", "PUBSUB")),
        (&["SLOWLOG", "LEN", "x"], arity("slowlog|len")),
        (&["SLOWLOG", "FOO"], unknown("FOO", "SLOWLOG")),
        (&["LATENCY", "LATEST", "x"], arity("latency|latest")),
        (&["LATENCY", "FOO"], unknown("FOO", "LATENCY")),
        (&["CLIENT", "GETNAME", "x"], arity("client|getname")),
        (&["CLIENT", "ID", "x"], arity("client|id")),
        (&["CLIENT", "FOO"], unknown("FOO", "CLIENT")),
        (&["CONFIG", "RESETSTAT", "x"], arity("config|resetstat")),
        (&["CONFIG", "FOO"], unknown("FOO", "CONFIG")),
        (&["SCRIPT", "EXISTS"], arity("script|exists")),
        (&["SCRIPT", "KILL", "x"], arity("script|kill")),
        (&["SCRIPT", "FOO"], unknown("FOO", "SCRIPT")),
        (&["OBJECT", "ENCODING"], arity("object|encoding")),
        (&["OBJECT", "FOO", "x"], unknown("FOO", "OBJECT")),
        (&["MEMORY", "USAGE"], arity("memory|usage")),
        (&["MEMORY", "FOO"], unknown("FOO", "MEMORY")),
    ];
    for (cmd, want) in cases {
        assert_eq!(
            run(&engine, &mut s, cmd).await,
            Reply::Error(want),
            "{cmd:?}"
        );
    }
}

/// DEBUG is refused unless `enable-debug-command` allows it (Redis's text); allowed, it
/// sleeps the calling client and shows a key's object line in Redis's format.
#[tokio::test]
async fn debug_needs_enable_debug_command() {
    use dmc_engine::{EngineConfig, debug::Access};
    let (h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("127.0.0.1:5000".into(), "t:0".into(), -1);
    assert!(
        matches!(run(&engine, &mut s, &["DEBUG", "SLEEP", "0"]).await,
        Reply::Error(e) if e.starts_with("ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\""))
    );
    let config = |access| EngineConfig {
        debug_command: access,
        ..EngineConfig::default()
    };
    let clock = std::sync::Arc::new(dmc_dht::SystemClock);
    let local = dmc_engine::Engine::new(h.dht.clone(), clock.clone(), config(Access::Local));
    let mut near = local.new_session("127.0.0.1:5000".into(), "t:0".into(), -1);
    let mut far = local.new_session("10.1.2.3:5000".into(), "t:0".into(), -1);
    assert_eq!(
        run(&local, &mut near, &["DEBUG", "SLEEP", "0.01"]).await,
        Reply::ok()
    );
    assert!(
        matches!(run(&local, &mut far, &["DEBUG", "SLEEP", "0"]).await,
        Reply::Error(e) if e.starts_with("ERR DEBUG command not allowed"))
    );
    run(&local, &mut near, &["SET", "dk", "hello"]).await;
    let Reply::Status(line) = run(&local, &mut near, &["DEBUG", "OBJECT", "dk"]).await else {
        panic!("DEBUG OBJECT answers a status line");
    };
    assert!(line.starts_with("Value at:0x"), "{line}");
    assert!(
        line.contains(" refcount:1 encoding:embstr serializedlength:5 lru:"),
        "{line}"
    );
    assert!(line.contains(" lru_seconds_idle:"), "{line}");
    for (cmd, want) in [
        (&["DEBUG", "OBJECT", "nope"][..], "ERR no such key"),
        (
            &["DEBUG", "FOO"],
            "ERR unknown subcommand or wrong number of arguments for 'FOO'. Try DEBUG HELP.",
        ),
        (
            &["DEBUG", "OBJECT"],
            "ERR unknown subcommand or wrong number of arguments for 'OBJECT'. Try DEBUG HELP.",
        ),
        (
            &["CONFIG", "SET", "enable-debug-command", "yes"],
            "ERR CONFIG SET failed (possibly related to argument 'enable-debug-command') - \
             can't set immutable config",
        ),
    ] {
        assert_eq!(
            run(&local, &mut near, cmd).await,
            Reply::err(want),
            "{cmd:?}"
        );
    }
}
