//! Lua states prepared once and reused: the sandbox (base, table, string and math
//! libraries; no `loadfile`/`dofile`; read-only globals), the `redis` table, and each
//! script compiled once per state (kept in the state's registry by SHA). A call sets
//! its context — the engine, the script's session, whether it may write, its kill
//! flag — as the state's app data, which `redis.call` reads, and `KEYS`/`ARGV`.
//!
//! A call first runs where it is polled, with an instruction budget: most scripts end
//! well within it. One that runs past it without having written stops and reports
//! [`Ran::OverBudget`], so the caller can run it again from the start as a blocking
//! section (a script cannot yield mid-loop, and an endless one must not hold a runtime
//! worker and its I/O). One that has written goes on where it is.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use bytes::Bytes;
use dmc_resp::Reply;
use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Value, VmState};

use super::{CommandError, convert, sha1_hex};
use crate::table::TABLE;
use crate::{Engine, Session};

/// The most memory one state's scripts may hold: a script that allocates past it gets
/// an error, not the agent's memory.
const MEMORY_LIMIT: usize = 128 << 20;
/// Lua instructions between two checks of the kill flag and the budget.
const CHECK_EVERY: u32 = 10_000;
/// Checks (of [`CHECK_EVERY`] instructions) a script runs where it is polled before it
/// must go on as a blocking section: 200 000 instructions, about a millisecond.
const INLINE_CHECKS: u32 = 20;

/// A running script, as SCRIPT KILL and the busy check see it.
pub struct Running {
    pub wrote: AtomicBool,
    pub killed: AtomicBool,
    /// When it started, and the keys it declared (`busy-reply-threshold`).
    pub started: std::time::Instant,
    pub keys: Vec<bytes::Bytes>,
    /// Instruction checks so far.
    checks: AtomicU32,
    /// Stop at the budget (the first, inline, run).
    budgeted: AtomicBool,
}

impl Running {
    pub fn new(keys: &[bytes::Bytes]) -> Running {
        Running {
            wrote: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            started: std::time::Instant::now(),
            keys: keys.to_vec(),
            checks: AtomicU32::new(0),
            budgeted: AtomicBool::new(false),
        }
    }
}

/// A call's context, as the state's app data.
#[derive(Clone)]
struct Context {
    engine: Arc<Engine>,
    session: Arc<tokio::sync::Mutex<Session>>,
    running: Arc<Running>,
    read_only: bool,
}

/// How a call ended.
pub enum Ran {
    Done(Value),
    /// Past the inline budget without a write: run it again as a blocking section.
    OverBudget,
}

/// The marker error of [`Ran::OverBudget`].
#[derive(Debug)]
struct OverBudget;

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("script over its inline budget")
    }
}

impl std::error::Error for OverBudget {}

/// A prepared state.
pub struct State {
    lua: Lua,
}

