//! One Lua state and a script's run on it. A state is prepared once ([`State::new`]:
//! the [`sandbox`](super::sandbox), the `redis` table, the libraries) and reused; it
//! keeps each script it ran compiled, by SHA, up to [`COMPILED_MAX`] (the least
//! recently run go first, and all of them when a compile runs out of memory). A call
//! sets its context — the engine, the script's session, whether it may write, its
//! [`Running`] entry — as the state's app data, which `redis.call` reads, and
//! `KEYS`/`ARGV`.
//!
//! A call first runs where it is polled, with an instruction budget: most scripts end
//! well within it. One that runs past it without having had an effect (a write, a
//! publish) stops ([`Stop::OverBudget`]), so the caller
//! can run it again from the start as a blocking section (a script cannot yield
//! mid-loop, and an endless one must not hold a runtime worker and its I/O). One that
//! has had an effect goes on where it is: running it again would repeat the effect.
//!
//! A run is stopped (SCRIPT KILL, FUNCTION KILL, FUNCTION LOAD's deadline) through the
//! state's interrupt flag, which the instruction hook and the patched Lua's long C
//! calls read, and while which `pcall` cannot catch the error: a script cannot outlive
//! its termination.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU32, Ordering};
use std::time::Instant;

use bytes::Bytes;
use dmc_resp::Reply;
use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Value, VmState};

use super::{CommandError, convert, sandbox, sha1_hex};
use crate::table::TABLE;
use crate::{Engine, Session};

/// Lua instructions between two checks of the interrupt flag and the budget.
const CHECK_EVERY: u32 = 10_000;
/// Checks (of [`CHECK_EVERY`] instructions) a script runs where it is polled before it
/// must go on as a blocking section: 200 000 instructions, about a millisecond.
const INLINE_CHECKS: u32 = 20;
/// Compiled scripts a state keeps.
pub const COMPILED_MAX: usize = 500;

/// Why a run was stopped.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Stop {
    None = 0,
    /// SCRIPT KILL or FUNCTION KILL.
    Killed = 1,
    /// FUNCTION LOAD ran past its deadline.
    TimedOut = 2,
    /// Past the inline budget without an effect (run it again as a blocking section).
    OverBudget = 3,
    /// It needs a key another writer holds, and has had no effect: run it again with
    /// that key locked beside its declared ones ([`Running::undeclared`]).
    Restart = 4,
}

/// A running script, as SCRIPT KILL and the busy check see it.
pub struct Running {
    /// It ran a write command (or is running one): SCRIPT KILL refuses then.
    pub wrote: AtomicBool,
    /// It ran a command that is not a read (a write, a publish): it must not run again.
    pub effects: AtomicBool,
    stop: AtomicU8,
    /// When it started, and the keys it declared (`busy-reply-threshold`).
    pub started: Instant,
    pub keys: Vec<Bytes>,
    /// Stop it (as [`Stop::TimedOut`]) past this instant (FUNCTION LOAD).
    deadline: Option<Instant>,
    /// Instruction checks so far.
    checks: AtomicU32,
    /// Stop at the budget (the first, inline, run).
    budgeted: AtomicBool,
    /// The interrupt flag of the state it runs on.
    interrupt: Arc<AtomicI32>,
    /// Keys it writes without having declared them, that another writer held.
    pub undeclared: parking_lot::Mutex<Vec<Bytes>>,
}

impl Running {
    pub fn new(keys: &[Bytes], state: &State, deadline: Option<Instant>) -> Running {
        Running {
            wrote: AtomicBool::new(false),
            effects: AtomicBool::new(false),
            stop: AtomicU8::new(Stop::None as u8),
            started: Instant::now(),
            keys: keys.to_vec(),
            deadline,
            checks: AtomicU32::new(0),
            budgeted: AtomicBool::new(false),
            interrupt: state.interrupt.clone(),
            undeclared: Default::default(),
        }
    }

