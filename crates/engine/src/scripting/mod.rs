//! Lua scripting as Redis 7 does it: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT
//! (LOAD, EXISTS, FLUSH, KILL, HELP), on DMC's patched Lua 5.1 (`vendor/lua-src`). A
//! script runs on a state of the pool ([`pool`], [`state`]) inside Redis 7's sandbox
//! ([`sandbox`]: read-only globals and libraries, no bytecode) with `KEYS`, `ARGV` and
//! the `redis` table: `call`, `pcall`, `error_reply`, `status_reply`, `sha1hex`,
//! `log`, `setresp`. Replies and results convert as in Redis ([`convert`], bounded by
//! [`budget`]); error texts are Redis's, with the script's SHA.
//!
//! A script is atomic as an EXEC is ([`crate::multi`]): it runs holding the write
//! locks of the keys it declares; a key it writes undeclared is claimed in lock order,
//! or the script runs again with it locked ([`run_script`]), so no two scripts wedge
//! each other. Blocking commands do not block in it. Scripts are kept per agent by
//! SHA-1, EVAL's up to [`EVAL_SCRIPTS_MAX`].
//!
//! SCRIPT KILL stops a script through its state's interrupt flag, inside long C calls
//! too, unless it has written, as in Redis. Functions (FUNCTION, FCALL) run on the same
//! machinery ([`functions`]); FUNCTION LOAD stops a library past [`LOAD_TIMEOUT`].
//! Past `busy-reply-threshold` a script's keys answer BUSY ([`busy`]). In a cluster the
//! SCRIPT LOAD scripts are the instance's, kept by the manager ([`Scripts::install`],
//! `compute-agent/src/routing/functions.rs`).

mod budget;
mod convert;
mod function_dump;
pub mod functions;
mod libs;
mod msgpack;
pub mod pool;
mod sandbox;
mod state;
mod structlib;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use dmc_resp::Reply;
use mlua::Value;
use state::{CallError, Ran, Running, Stop};

use crate::{Engine, Session, parse_i64};

/// The scripts this agent has seen, by lowercase hex SHA-1; the ones running; the Lua
/// states.
pub struct Scripts {
    by_sha: parking_lot::Mutex<Known>,
    /// Scripts running now, each with whether it has written yet.
    running: parking_lot::Mutex<Vec<Arc<Running>>>,
    /// How many: the busy check reads this before taking the lock.
    running_count: std::sync::atomic::AtomicUsize,
    /// `busy-reply-threshold` (alias `lua-time-limit`), in milliseconds.
    pub busy_ms: std::sync::atomic::AtomicU64,
    /// The Lua states (at most [`pool::STATES`], `lua-memory-limit` in all).
    pub states: pool::StatePool,
    /// The scripts SCRIPT LOAD named (a cluster keeps them for agents that join later).
    loaded: parking_lot::Mutex<Vec<Bytes>>,
    /// The version of the instance's loaded scripts these are (0 standalone).
    loaded_version: std::sync::atomic::AtomicU64,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            by_sha: Default::default(),
            running: Default::default(),
            running_count: Default::default(),
            busy_ms: std::sync::atomic::AtomicU64::new(5000),
            states: Default::default(),
            loaded: Default::default(),
            loaded_version: Default::default(),
        }
    }
}

/// `BUSY` for a command that needs a key a script has held longer than
/// `busy-reply-threshold`, as Redis answers every command then. Other clients' commands
/// on other keys run meanwhile (a script holds only its keys' locks), so only those
/// that would wait for it are refused; SCRIPT KILL (or FUNCTION KILL) stops it.
pub(crate) fn busy(
    engine: &Engine,
    session: &Session,
    spec: &crate::table::Spec,
    args: &[Bytes],
) -> Option<Reply> {
    if engine.scripts.running_count.load(Ordering::Acquire) == 0 || session.in_script {
        return None;
    }
    let positions = spec.key_positions(args);
    if positions.is_empty() {
        return None;
    }
    let threshold =
        std::time::Duration::from_millis(engine.scripts.busy_ms.load(Ordering::Relaxed));
    let running = engine.scripts.running.lock();
    running
        .iter()
        .filter(|r| r.started.elapsed() >= threshold)
        .any(|r| {
            positions
                .iter()
                .filter_map(|&i| args.get(i))
                .any(|k| r.keys.contains(k))
        })
        .then(|| {
            Reply::err("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.")
        })
}

