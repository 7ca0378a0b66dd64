//! Lua scripting as Redis 7 does it: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT
//! (LOAD, EXISTS, FLUSH, KILL, HELP), on Lua 5.1 (`mlua`, vendored). A script runs in a
//! fresh sandboxed state — only the base, table, string and math libraries, no
//! `loadfile`/`dofile`, globals read-only (an assignment or a read of an unknown global
//! is an error) — with `KEYS`, `ARGV` and the `redis` table: `call`, `pcall`,
//! `error_reply`, `status_reply`, `sha1hex`, `log`, `setresp`. Replies and results
//! convert as in Redis ([`convert`]); error texts are Redis's, with the script's SHA.
//!
//! A script is atomic as an EXEC is ([`crate::multi`]): it runs holding the write
//! locks of the keys it declares, its commands take no lock of their own for them,
//! and blocking commands do not block. Scripts are cached per agent by SHA-1; in proxy
//! mode `SCRIPT LOAD` and `SCRIPT FLUSH` run on every agent.
//!
//! A script that loops is stopped by SCRIPT KILL (an instruction hook checks the flag)
//! unless it has written, as in Redis. Not yet: `busy-script-time`, FUNCTION/FCALL,
//! the `cjson`, `cmsgpack`, `bit` and `struct` libraries, scripts kept in the pool.

mod convert;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use dmc_resp::Reply;
use mlua::{HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Value, VmState};

use crate::table::TABLE;
use crate::{Engine, Session, parse_i64};

/// The scripts this agent has seen, by lowercase hex SHA-1, and the ones running.
#[derive(Default)]
pub struct Scripts {
    by_sha: parking_lot::Mutex<HashMap<String, Bytes>>,
    /// Scripts running now, each with whether it has written yet.
    running: parking_lot::Mutex<Vec<Arc<Running>>>,
}

/// A running script, as SCRIPT KILL sees it.
#[derive(Default)]
struct Running {
    wrote: AtomicBool,
    killed: AtomicBool,
}

/// How many Lua instructions run between two checks of the kill flag.
const CHECK_EVERY: u32 = 10_000;

impl Scripts {
    fn add(&self, body: &Bytes) -> String {
        let sha = sha1_hex(body);
        self.by_sha.lock().insert(sha.clone(), body.clone());
        sha
    }

    fn get(&self, sha: &[u8]) -> Option<Bytes> {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.by_sha.lock().get(&sha).cloned()
    }
}

fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

/// `EVAL script numkeys key... arg...` and its kin.
pub async fn eval(
    engine: &Engine,
    session: &mut Session,
    args: &[Bytes],
    by_sha: bool,
    read_only: bool,
) -> Reply {
    let body = if by_sha {
        match engine.scripts.get(&args[1]) {
            Some(b) => b,
            None => return Reply::err("NOSCRIPT No matching script. Please use EVAL."),
        }
    } else {
        args[1].clone()
    };
    let Some(n) = parse_i64(&args[2]) else {
        return Reply::err("ERR value is not an integer or out of range");
    };
    let Some(n) = usize::try_from(n).ok().filter(|&n| n <= args.len() - 3) else {
        return Reply::err(if n < 0 {
            "ERR Number of keys can't be negative"
        } else {
            "ERR Number of keys can't be greater than number of args"
        });
    };
    let sha = engine.scripts.add(&body);
    let keys = &args[3..3 + n];
    let argv = &args[3 + n..];
    let Some(me) = engine.me.upgrade() else {
        return Reply::err("ERR the server is shutting down");
    };
    let work = crate::multi::run_locked(engine, keys, async {
        match run(me, session, &body, &sha, keys, argv, read_only).await {
            Ok(reply) => reply,
            Err(reply) => reply,
        }
    });
    // Lua runs on the thread that polls it and cannot yield mid-loop: on a
    // multi-threaded runtime the script runs in place of a blocking section, so this
    // worker's other tasks and the I/O driver move to another thread meanwhile (a
    // script that loops stays killable by SCRIPT KILL from another client).
    let handle = tokio::runtime::Handle::current();
    match handle.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| handle.block_on(work))
        }
        _ => work.await,
    }
}

/// Takes a running script off the list when it ends, however it ends.
struct Leave {
    engine: Arc<Engine>,
    me: Arc<Running>,
}

impl Drop for Leave {
    fn drop(&mut self) {
        let me = &self.me;
        self.engine
            .scripts
            .running
            .lock()
            .retain(|r| !Arc::ptr_eq(r, me));
    }
}

/// What a script's caller sees of a Lua error: Redis's text with the script's SHA.
fn script_error(sha: &str, e: &mlua::Error) -> Reply {
    let (text, line) = describe(e);
    let text = text.trim_end().to_string();
    let prefixed = if text.contains(' ')
        && text
            .split(' ')
            .next()
            .is_some_and(|w| w.chars().all(|c| c.is_ascii_uppercase()))
    {
        text
    } else {
        format!("ERR {text}")
    };
    Reply::Error(format!("{prefixed} script: {sha}, on @user_script:{line}."))
}