    /// Stops the run for `why`: the next hook check or long C call raises, and no
    /// `pcall` of the script catches it.
    /// A kill or a timeout overrides the budget's stop (which the run would otherwise
    /// clear when it starts again), never each other.
    pub fn stop(&self, why: Stop) {
        let _ = self
            .stop
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                let final_stop = why == Stop::Killed || why == Stop::TimedOut;
                let free = now == Stop::None as u8
                    || (final_stop && now != Stop::Killed as u8 && now != Stop::TimedOut as u8);
                free.then_some(why as u8)
            });
        self.interrupt.store(1, Ordering::Release);
    }

    /// Why it was stopped.
    pub fn stopped(&self) -> Stop {
        match self.stop.load(Ordering::SeqCst) {
            1 => Stop::Killed,
            2 => Stop::TimedOut,
            3 => Stop::OverBudget,
            4 => Stop::Restart,
            _ => Stop::None,
        }
    }

    /// Makes it runnable again from the start (after [`Stop::OverBudget`]).
    fn restart(&self) {
        let _ = self.stop.compare_exchange(
            Stop::OverBudget as u8,
            Stop::None as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.checks.store(0, Ordering::Relaxed);
        let stopped = self.stopped() != Stop::None;
        self.interrupt.store(i32::from(stopped), Ordering::Release);
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
    /// Stopped before it ended: the reason is the [`Running`] entry's.
    Stopped,
}

/// The error a stopped run raises (its text is only seen if it escapes as is).
#[derive(Debug)]
struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Script killed by user with SCRIPT KILL...")
    }
}

impl std::error::Error for Stopped {}

/// A prepared state.
pub struct State {
    lua: Lua,
    /// The flag the patched Lua reads (`lua_setinterruptflag`); it lives as long as
    /// the state (and any [`Running`] entry of it).
    interrupt: Arc<AtomicI32>,
    /// Compiled scripts by SHA, each with the run count at its last run.
    compiled: HashMap<String, (Function, u64)>,
    runs: u64,
}