impl Scripts {
    /// Forgets every script (SCRIPT FLUSH).
    fn flush(&self) {
        {
            let mut known = self.by_sha.lock();
            let evicted = known.evicted;
            *known = Known {
                evicted,
                ..Known::default()
            };
        }
        self.loaded.lock().clear();
        // The states keep each script compiled: start over with new ones.
        self.states.clear();
    }

    /// The bodies SCRIPT LOAD named, in order (those that are UTF-8: the cluster map
    /// carries text; another is kept on this agent only).
    pub fn loaded(&self) -> Vec<String> {
        self.loaded
            .lock()
            .iter()
            .filter_map(|b| std::str::from_utf8(b).ok().map(str::to_string))
            .collect()
    }

    /// The version of the instance's loaded scripts these are.
    pub fn loaded_version(&self) -> u64 {
        self.loaded_version.load(Ordering::Acquire)
    }

    /// Makes the instance's loaded scripts `bodies` of `version` (from the cluster map,
    /// or the manager's answer to a change) this agent's: scripts no longer in the list
    /// went with a SCRIPT FLUSH somewhere, so everything goes first then.
    pub fn install(&self, bodies: &[String], version: u64) {
        if version <= self.loaded_version() {
            return;
        }
        let flushed = self
            .loaded
            .lock()
            .iter()
            .any(|b| !bodies.iter().any(|n| n.as_bytes() == &b[..]));
        if flushed {
            self.flush();
        }
        for body in bodies {
            let body = Bytes::from(body.clone());
            self.add(&body, true);
            let mut loaded = self.loaded.lock();
            if !loaded.contains(&body) {
                loaded.push(body);
            }
        }
        self.loaded_version.fetch_max(version, Ordering::AcqRel);
    }
}

/// Scripts EVAL named (not SCRIPT LOAD) kept at most: past it the least recently run
/// is forgotten (EVALSHA of it answers NOSCRIPT), as Redis 8 does.
pub const EVAL_SCRIPTS_MAX: usize = 500;

/// The known scripts: each body, whether SCRIPT LOAD named it (never evicted), and
/// when it was last named (a count of uses).
#[derive(Default)]
struct Known {
    scripts: HashMap<String, KnownScript>,
    uses: u64,
    /// How many are EVAL's (evictable).
    evals: usize,
    /// How many were evicted (INFO's `evicted_scripts`).
    evicted: u64,
}

struct KnownScript {
    body: Bytes,
    loaded: bool,
    last: u64,
}

impl Known {
    /// Records `body` (SHA `sha`) as named now; `loaded` by SCRIPT LOAD.
    fn add(&mut self, sha: &str, body: &Bytes, loaded: bool) {
        self.uses += 1;
        let now = self.uses;
        if let Some(k) = self.scripts.get_mut(sha) {
            k.last = now;
            if loaded && !k.loaded {
                k.loaded = true;
                self.evals -= 1;
            }
            return;
        }
        if !loaded {
            if self.evals >= EVAL_SCRIPTS_MAX
                && let Some(oldest) = self
                    .scripts
                    .iter()
                    .filter(|(_, k)| !k.loaded)
                    .min_by_key(|(_, k)| k.last)
                    .map(|(sha, _)| sha.clone())
            {
                self.scripts.remove(&oldest);
                self.evals -= 1;
                self.evicted += 1;
            }
            self.evals += 1;
        }
        let known = KnownScript {
            body: body.clone(),
            loaded,
            last: now,
        };
        self.scripts.insert(sha.to_string(), known);
    }
}

impl Scripts {
    /// Records an EVAL's (or, `loaded`, SCRIPT LOAD's) script; its SHA.
    fn add(&self, body: &Bytes, loaded: bool) -> String {
        let sha = sha1_hex(body);
        self.by_sha.lock().add(&sha, body, loaded);
        sha
    }