impl State {
    pub fn new() -> mlua::Result<State> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        setup(&lua)?;
        lua.set_memory_limit(MEMORY_LIMIT)?;
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(CHECK_EVERY),
            |lua, _| {
                let Some(ctx) = lua.app_data_ref::<Context>() else {
                    return Ok(VmState::Continue);
                };
                let r = &ctx.running;
                if r.killed.load(Ordering::Acquire) {
                    return Err(mlua::Error::external(CommandError {
                        text: "ERR Script killed by user with SCRIPT KILL...".into(),
                        line: 1,
                    }));
                }
                let checks = r.checks.fetch_add(1, Ordering::Relaxed) + 1;
                if checks >= INLINE_CHECKS
                    && r.budgeted.load(Ordering::Relaxed)
                    && !r.wrote.load(Ordering::Acquire)
                {
                    return Err(mlua::Error::external(OverBudget));
                }
                Ok(VmState::Continue)
            },
        )?;
        Ok(State { lua })
    }

    /// Runs the script `body` (SHA `sha`) with `keys` and `argv`. `budgeted`: stop at
    /// the inline budget if it has not written.
    #[allow(clippy::too_many_arguments)]
    pub async fn call(
        &self,
        engine: Arc<Engine>,
        session: &Session,
        running: Arc<Running>,
        body: &Bytes,
        sha: &str,
        keys: &[Bytes],
        argv: &[Bytes],
        read_only: bool,
        budgeted: bool,
    ) -> Result<Ran, CallError> {
        let lua = &self.lua;
        let func = match lua.named_registry_value::<Option<Function>>(sha) {
            Ok(Some(f)) => f,
            _ => {
                let f = lua
                    .load(&body[..])
                    .set_name("@user_script")
                    .into_function()
                    .map_err(CallError::Compile)?;
                lua.set_named_registry_value(sha, &f)
                    .map_err(CallError::Run)?;
                f
            }
        };
        let mut inner = session.clone();
        inner.tx = crate::multi::TxState::default();
        inner.proto = 2;
        inner.subscribed = false;
        inner.monitoring = false;
        inner.mailbox = None;
        inner.in_script = true;
        running.budgeted.store(budgeted, Ordering::Relaxed);
        running.checks.store(0, Ordering::Relaxed);
        lua.set_app_data(Context {
            engine,
            session: Arc::new(tokio::sync::Mutex::new(inner)),
            running,
            read_only,
        });
        let g = lua.globals();
        let list = |items: &[Bytes]| -> mlua::Result<mlua::Table> {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, lua.create_string(&item[..])?)?;
            }
            Ok(t)
        };
        g.raw_set("KEYS", list(keys).map_err(CallError::Run)?)
            .map_err(CallError::Run)?;
        g.raw_set("ARGV", list(argv).map_err(CallError::Run)?)
            .map_err(CallError::Run)?;
        let result = func.call_async::<Value>(()).await;
        lua.remove_app_data::<Context>();
        match result {
            Ok(v) => Ok(Ran::Done(v)),
            Err(e) if is_over_budget(&e) => Ok(Ran::OverBudget),
            Err(e) => Err(CallError::Run(e)),
        }
    }
}

/// Why a call failed.
pub enum CallError {
    Compile(mlua::Error),
    Run(mlua::Error),
}

fn is_over_budget(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::CallbackError { cause, .. } => is_over_budget(cause),
        mlua::Error::ExternalError(inner) => inner.downcast_ref::<OverBudget>().is_some(),
        _ => false,
    }
}

/// The `redis` table and the sandbox of a new state.
fn setup(lua: &Lua) -> mlua::Result<()> {
    let g = lua.globals();
    for name in ["loadfile", "dofile"] {
        g.raw_set(name, Value::Nil)?;
    }
    let redis = lua.create_table()?;
    for (name, protected) in [("call", false), ("pcall", true)] {
        let f = lua.create_async_function(move |lua, args: MultiValue| async move {
            let Some(ctx) = lua.app_data_ref::<Context>().map(|c| c.clone()) else {
                return Err(mlua::Error::RuntimeError(
                    "redis.call outside a script".into(),
                ));
            };
            let done = command(&lua, &ctx, args, protected).await;
            if let Ok((_, true)) = &done {
                ctx.running.wrote.store(true, Ordering::Release);
            }
            done.map(|(value, _)| value)
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
    super::libs::install(lua)?;
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

/// `redis.call` / `redis.pcall`: runs a command in the script's session; the value and
/// whether the command writes.
async fn command(
    lua: &Lua,
    ctx: &Context,
    args: MultiValue,
    protected: bool,
) -> mlua::Result<(Value, bool)> {
    // The line `on @user_script:N` names: not known here (the call runs on the async
    // call's own Lua thread, whose stack this callback does not see), so 1.
    let line = 1;
    let refuse = |text: &str| -> mlua::Result<(Value, bool)> {
        if protected {
            return Ok((convert::error_table(lua, text)?, false));
        }
        Err(mlua::Error::external(CommandError {
            text: text.to_string(),
            line,
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
    if ctx.read_only && spec.is_write() {
        return refuse("ERR Write commands are not allowed from read-only scripts.");
    }
    let write = spec.is_write();
    let mut s = ctx.session.lock().await;
    if let Err(text) = crate::acl_cmd::check_script(&ctx.engine, &mut s, spec, &argv) {
        drop(s);
        return refuse(text);
    }
    let (reply, _) = Box::pin(crate::dispatch::dispatch_at(
        &ctx.engine,
        &mut s,
        index,
        argv,
    ))
    .await;
    drop(s);
    match reply {
        Reply::Error(e) if !protected => Err(mlua::Error::external(CommandError { text: e, line })),
        other => Ok((convert::to_lua(lua, other, 0)?, write)),
    }
}