impl State {
    pub fn new() -> mlua::Result<State> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        sandbox::trim_globals(&lua)?;
        setup(&lua)?;
        sandbox::lock(&lua)?;
        let interrupt = Arc::new(AtomicI32::new(0));
        sandbox::set_interrupt_flag(&lua, &interrupt)?;
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(CHECK_EVERY),
            |lua, _| {
                let Some(ctx) = lua.app_data_ref::<Context>() else {
                    return Ok(VmState::Continue);
                };
                let r = &ctx.running;
                if r.deadline.is_some_and(|d| Instant::now() >= d) {
                    r.stop(Stop::TimedOut);
                }
                let checks = r.checks.fetch_add(1, Ordering::Relaxed) + 1;
                if checks >= INLINE_CHECKS
                    && r.budgeted.load(Ordering::Relaxed)
                    && !r.effects.load(Ordering::Acquire)
                {
                    r.stop(Stop::OverBudget);
                }
                if r.stopped() != Stop::None {
                    return Err(mlua::Error::external(Stopped));
                }
                Ok(VmState::Continue)
            },
        )?;
        Ok(State {
            lua,
            interrupt,
            compiled: HashMap::new(),
            runs: 0,
        })
    }

    /// The memory this state holds.
    pub fn used_memory(&self) -> usize {
        self.lua.used_memory()
    }

    /// Limits what this state may hold.
    pub fn set_memory_limit(&self, bytes: usize) -> mlua::Result<()> {
        self.lua.set_memory_limit(bytes).map(|_| ())
    }

    /// Script `body` (SHA `sha`) compiled: from this state's cache, or compiled now
    /// (the least recently run evicted past [`COMPILED_MAX`]; every other one, if the
    /// compile ran out of memory, and the compile tried once more).
    fn compiled(&mut self, body: &Bytes, sha: &str) -> Result<Function, CallError> {
        self.runs += 1;
        let runs = self.runs;
        if let Some((f, last)) = self.compiled.get_mut(sha) {
            *last = runs;
            return Ok(f.clone());
        }
        let compile = |lua: &Lua| {
            lua.load(&body[..])
                .set_name("@user_script")
                .set_mode(mlua::chunk::ChunkMode::Text)
                .into_function()
        };
        let f = match compile(&self.lua) {
            Ok(f) => f,
            Err(mlua::Error::MemoryError(_)) if !self.compiled.is_empty() => {
                self.compiled.clear();
                let _ = self.lua.gc_collect();
                compile(&self.lua).map_err(CallError::Compile)?
            }
            Err(e) => return Err(CallError::Compile(e)),
        };
        if self.compiled.len() >= COMPILED_MAX
            && let Some(oldest) = self
                .compiled
                .iter()
                .min_by_key(|(_, (_, last))| *last)
                .map(|(sha, _)| sha.clone())
        {
            self.compiled.remove(&oldest);
        }
        self.compiled.insert(sha.to_string(), (f.clone(), runs));
        Ok(f)
    }

    /// Runs the script `body` (SHA `sha`) with `keys` and `argv`. `budgeted`: stop at
    /// the inline budget if it has had no effect.
    #[allow(clippy::too_many_arguments)]
    pub async fn call(
        &mut self,
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
        let func = self.compiled(body, sha)?;
        let lua = &self.lua;
        let mut inner = session.clone();
        inner.tx = crate::multi::TxState::default();
        inner.proto = 2;
        inner.subscribed = false;
        inner.monitoring = false;
        inner.mailbox = None;
        inner.in_script = true;
        running.budgeted.store(budgeted, Ordering::Relaxed);
        running.restart();
        lua.set_app_data(Context {
            engine,
            session: Arc::new(tokio::sync::Mutex::new(inner)),
            running: running.clone(),
            read_only,
        });
        let list = |items: &[Bytes]| -> mlua::Result<mlua::Table> {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, lua.create_string(&item[..])?)?;
            }
            Ok(t)
        };
        let result = match list(keys)
            .and_then(|k| Ok((k, list(argv)?)))
            .and_then(|(k, a)| sandbox::set_arguments(lua, k, a))
        {
            Ok(()) => func.call_async::<Value>(()).await,
            Err(e) => Err(e),
        };
        lua.remove_app_data::<Context>();
        sandbox::after_run(lua, &func).map_err(CallError::Run)?;
        match result {
            Ok(v) => Ok(Ran::Done(v)),
            Err(_) if running.stopped() != Stop::None => Ok(Ran::Stopped),
            Err(e) => Err(CallError::Run(e)),
        }
    }
}