    /// The script of SHA `sha` (any case), with its SHA as stored.
    fn get(&self, sha: &[u8]) -> Option<(String, Bytes)> {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        let mut known = self.by_sha.lock();
        known.uses += 1;
        let now = known.uses;
        let k = known.scripts.get_mut(&sha)?;
        k.last = now;
        Some((sha, k.body.clone()))
    }

    /// Scripts known now, and scripts evicted so far (INFO).
    pub fn counts(&self) -> (usize, u64) {
        let known = self.by_sha.lock();
        (known.scripts.len(), known.evicted)
    }
}

pub(crate) fn sha1_hex(body: &[u8]) -> String {
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
    let n = match numkeys(args) {
        Ok(n) => n,
        Err(e) => return e,
    };
    // EVALSHA names a script known already (no hashing); EVAL's is hashed and kept.
    let (sha, body) = if by_sha {
        match engine.scripts.get(&args[1]) {
            Some(found) => found,
            None => return Reply::err("NOSCRIPT No matching script. Please use EVAL."),
        }
    } else {
        (engine.scripts.add(&args[1], false), args[1].clone())
    };
    run_body(
        engine,
        session,
        &body,
        &sha,
        &args[3..3 + n],
        &args[3 + n..],
        read_only,
    )
    .await
}

/// The key count of `EVAL|FCALL name numkeys key... arg...` (`args[2]`), checked
/// against the arguments there are, with Redis's errors.
pub(crate) fn numkeys(args: &[Bytes]) -> Result<usize, Reply> {
    let Some(n) = parse_i64(&args[2]) else {
        return Err(Reply::err("ERR value is not an integer or out of range"));
    };
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= args.len() - 3)
        .ok_or_else(|| {
            Reply::err(if n < 0 {
                "ERR Number of keys can't be negative"
            } else {
                "ERR Number of keys can't be greater than number of args"
            })
        })
}

/// Runs the script `body` with `keys` and `argv` (EVAL's work once its arguments are
/// checked; FCALL runs its library this way).
pub(crate) async fn run_body(
    engine: &Engine,
    session: &mut Session,
    body: &Bytes,
    sha: &str,
    keys: &[Bytes],
    argv: &[Bytes],
    read_only: bool,
) -> Reply {
    let script = Script {
        body,
        sha,
        keys,
        argv,
        read_only,
        deadline: None,
    };
    // Boxed: a script's state machine is large, and inlined it would make every
    // connection's task (whose command future may be an EVAL) that much larger, idle
    // or not.
    Box::pin(run_script(engine, session, &script)).await
}

/// How long FUNCTION LOAD may run a library's code (Redis's `LOAD_TIMEOUT_MS`).
pub const LOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// Runs a library's code to learn its functions (FUNCTION LOAD): read-only, no keys,
/// stopped with `FUNCTION LOAD timeout` past [`LOAD_TIMEOUT`].
pub(crate) async fn run_library_load(
    engine: &Engine,
    session: &mut Session,
    body: &Bytes,
    sha: &str,
) -> Reply {
    let script = Script {
        body,
        sha,
        keys: &[],
        argv: &[],
        read_only: true,
        deadline: Some(LOAD_TIMEOUT),
    };
    // Boxed: a script's state machine is large, and inlined it would make every
    // connection's task (whose command future may be an EVAL) that much larger, idle
    // or not.
    Box::pin(run_script(engine, session, &script)).await
}

/// Times a script may start again because a key it writes undeclared was held.
const RESTARTS_MAX: usize = 8;