/// The message of a Lua error (a `redis.call` error's Redis text as it is), and the
/// script line it names (1 when none).
fn describe(e: &mlua::Error) -> (String, u32) {
    match e {
        mlua::Error::CallbackError { cause, .. } => describe(cause),
        mlua::Error::ExternalError(inner) => match inner.downcast_ref::<CommandError>() {
            Some(c) => (c.text.clone(), c.line),
            None => (inner.to_string(), 1),
        },
        mlua::Error::RuntimeError(m) => {
            let m = without_traceback(m);
            (m.to_string(), line_of(m))
        }
        other => {
            let m = other.to_string();
            let m = without_traceback(&m);
            (m.to_string(), line_of(m))
        }
    }
}

/// A Lua error message without the stack traceback mlua appends.
fn without_traceback(m: &str) -> &str {
    m.split("\nstack traceback:").next().unwrap_or(m)
}

/// The line of `user_script:N: ...`.
fn line_of(message: &str) -> u32 {
    message
        .strip_prefix("user_script:")
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// An error `redis.call` raises: a command's error reply (or a refusal) as it is.
#[derive(Debug)]
struct CommandError {
    text: String,
    line: u32,
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for CommandError {}

/// Runs `body` with `KEYS` and `ARGV`.
async fn run(
    engine: Arc<Engine>,
    session: &Session,
    body: &Bytes,
    sha: &str,
    keys: &[Bytes],
    argv: &[Bytes],
    read_only: bool,
) -> Result<Reply, Reply> {
    let fail = |e: mlua::Error| script_error(sha, &e);
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::default(),
    )
    .map_err(|e| Reply::err(format!("ERR could not start Lua: {e}")))?;
    let mut inner = session.clone();
    inner.tx = crate::multi::TxState::default();
    inner.proto = 2;
    let state = Arc::new(tokio::sync::Mutex::new(inner));
    let running = Arc::new(Running::default());
    engine.scripts.running.lock().push(running.clone());
    let _leave = Leave {
        engine: engine.clone(),
        me: running.clone(),
    };
    {
        let running = running.clone();
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(CHECK_EVERY),
            move |_, _| {
                if running.killed.load(Ordering::Acquire) {
                    return Err(mlua::Error::external(CommandError {
                        text: "ERR Script killed by user with SCRIPT KILL...".into(),
                        line: 1,
                    }));
                }
                Ok(VmState::Continue)
            },
        )
        .map_err(fail)?;
    }
    setup(&lua, engine, state, running, keys, argv, read_only).map_err(fail)?;
    let func = lua
        .load(&body[..])
        .set_name("@user_script")
        .into_function()
        .map_err(|e| {
            let (text, _) = describe(&e);
            let text = text.trim_start_matches("syntax error: ").trim_end();
            Reply::Error(format!("ERR Error compiling script (new function): {text}"))
        })?;
    let value: Value = func.call_async(()).await.map_err(fail)?;
    Ok(match convert::to_reply(&value, 0) {
        Reply::Error(e) if !e.contains(' ') || e.starts_with(|c: char| c.is_ascii_lowercase()) => {
            Reply::Error(format!("ERR {e}"))
        }
        other => other,
    })
}

/// Globals of a script's state: KEYS, ARGV, the `redis` table, and the sandbox.
fn setup(
    lua: &Lua,
    engine: Arc<Engine>,
    session: Arc<tokio::sync::Mutex<Session>>,
    running: Arc<Running>,
    keys: &[Bytes],
    argv: &[Bytes],
    read_only: bool,
) -> mlua::Result<()> {
    let g = lua.globals();
    for name in ["loadfile", "dofile"] {
        g.raw_set(name, Value::Nil)?;
    }
    let list = |items: &[Bytes]| -> mlua::Result<mlua::Table> {
        let t = lua.create_table()?;
        for (i, item) in items.iter().enumerate() {
            t.raw_set(i + 1, lua.create_string(&item[..])?)?;
        }
        Ok(t)
    };
    g.raw_set("KEYS", list(keys)?)?;
    g.raw_set("ARGV", list(argv)?)?;
    let redis = lua.create_table()?;
    for (name, protected) in [("call", false), ("pcall", true)] {
        let (engine, session, running) = (engine.clone(), session.clone(), running.clone());
        let f = lua.create_async_function(move |lua, args: MultiValue| {
            let (engine, session, running) = (engine.clone(), session.clone(), running.clone());
            async move {
                let done = command(&lua, &engine, &session, args, read_only, protected).await;
                if let Ok((_, true)) = &done {
                    running.wrote.store(true, Ordering::Release);
                }
                done.map(|(value, _)| value)
            }
        })?;
        redis.raw_set(name, f)?;
    }
    redis.raw_set(
        "error_reply",
        lua.create_function(|lua, text: mlua::LuaString| {
            convert::error_table(lua, &text.to_string_lossy())
        })?,
    )?;
    redis.raw_set(
        "status_reply",
        lua.create_function(|lua, text: mlua::LuaString| {
            convert::status_table(lua, &text.to_string_lossy())
        })?,
    )?;
    redis.raw_set(
        "sha1hex",
        lua.create_function(|_, text: mlua::LuaString| Ok(sha1_hex(&text.as_bytes())))?,
    )?;
    redis.raw_set(
        "log",
        lua.create_function(|_, (level, message): (i64, mlua::LuaString)| {
            tracing::info!(level, message = %message.to_string_lossy(), "script log");
            Ok(())
        })?,
    )?;
    redis.raw_set("setresp", lua.create_function(|_, _proto: i64| Ok(()))?)?;
    for (name, level) in [
        ("LOG_DEBUG", 0),
        ("LOG_VERBOSE", 1),
        ("LOG_NOTICE", 2),
        ("LOG_WARNING", 3),
    ] {
        redis.raw_set(name, level)?;
    }
    g.raw_set("redis", redis)?;
    // Read-only globals: a new global is refused, an unknown one is an error.
    let guard = lua.create_table()?;
    guard.raw_set(
        "__newindex",
        lua.create_function(|_, _: MultiValue| -> mlua::Result<()> {
            Err(mlua::Error::RuntimeError(
                "user_script:1: Attempt to modify a readonly table".into(),
            ))
        })?,
    )?;
    guard.raw_set(
        "__index",
        lua.create_function(
            |_, (_, name): (Value, mlua::LuaString)| -> mlua::Result<()> {
                Err(mlua::Error::RuntimeError(format!(
                    "user_script:1: Script attempted to access nonexistent global variable '{}'",
                    name.to_string_lossy()
                )))
            },
        )?,
    )?;
    g.set_metatable(Some(guard))?;
    Ok(())
}

