//! ACL in the running engine: the users this agent checks commands against
//! ([`AclState`]: the registry, the ACL log, the generation a connection compares to
//! notice a change), the check dispatch and MULTI's queue make before a command runs,
//! AUTH's question, and the `ACL` command family. The model itself — rules, checks,
//! texts — is [`crate::acl`].
//!
//! A connection holds its user (an `Arc`); when the registry changes (its generation
//! moves) the connection takes its user's new rules before its next command, and a
//! connection whose user was deleted is closed, as Redis closes them. In a cluster the
//! users are the instance's, kept by the cluster manager: the agent's router sends
//! `ACL SETUSER`/`DELUSER`/`LOAD` there and every agent installs what the manager's map
//! carries ([`AclState::install`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use dmc_resp::Reply;
use parking_lot::{Mutex, RwLock};

use crate::acl::{self, AclError, AclLog, Context, Denied, LogEntry, User, Users};
use crate::table::Spec;
use crate::upper;
use crate::{Engine, Flow, Session};

/// The users of this agent and what it logged about them.
pub struct AclState {
    users: RwLock<Users>,
    log: Mutex<AclLog>,
    /// Bumped by every change: connections compare it to take their user's new rules.
    generation: AtomicU64,
    /// The manager's version of the users installed last (0: none, standalone).
    installed: AtomicU64,
    /// `aclfile`: where ACL SAVE writes and ACL LOAD reads (standalone).
    file: Option<PathBuf>,
    /// `requirepass` as last set, for CONFIG GET (the users keep only its hash).
    requirepass: Mutex<String>,
}

impl AclState {
    /// The users of `aclfile` when it exists, else the default user with
    /// `requirepass`'s password (or `nopass`).
    pub fn new(requirepass: Option<&[u8]>, file: Option<PathBuf>) -> Result<AclState, String> {
        let users = match &file {
            Some(path) if path.exists() => {
                let text = std::fs::read(path)
                    .map_err(|e| format!("reading the aclfile {}: {e}", path.display()))?;
                Users::from_acl_file(&text, &path.display().to_string())
                    .map_err(|e| e.to_string())?
            }
            _ => Users::new(requirepass),
        };
        let state = AclState::with_users(users, file);
        *state.requirepass.lock() =
            String::from_utf8_lossy(requirepass.unwrap_or_default()).into_owned();
        Ok(state)
    }

    /// These users, with `file` as the aclfile.
    pub fn with_users(users: Users, file: Option<PathBuf>) -> AclState {
        AclState {
            users: RwLock::new(users),
            log: Mutex::new(AclLog::new(acl::DEFAULT_MAX_LEN)),
            generation: AtomicU64::new(1),
            installed: AtomicU64::new(0),
            file,
            requirepass: Mutex::new(String::new()),
        }
    }

    /// `CONFIG SET requirepass`: the default user's only password (empty: `nopass`).
    pub fn set_requirepass(&self, password: &[u8]) {
        let _ = self.change(|u| {
            u.set_requirepass((!password.is_empty()).then_some(password));
            Ok(())
        });
        *self.requirepass.lock() = String::from_utf8_lossy(password).into_owned();
    }