/// Runs `script` holding its keys' locks, on a state of the pool. A run that stops
/// for a key it writes without having declared it runs again with that key locked too
/// (in order with the others: it never waits for a lock while holding one out of
/// order, so two scripts cannot wedge each other).
async fn run_script(engine: &Engine, session: &mut Session, script: &Script<'_>) -> Reply {
    let Some(me) = engine.me.upgrade() else {
        return Reply::err("ERR the server is shutting down");
    };
    // The state first, then the locks: a script that waits for a state holds no lock,
    // so the wait for one of the 8 states and the waits for locks cannot close a
    // cycle (a script holding a state may wait for a lock, in lock order).
    let mut state = match engine.scripts.states.take().await {
        Ok(s) => s,
        Err(e) => return Reply::Error(format!("ERR {e}")),
    };
    let mut keys: Vec<Bytes> = script.keys.to_vec();
    for _ in 0..RESTARTS_MAX {
        match attempt(&me, &mut state, session, script, &keys).await {
            Attempt::Reply(reply) => return reply,
            Attempt::Restart(more) => {
                for k in more {
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
            }
            Attempt::OverBudget => {
                return Reply::err("ERR internal: a script ran over its budget twice");
            }
        }
    }
    Reply::err("ERR the script could not take the locks of the keys it writes")
}

/// How one attempt at a script ended.
enum Attempt {
    Reply(Reply),
    /// Past the inline budget without an effect.
    OverBudget,
    /// It needs these keys locked too.
    Restart(Vec<Bytes>),
}

/// One attempt at `script` with `locked` (its keys and those it found it writes)
/// locked: inline within a budget, then (no effect yet) again from the start as a
/// blocking section, so a long script does not hold this worker and its I/O. On a
/// single-threaded runtime (tests) there is nothing to hand over.
async fn attempt(
    me: &Arc<Engine>,
    state: &mut state::State,
    session: &mut Session,
    script: &Script<'_>,
    locked: &[Bytes],
) -> Attempt {
    let engine = &**me;
    crate::multi::run_locked(engine, locked, async {
        let deadline = script.deadline.map(|d| std::time::Instant::now() + d);
        let running = Arc::new(Running::new(locked, state, deadline));
        engine.scripts.running.lock().push(running.clone());
        engine.scripts.running_count.fetch_add(1, Ordering::AcqRel);
        // Dropped before the state goes back to the pool (it outlives this attempt), so
        // no SCRIPT KILL reaches this run's entry once another run has the state.
        let _leave = Leave {
            engine: me.clone(),
            me: running.clone(),
        };
        // A deadline is kept by a timer too: the hook sees it only between Lua
        // instructions, the interrupt flag also inside a long C call.
        let _watchdog = deadline.map(|at| Watchdog::start(running.clone(), at));
        let first = run(me, state, session, &running, script, true).await;
        if !matches!(first, Attempt::OverBudget) {
            return first;
        }
        let handle = tokio::runtime::Handle::current();
        let again = run(me, state, session, &running, script, false);
        match handle.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| handle.block_on(again))
            }
            _ => again.await,
        }
    })
    .await
    .unwrap_or_else(|e| Attempt::Reply(crate::error_reply(e)))
}

/// A script call's arguments.
struct Script<'a> {
    body: &'a Bytes,
    sha: &'a str,
    keys: &'a [Bytes],
    argv: &'a [Bytes],
    read_only: bool,
    /// Stop it past this long (FUNCTION LOAD).
    deadline: Option<std::time::Duration>,
}

/// One run of a script on `state`; `budgeted`: stop at the inline budget if it has
/// had no effect.
async fn run(
    engine: &Arc<Engine>,
    state: &mut state::State,
    session: &Session,
    running: &Arc<Running>,
    script: &Script<'_>,
    budgeted: bool,
) -> Attempt {
    let outcome = state
        .call(
            engine.clone(),
            session,
            running.clone(),
            script.body,
            script.sha,
            script.keys,
            script.argv,
            script.read_only,
            budgeted,
        )
        .await;
    let reply = match outcome {
        Ok(Ran::Done(value)) => result_reply(&value),
        Ok(Ran::Stopped) => match running.stopped() {
            Stop::OverBudget => return Attempt::OverBudget,
            Stop::Restart => {
                return Attempt::Restart(std::mem::take(&mut *running.undeclared.lock()));
            }
            // Only FUNCTION LOAD has a deadline; it words the error as Redis does.
            Stop::TimedOut => Reply::Error("FUNCTION LOAD timeout".into()),
            Stop::Killed | Stop::None => script_error(
                script.sha,
                &mlua::Error::external(CommandError {
                    text: "ERR Script killed by user with SCRIPT KILL...".into(),
                    line: 1,
                }),
            ),
        },
        Err(CallError::Compile(e)) => {
            let (text, _) = describe(&e);
            let text = text.trim_start_matches("syntax error: ").trim_end();
            Reply::Error(format!("ERR Error compiling script (new function): {text}"))
        }
        Err(CallError::Run(e)) => script_error(script.sha, &e),
    };
    Attempt::Reply(reply)
}