/// `redis.call` / `redis.pcall`: runs a command in the script's session.
async fn command(
    lua: &Lua,
    engine: &Engine,
    session: &tokio::sync::Mutex<Session>,
    args: MultiValue,
    read_only: bool,
    protected: bool,
) -> mlua::Result<(Value, bool)> {
    let refuse = |text: &str| -> mlua::Result<(Value, bool)> {
        if protected {
            return Ok((convert::error_table(lua, text)?, false));
        }
        Err(mlua::Error::external(CommandError {
            text: text.to_string(),
            line: 1,
        }))
    };
    let mut argv = Vec::with_capacity(args.len());
    for a in args.iter() {
        match convert::to_arg(a) {
            Some(b) => argv.push(b),
            None => {
                return refuse("ERR Lua redis lib command arguments must be strings or integers");
            }
        }
    }
    if argv.is_empty() {
        return refuse("ERR Please specify at least one argument for this redis lib call");
    }
    let index = crate::table::lookup_index(&argv[0]);
    let Some(spec) = index.and_then(|i| TABLE.get(i)) else {
        return refuse("ERR Unknown Redis command called from script");
    };
    if spec.has_flag("noscript") {
        return refuse("ERR This Redis command is not allowed from script");
    }
    if !spec.arity_ok(argv.len()) {
        return refuse("ERR Wrong number of args calling Redis command from script");
    }
    if read_only && spec.is_write() {
        return refuse("ERR Write commands are not allowed from read-only scripts.");
    }
    let write = spec.is_write();
    let mut s = session.lock().await;
    let (reply, _) = Box::pin(crate::dispatch::dispatch_at(engine, &mut s, index, argv)).await;
    drop(s);
    match reply {
        Reply::Error(e) if !protected => {
            Err(mlua::Error::external(CommandError { text: e, line: 1 }))
        }
        other => Ok((convert::to_lua(lua, other, 0)?, write)),
    }
}

/// `SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP`.
pub fn script(engine: &Engine, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_uppercase();
    match (sub.as_str(), args.len()) {
        ("LOAD", 3) => Reply::bulk(engine.scripts.add(&args[2])),
        ("EXISTS", n) if n >= 3 => Reply::Array(
            args[2..]
                .iter()
                .map(|sha| Reply::Int(i64::from(engine.scripts.get(sha).is_some())))
                .collect(),
        ),
        ("FLUSH", 2) | ("FLUSH", 3) => {
            if let Some(mode) = args.get(2) {
                let mode = String::from_utf8_lossy(mode).to_ascii_uppercase();
                if mode != "ASYNC" && mode != "SYNC" {
                    return Reply::err("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
                }
            }
            engine.scripts.by_sha.lock().clear();
            Reply::ok()
        }
        ("KILL", 2) => {
            let running = engine.scripts.running.lock();
            if running.is_empty() {
                return Reply::err("NOTBUSY No scripts in execution right now.");
            }
            if running.iter().any(|r| r.wrote.load(Ordering::Acquire)) {
                return Reply::err(
                    "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.",
                );
            }
            for r in running.iter() {
                r.killed.store(true, Ordering::Release);
            }
            Reply::ok()
        }
        ("HELP", 2) => Reply::Array(
            [
                "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "EXISTS <sha1> [<sha1> ...]",
                "FLUSH [ASYNC|SYNC]",
                "KILL",
                "LOAD <script>",
                "HELP",
            ]
            .iter()
            .map(|l| Reply::Status((*l).to_string()))
            .collect(),
        ),
        _ => Reply::err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try SCRIPT HELP.",
            String::from_utf8_lossy(&args[1])
        )),
    }
}