    /// `CONFIG GET requirepass`.
    pub fn requirepass(&self) -> String {
        self.requirepass.lock().clone()
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn lookup(&self, name: &[u8]) -> Option<Arc<User>> {
        self.users.read().get(name)
    }

    pub fn default_user(&self) -> Arc<User> {
        self.users.read().default_user()
    }

    /// The users as an ACL file, and the manager's version they came with.
    pub fn snapshot(&self) -> (Users, u64) {
        (
            self.users.read().clone(),
            self.installed.load(Ordering::Acquire),
        )
    }

    /// The instance's users as the manager keeps them (`text`, ACL file lines), at
    /// `version`; an older or equal version than installed is ignored.
    pub fn install(&self, text: &[u8], version: u64) -> Result<bool, AclError> {
        if version <= self.installed.load(Ordering::Acquire) {
            return Ok(false);
        }
        let users = Users::from_acl_file(text, "the cluster manager's users")?;
        let mut current = self.users.write();
        if version <= self.installed.load(Ordering::Acquire) {
            return Ok(false);
        }
        *current = users;
        self.installed.store(version, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(true)
    }

    /// Changes the users here (standalone, or a test).
    pub fn change<T>(
        &self,
        f: impl FnOnce(&mut Users) -> Result<T, AclError>,
    ) -> Result<T, AclError> {
        let mut users = self.users.write();
        let mut next = users.clone();
        let out = f(&mut next)?;
        *users = next;
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(out)
    }

    fn log(&self, entry: LogEntry) {
        self.log.lock().add(entry);
    }
}

/// The command's context for the ACL log.
fn context(session: &Session) -> Context {
    if session.in_script {
        Context::Lua
    } else if crate::multi::in_exec() {
        Context::Multi
    } else {
        Context::Toplevel
    }
}

fn client_info(engine: &Engine, session: &Session) -> String {
    let mut line = session
        .client
        .line(&engine.clients, engine.pubsub.counts(session.id));
    if line.ends_with('\n') {
        line.pop();
    }
    line
}

/// The session's user, current: after a change of the users the connection takes its
/// user's new rules; `false` when its user was deleted (a client's connection is
/// closed). The session then holds a user of the same name with no permissions, so a
/// later check — a script's next call after a `pcall`, a peer connection's next command
/// — is refused too, not allowed by the rules from before.
fn refresh(engine: &Engine, session: &mut Session) -> bool {
    let generation = engine.acl.generation();
    if session.acl_generation == generation {
        return true;
    }
    session.acl_generation = generation;
    match engine.acl.lookup(session.user.name()) {
        Some(user) => {
            session.user = user;
            true
        }
        None => {
            session.user = Arc::new(User::new(session.user.name().clone()));
            false
        }
    }
}

/// Whether the session's user may run this call (after the arity and authentication
/// checks); a refusal is logged and answered with Redis's `-NOPERM` text.
pub(crate) fn check(
    engine: &Engine,
    session: &mut Session,
    spec: &Spec,
    args: &[Bytes],
) -> Result<(), (Reply, Flow)> {
    if session.peer && !session.acts_for_client {
        // The agent's own command (a relay, a cache feed), not a client's.
        return Ok(());
    }
    if !refresh(engine, session) {
        // A peer connection serves other clients after this one: it stays open.
        let flow = if session.peer {
            Flow::Continue
        } else {
            Flow::Close
        };
        return Err((
            Reply::err("NOPERM the user of this command was deleted"),
            flow,
        ));
    }
    if session.user.unrestricted() {
        return Ok(());
    }
    session.user.check(spec, args).map_err(|denied| {
        deny(engine, session, &denied);
        (Reply::Error(denied.to_string()), Flow::Continue)
    })
}

/// [`check`] of a script's `redis.call`: a refusal is logged (context `lua`) and
/// answered with the script error texts Redis gives.
pub(crate) fn check_script(
    engine: &Engine,
    session: &mut Session,
    spec: &Spec,
    args: &[Bytes],
) -> Result<(), &'static str> {
    if session.peer && !session.acts_for_client {
        return Ok(());
    }
    // A user deleted while its script runs: the script's calls fail (closed), they do
    // not go on with the rules from before.
    if !refresh(engine, session) {
        return Err("ERR The user executing the script was deleted");
    }
    if session.user.unrestricted() {
        return Ok(());
    }
    session.user.check(spec, args).map_err(|denied| {
        deny(engine, session, &denied);
        match denied {
            Denied::Command(_) => {
                "ERR The user executing the script can't run this command or subcommand"
            }
            Denied::Key(_) => {
                "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments"
            }
            Denied::Channel(_) => {
                "ERR The user executing the script can't publish to the channel mentioned in the command"
            }
        }
    })
}

/// `DMC.USER [name]` on a peer connection: its next commands run as user `name` of
/// this agent's users, checked as that user ([`check`]); a user this agent does not
/// know or that is off leaves the session able to run nothing (it fails closed); no
/// name: the agent's own commands again.
pub fn act_for(engine: &Engine, session: &mut Session, name: Option<&Bytes>) -> Reply {
    let Some(name) = name else {
        session.acts_for_client = false;
        return Reply::ok();
    };
    session.acts_for_client = true;
    session.acl_generation = engine.acl.generation();
    match engine.acl.lookup(name).filter(|u| u.enabled()) {
        Some(user) => {
            session.user = user;
            Reply::ok()
        }
        None => {
            session.user = Arc::new(crate::acl::User::new("(unknown)"));
            Reply::Error(format!(
                "NOPERM user '{}' is not known here or is off",
                String::from_utf8_lossy(name)
            ))
        }
    }
}

impl Engine {
    /// [`check`] for the agent's router, which decides before it forwards a command.
    pub fn acl_check(
        &self,
        session: &mut Session,
        spec: &Spec,
        args: &[Bytes],
    ) -> Result<(), (Reply, Flow)> {
        check(self, session, spec, args)
    }
}

fn deny(engine: &Engine, session: &Session, denied: &Denied) {
    engine.acl.log(LogEntry::denied(
        denied,
        context(session),
        Bytes::copy_from_slice(session.user.name()),
        client_info(engine, session),
        engine.now_ms(),
    ));
}

/// `AUTH [user] password` and `HELLO ... AUTH user password` (`command` is the
/// command's name as sent, for the log): the user, if it exists, is enabled and has
/// this password. The one-argument form names `default`, and is an error while the
/// default user has no password.
pub(crate) fn authenticate(
    engine: &Engine,
    session: &mut Session,
    command: &Bytes,
    user: Option<&[u8]>,
    password: &[u8],
) -> Result<(), Reply> {
    let name = user.unwrap_or(b"default");
    if user.is_none() && engine.acl.default_user().nopass() {
        return Err(Reply::err(
            "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        ));
    }
    let found = engine.acl.users.read().authenticate(name, password);
    match found {
        Some(u) => {
            session.client.set_user(u.name());
            session.user = u;
            session.acl_generation = engine.acl.generation();
            session.authenticated = true;
            Ok(())
        }
        None => {
            engine.acl.log(LogEntry::auth(
                command.clone(),
                context(session),
                Bytes::copy_from_slice(name),
                client_info(engine, session),
                engine.now_ms(),
            ));
            Err(Reply::err(acl::WRONGPASS))
        }
    }
}

/// A new or RESET connection's user and whether it starts authenticated (the default
/// user is enabled and has no password).
pub(crate) fn initial(engine: &Engine) -> (Arc<User>, u64, bool) {
    let user = engine.acl.default_user();
    let open = user.enabled() && user.nopass();
    (user, engine.acl.generation(), open)
}

const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
];

const NO_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

/// Whether `ACL <sub>` changes the users (in a cluster it goes to the manager).
pub fn is_change(args: &[Bytes]) -> bool {
    args.get(1)
        .is_some_and(|s| matches!(upper(s).as_str(), "SETUSER" | "DELUSER" | "LOAD"))
}

/// Applies a changing `ACL` call (SETUSER, DELUSER) to `users`: what the router sends
/// the manager in a cluster. The reply is the call's.
pub fn apply_change(users: &mut Users, args: &[Bytes]) -> Result<Reply, AclError> {
    match args.get(1).map(|s| upper(s)).as_deref() {
        Some("SETUSER") => {
            users.setuser(&args[2], &args[3..])?;
            Ok(Reply::ok())
        }
        Some("DELUSER") => Ok(Reply::Int(users.deluser(&args[2..])?.len() as i64)),
        _ => Ok(Reply::err("ERR not a change of the users")),
    }
}

/// The `ACL` command.
pub fn run(engine: &Engine, session: &mut Session, args: &[Bytes]) -> Reply {
    let sub = upper(&args[1]);
    let arity =
        |min: usize, max: Option<usize>| args.len() >= min && max.is_none_or(|m| args.len() <= m);
    let wrong = || {
        Reply::Error(format!(
            "ERR wrong number of arguments for 'acl|{}' command",
            sub.to_ascii_lowercase()
        ))
    };
    let result: Result<Reply, AclError> = match sub.as_str() {
        "HELP" => Ok(Reply::Array(
            HELP.iter().map(|l| Reply::Status(l.to_string())).collect(),
        )),
        "WHOAMI" if arity(2, Some(2)) => {
            Ok(Reply::Bulk(Bytes::copy_from_slice(session.user.name())))
        }
        "USERS" if arity(2, Some(2)) => Ok(Reply::Array(
            engine
                .acl
                .users
                .read()
                .names()
                .into_iter()
                .map(Reply::Bulk)
                .collect(),
        )),
        "LIST" if arity(2, Some(2)) => Ok(Reply::Array(
            engine
                .acl
                .users
                .read()
                .list()
                .into_iter()
                .map(Reply::Bulk)
                .collect(),
        )),
        "GETUSER" if arity(3, Some(3)) => Ok(match engine.acl.lookup(&args[2]) {
            Some(u) => u.getuser_reply(),
            None => Reply::Null,
        }),
        "CAT" if arity(2, Some(3)) => match args.get(2) {
            None => Ok(Reply::Array(
                acl::category_names().into_iter().map(Reply::bulk).collect(),
            )),
            Some(cat) => acl::commands_in_category(cat)
                .map(|names| Reply::Array(names.into_iter().map(Reply::bulk).collect())),
        },
        "GENPASS" if arity(2, Some(3)) => {
            acl::genpass(args.get(2).map(|b| &b[..])).map(Reply::bulk)
        }
        "LOG" if arity(2, Some(3)) => engine
            .acl
            .log
            .lock()
            .command(args.get(2).map(|b| &b[..]), engine.now_ms()),
        "DRYRUN" if arity(4, None) => Ok(dryrun(engine, args)),
        "SETUSER" if arity(3, None) => engine.acl.change(|u| apply_change(u, args)),
        "DELUSER" if arity(3, None) => engine.acl.change(|u| apply_change(u, args)),
        "SAVE" if arity(2, Some(2)) => Ok(save(engine)),
        "LOAD" if arity(2, Some(2)) => load(engine),
        "WHOAMI" | "USERS" | "LIST" | "GETUSER" | "CAT" | "GENPASS" | "LOG" | "DRYRUN"
        | "SETUSER" | "DELUSER" | "SAVE" | "LOAD" => Ok(wrong()),
        _ => Ok(Reply::Error(format!(
            "ERR unknown subcommand '{}'. Try ACL HELP.",
            String::from_utf8_lossy(&args[1])
        ))),
    };
    result.unwrap_or_else(|e| e.reply())
}

/// `ACL DRYRUN user command args...`.
fn dryrun(engine: &Engine, args: &[Bytes]) -> Reply {
    let Some(user) = engine.acl.lookup(&args[2]) else {
        return Reply::Error(format!(
            "ERR User '{}' not found",
            String::from_utf8_lossy(&args[2])
        ));
    };
    let call = &args[3..];
    let Some(spec) = crate::table::lookup(&call[0]) else {
        return Reply::Error(format!(
            "ERR Command '{}' not found",
            String::from_utf8_lossy(&call[0])
        ));
    };
    if !spec.arity_ok(call.len()) {
        return Reply::Error(format!(
            "ERR wrong number of arguments for '{}' command",
            spec.name
        ));
    }
    match user.check(spec, call) {
        Ok(()) => Reply::ok(),
        Err(d) => Reply::bulk(d.dryrun_text()),
    }
}

fn save(engine: &Engine) -> Reply {
    let Some(path) = &engine.acl.file else {
        return Reply::err(NO_FILE);
    };
    let text = engine.acl.users.read().to_acl_file();
    let tmp = path.with_extension("tmp");
    match std::fs::write(&tmp, &text).and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Reply::ok(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ACL SAVE failed");
            Reply::err(
                "ERR There was an error trying to save the ACLs. Please check the server logs for more information",
            )
        }
    }
}

fn load(engine: &Engine) -> Result<Reply, AclError> {
    let Some(path) = &engine.acl.file else {
        return Ok(Reply::err(NO_FILE));
    };
    let text = std::fs::read(path).map_err(|e| {
        AclError::Load(format!(
            "Error loading ACLs, opening file '{}': {e}",
            path.display()
        ))
    })?;
    let users = Users::from_acl_file(&text, &path.display().to_string())?;
    engine.acl.change(|u| {
        *u = users;
        Ok(Reply::ok())
    })
}