/// Why a call failed.
pub enum CallError {
    Compile(mlua::Error),
    Run(mlua::Error),
}
/// The `redis` table and the libraries of a new state (before [`sandbox::lock`]).
fn setup(lua: &Lua) -> mlua::Result<()> {
    let g = lua.globals();
    let redis = lua.create_table()?;
    for (name, protected) in [("call", false), ("pcall", true)] {
        let f = lua.create_async_function(move |lua, args: MultiValue| async move {
            let Some(ctx) = lua.app_data_ref::<Context>().map(|c| c.clone()) else {
                return Err(mlua::Error::RuntimeError(
                    "redis.call outside a script".into(),
                ));
            };
            command(&lua, &ctx, args, protected).await
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
    Ok(())
}

/// `redis.call` / `redis.pcall`: runs a command in the script's session.
async fn command(
    lua: &Lua,
    ctx: &Context,
    args: MultiValue,
    protected: bool,
) -> mlua::Result<Value> {
    // The line `on @user_script:N` names: not known here (the call runs on the async
    // call's own Lua thread, whose stack this callback does not see), so 1.
    let line = 1;
    let refuse = |text: &str| -> mlua::Result<Value> {
        if protected {
            return convert::error_table(lua, text);
        }
        Err(mlua::Error::external(CommandError {
            text: text.to_string(),
            line,
        }))
    };
    let mut argv = Vec::with_capacity(args.len());
    let mut budget = super::budget::Budget::default();
    for a in args.iter() {
        match convert::to_arg(a) {
            Some(b) => {
                if budget.spend(b.len()).is_err() {
                    return refuse("ERR Lua redis lib command arguments are too large");
                }
                argv.push(b)
            }
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
    // Every ACL subcommand but HELP is `noscript` in Redis (the container row has no
    // flags of its own).
    let acl_change = matches!(spec.cmd, crate::table::Cmd::Acl)
        && !argv.get(1).is_some_and(|a| a.eq_ignore_ascii_case(b"help"));
    if spec.has_flag("noscript") || acl_change {
        return refuse("ERR This Redis command is not allowed from script");
    }
    if !spec.arity_ok(argv.len()) {
        return refuse("ERR Wrong number of args calling Redis command from script");
    }
    // FUNCTION LOAD runs a library only to register its functions (Redis's load-time
    // `redis` has no `call`): the only run with a deadline.
    if ctx.running.deadline.is_some() {
        return refuse(
            "ERR redis.call and redis.pcall are not available while FUNCTION LOAD runs a library",
        );
    }
    if ctx.read_only && spec.is_write() {
        return refuse("ERR Write commands are not allowed from read-only scripts.");
    }
    let mut s = ctx.session.lock().await;
    if let Err(text) = crate::acl_cmd::check_script(&ctx.engine, &mut s, spec, &argv) {
        drop(s);
        return refuse(text);
    }
    if spec.is_write() {
        match claim_keys(ctx, spec, &argv).await {
            Ok(()) => {}
            Err(None) => return Err(mlua::Error::external(Stopped)),
            Err(Some(text)) => {
                drop(s);
                return refuse(text);
            }
        }
    }
    // Marked before it runs, as Redis does: a kill must not stop a write half-way, and
    // a run that has had an effect must not be run again. (SeqCst: SCRIPT KILL reads
    // `wrote` then stops; this writes `wrote` then reads the stop — one of the two sees
    // the other.)
    if spec.is_write() {
        ctx.running.wrote.store(true, Ordering::SeqCst);
    }
    if spec.is_write() || spec.has_flag("pubsub") {
        ctx.running.effects.store(true, Ordering::SeqCst);
    }
    if ctx.running.stopped() != Stop::None {
        return Err(mlua::Error::external(Stopped));
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
        other => convert::to_lua(lua, other, 0),
    }
}

/// Before a write: makes the script hold the locks of the keys it writes that it did
/// not declare ([`crate::multi::claim_for_script`]). When another writer holds one and
/// the script has had no effect, the script is stopped ([`Stop::Restart`]) to run again
/// with it declared: `Err(None)`, as for a kill while it waited; `Err(Some(text))` is
/// the command's error.
async fn claim_keys(
    ctx: &Context,
    spec: &crate::table::Spec,
    argv: &[Bytes],
) -> Result<(), Option<&'static str>> {
    let keys: Vec<&[u8]> = spec
        .key_positions(argv)
        .into_iter()
        .filter_map(|i| argv.get(i).map(|k| &k[..]))
        .collect();
    if keys.is_empty() {
        return Ok(());
    }
    // A script runs at the agent that owns its declared keys; another agent's key is
    // that agent's to write (waiting for it here stalled both agents' scripts): Redis
    // Cluster's refusal.
    if keys.iter().any(|k| !ctx.engine.owns(k)) {
        return Err(Some(
            "ERR Script attempted to access a non local key in a cluster node",
        ));
    }
    let running = &ctx.running;
    let may_restart = !running.effects.load(Ordering::SeqCst);
    let stopped = || running.stopped() != Stop::None;
    match crate::multi::claim_for_script(&ctx.engine, &keys, may_restart, &stopped).await {
        Ok(()) => Ok(()),
        Err(crate::multi::ClaimRefused::Restart) => {
            running
                .undeclared
                .lock()
                .extend(keys.iter().map(|k| Bytes::copy_from_slice(k)));
            running.stop(Stop::Restart);
            Err(None)
        }
        Err(crate::multi::ClaimRefused::Stopped) => Err(None),
        Err(crate::multi::ClaimRefused::Busy) => Err(Some(
            "ERR Script attempted to write a key it did not declare, which another client holds: declare every key a script writes",
        )),
    }
}