/// A script's result as its reply: an error text without a code gets `ERR`.
fn result_reply(value: &Value) -> Reply {
    match convert::to_reply(value) {
        Reply::Error(e) if !e.contains(' ') || e.starts_with(|c: char| c.is_ascii_lowercase()) => {
            Reply::Error(format!("ERR {e}"))
        }
        other => other,
    }
}

/// Stops a run past its deadline, from a thread of its own: a runtime task would be
/// queued on the very worker the run occupies (its LIFO slot, which no other worker
/// steals) and wake only after it. Dropping it ends the thread.
struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

impl Watchdog {
    fn start(running: Arc<Running>, at: std::time::Instant) -> Watchdog {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("dmc-script-deadline".into())
            .spawn(move || {
                let left = at.saturating_duration_since(std::time::Instant::now());
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(left) {
                    running.stop(Stop::TimedOut);
                }
            });
        if let Err(e) = spawned {
            // The hook still keeps the deadline between Lua instructions.
            tracing::warn!(error = %e, "no thread for a script's deadline");
        }
        Watchdog(Some(done))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.take();
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
        self.engine
            .scripts
            .running_count
            .fetch_sub(1, Ordering::AcqRel);
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

/// SCRIPT KILL and FUNCTION KILL: stops the running scripts unless one has written.
pub(crate) fn kill(engine: &Engine) -> Reply {
    let running = engine.scripts.running.lock();
    if running.is_empty() {
        return Reply::err("NOTBUSY No scripts in execution right now.");
    }
    if running.iter().any(|r| r.wrote.load(Ordering::SeqCst)) {
        return Reply::err(
            "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.",
        );
    }
    for r in running.iter() {
        r.stop(Stop::Killed);
    }
    Reply::ok()
}

/// `SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP`.
pub fn script(engine: &Engine, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_uppercase();
    match (sub.as_str(), args.len()) {
        ("LOAD", 3) => {
            let sha = engine.scripts.add(&args[2], true);
            let mut loaded = engine.scripts.loaded.lock();
            if !loaded.contains(&args[2]) {
                loaded.push(args[2].clone());
            }
            Reply::bulk(sha)
        }
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
            engine.scripts.flush();
            Reply::ok()
        }
        ("KILL", 2) => kill(engine),
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
        _ => crate::subcommands::refused(
            "SCRIPT",
            &args[1],
            &["LOAD", "EXISTS", "FLUSH", "KILL", "HELP"],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// EVAL's scripts are kept up to [`EVAL_SCRIPTS_MAX`], the least recently named
    /// going first; SCRIPT LOAD's are never evicted.
    #[test]
    fn eval_scripts_are_bounded_and_loaded_ones_kept() {
        let scripts = Scripts::default();
        let loaded = scripts.add(&Bytes::from_static(b"return 'loaded'"), true);
        let first = scripts.add(&Bytes::from_static(b"return 0"), false);
        let second = scripts.add(&Bytes::from_static(b"return 1"), false);
        // Named again: now the most recent.
        assert!(scripts.get(first.as_bytes()).is_some());
        for i in 2..=EVAL_SCRIPTS_MAX {
            scripts.add(&Bytes::from(format!("return {i}")), false);
        }
        assert!(scripts.get(second.as_bytes()).is_none(), "the oldest went");
        assert!(scripts.get(first.as_bytes()).is_some());
        assert!(scripts.get(loaded.as_bytes()).is_some());
        assert_eq!(scripts.counts(), (EVAL_SCRIPTS_MAX + 1, 1));
    }
}
