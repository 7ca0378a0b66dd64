//! Redis 7 functions: FUNCTION LOAD/LIST/DELETE/FLUSH/STATS/KILL/HELP, FCALL and
//! FCALL_RO. A library is Lua source whose first line is `#!lua name=LIBRARY` and
//! whose code calls `redis.register_function(name, callback)` (or the table form with
//! `function_name`, `callback`, `flags`, `description`).
//!
//! Libraries run on the scripts' machinery: FUNCTION LOAD runs the library once as a
//! script whose `redis.register_function` only records, to learn (and check) its
//! functions and flags; FCALL runs a script made of the library with its first line
//! replaced by a one-line prelude that collects the registrations, then calls the named
//! function with `KEYS` and `ARGV` — so its line numbers are the library's, it is
//! compiled once per state (by its SHA) and it is atomic as any script (one commit).
//! A function flagged `no-writes` runs as a read-only script, and FCALL_RO refuses the
//! others as Redis does. Libraries are kept per agent; a cluster's are the instance's,
//! installed by every agent ([`Engine::install_functions`]; the router's
//! `functions.rs`).

use std::collections::BTreeMap;

use bytes::Bytes;
use dmc_resp::Reply;

use crate::{Engine, Session};

/// One loaded library.
#[derive(Debug, Clone)]
pub struct Library {
    pub code: Bytes,
    /// Its functions: name, flags, description.
    pub functions: Vec<Function>,
}

#[derive(Debug, Clone)]
pub struct Function {
    pub name: String,
    pub flags: Vec<String>,
    pub description: Option<String>,
    /// The script FCALL runs for it (the library wrapped to call it) and its SHA,
    /// made once at load.
    call: Bytes,
    sha: String,
}

/// The libraries of this agent, by name.
#[derive(Default)]
pub struct Functions {
    pub(super) libraries: parking_lot::Mutex<BTreeMap<String, Library>>,
    /// The version of the instance's libraries (kept by the cluster manager) these
    /// are; 0 standalone or before any was stored.
    version: std::sync::atomic::AtomicU64,
    /// Held while a list is installed (it compiles, awaiting): one at a time, so an
    /// older list never lands after a newer one.
    installing: tokio::sync::Mutex<()>,
}

/// The flags `register_function` accepts (Redis 7.0).
const FLAGS: &[&str] = &[
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

/// The prelude that replaces a library's first line: `redis` is shadowed by a table
/// whose `register_function` records into `__dmc_fns` (the rest of `redis` as usual),
/// and the library's code becomes the body of `__dmc_lib`.
const PRELUDE: &str = "local __dmc_fns = {} local redis = setmetatable({register_function = function(a, b) local n, c, f, d if type(a) == 'table' then n, c, f, d = a.function_name, a.callback, a.flags, a.description else n, c = a, b end if type(n) ~= 'string' or n == '' then error('function name must be a non empty string') end if type(c) ~= 'function' then error('function argument given to redis.register_function must be a function') end if __dmc_fns[n] ~= nil then error('Function already exists in the library') end __dmc_fns[n] = {c, f or {}, d} end}, {__index = redis}) local __dmc_lib = function()";

/// The library's name from its first line, and the code after it.
fn parse_header(code: &[u8]) -> Result<(String, &[u8]), Reply> {
    let text = std::str::from_utf8(code).map_err(|_| Reply::err("ERR Missing library metadata"))?;
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let Some(meta) = first.strip_prefix("#!") else {
        return Err(Reply::err("ERR Missing library metadata"));
    };
    let mut parts = meta.split_whitespace();
    let engine = parts.next().unwrap_or_default();
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(Reply::Error(format!("ERR Engine '{engine}' not found")));
    }
    let mut name = None;
    for p in parts {
        match p.split_once('=') {
            Some(("name", n)) => name = Some(n.to_string()),
            _ => {
                return Err(Reply::Error(format!(
                    "ERR Invalid metadata value given: {p}"
                )));
            }
        }
    }
    let name = name.ok_or_else(|| Reply::err("ERR Library name was not given"))?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Reply::err(
            "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long",
        ));
    }
    Ok((name, rest.as_bytes()))
}

/// A script: `PRELUDE`, the library's code after its first line as the body of a
/// function the script calls once (so a `return` in it ends only the library), then
/// `tail`.
fn wrapped(rest: &[u8], tail: &str) -> Bytes {
    let mut body = Vec::with_capacity(PRELUDE.len() + rest.len() + tail.len() + 24);
    body.extend_from_slice(PRELUDE.as_bytes());
    body.push(b'\n');
    body.extend_from_slice(rest);
    body.extend_from_slice(b"\nend __dmc_lib() ");
    body.extend_from_slice(tail.as_bytes());
    Bytes::from(body)
}

/// The tail of FUNCTION LOAD's run: every registration as `{name, {flags}, description}`.
const LIST_TAIL: &str = "local __dmc_out = {} for n, f in pairs(__dmc_fns) do __dmc_out[#__dmc_out + 1] = {n, f[2], f[3] or false} end return __dmc_out";

/// The tail of FCALL: call the function `name`.
fn call_tail(name: &str) -> String {
    let quoted: String = name.bytes().map(|b| format!("\\{b}")).collect();
    format!("local __dmc_f = __dmc_fns[\"{quoted}\"] return __dmc_f[1](KEYS, ARGV)")
}

impl Functions {
    /// Each library's code, by name.
    pub fn codes(&self) -> Vec<String> {
        self.libraries
            .lock()
            .values()
            .map(|l| String::from_utf8_lossy(&l.code).into_owned())
            .collect()
    }

    /// The version of the instance's libraries these are.
    pub fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Function `name`.
    fn find(&self, name: &str) -> Option<Function> {
        self.libraries
            .lock()
            .values()
            .find_map(|l| l.functions.iter().find(|f| f.name == name).cloned())
    }
}

/// `FUNCTION LOAD [REPLACE] code`.
async fn load(engine: &Engine, session: &mut Session, args: &[Bytes]) -> Reply {
    let (replace, code) = match args.len() {
        3 => (false, &args[2]),
        4 if args[2].eq_ignore_ascii_case(b"REPLACE") => (true, &args[3]),
        4 => {
            return Reply::Error(format!(
                "ERR Unknown option given: {}",
                String::from_utf8_lossy(&args[2])
            ));
        }
        _ => return Reply::err("ERR wrong number of arguments for 'function|load' command"),
    };
    let name = match parse_header(code) {
        Ok((name, _)) => name,
        Err(e) => return e,
    };
    if !replace && engine.functions.libraries.lock().contains_key(&name) {
        return Reply::Error(format!("ERR Library '{name}' already exists"));
    }
    let library = match compile(engine, session, code).await {
        Ok((_, library)) => library,
        Err(e) => return e,
    };
    let mut libs = engine.functions.libraries.lock();
    if let Some(taken) = taken_function(&libs, &name, &library) {
        return Reply::Error(format!("ERR Function {taken} already exists"));
    }
    libs.insert(name.clone(), library);
    Reply::Bulk(Bytes::from(name))
}

/// A function of `library` (to be named `name`) that another library of `libs`
/// already has.
pub(super) fn taken_function<'a>(
    libs: &BTreeMap<String, Library>,
    name: &str,
    library: &'a Library,
) -> Option<&'a str> {
    library
        .functions
        .iter()
        .find(|f| {
            libs.iter()
                .any(|(n, l)| n != name && l.functions.iter().any(|g| g.name == f.name))
        })
        .map(|f| f.name.as_str())
}

/// Runs a library's code once to learn its name and functions (FUNCTION LOAD and
/// RESTORE), with Redis's errors.
pub(super) async fn compile(
    engine: &Engine,
    session: &mut Session,
    code: &Bytes,
) -> Result<(String, Library), Reply> {
    let (name, rest) = parse_header(code)?;
    let body = wrapped(rest, LIST_TAIL);
    let sha = super::sha1_hex(&body);
    let registered = match super::run_library_load(engine, session, &body, &sha).await {
        Reply::Array(items) => items,
        Reply::Error(e) => {
            // The library's own error, without the wrapper's script SHA, as Redis
            // words it.
            let text = e.split(" script: ").next().unwrap_or(&e);
            return Err(Reply::Error(format!(
                "ERR Error registering functions: {}",
                text.replace("user_script:", "user_function:")
            )));
        }
        other => {
            return Err(Reply::Error(format!(
                "ERR the library did not load: {other:?}"
            )));
        }
    };
    let mut functions = Vec::new();
    for item in registered {
        let Reply::Array(parts) = item else { continue };
        let Some(Reply::Bulk(n)) = parts.first() else {
            continue;
        };
        let name = String::from_utf8_lossy(n).into_owned();
        let flags: Vec<String> = match parts.get(1) {
            Some(Reply::Array(fl)) => fl
                .iter()
                .filter_map(|f| match f {
                    Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        if flags.iter().any(|f| !FLAGS.contains(&f.as_str())) {
            return Err(Reply::err(
                "ERR Error registering functions: ERR unknown flag given",
            ));
        }
        let description = match parts.get(2) {
            Some(Reply::Bulk(d)) => Some(String::from_utf8_lossy(d).into_owned()),
            _ => None,
        };
        let call = wrapped(rest, &call_tail(&name));
        let sha = super::sha1_hex(&call);
        functions.push(Function {
            name,
            flags,
            description,
            call,
            sha,
        });
    }
    if functions.is_empty() {
        return Err(Reply::err("ERR No functions registered"));
    }
    functions.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((
        name,
        Library {
            code: code.clone(),
            functions,
        },
    ))
}

impl Engine {
    /// Makes this agent's libraries the instance's `codes` of `version` (from the
    /// cluster map, or the manager's answer to a change): nothing if these are that
    /// version already; a library that does not compile is left out and logged.
    pub async fn install_functions(&self, codes: &[String], version: u64) {
        let _one = self.functions.installing.lock().await;
        if version <= self.functions.version() {
            return;
        }
        let same = {
            let mut now = self.functions.codes();
            let mut wanted = codes.to_vec();
            now.sort();
            wanted.sort();
            now == wanted
        };
        if !same {
            let mut session = self.new_session("dmc:functions".into(), String::new(), -1);
            let mut next = BTreeMap::new();
            for code in codes {
                match compile(self, &mut session, &Bytes::from(code.clone())).await {
                    Ok((name, library)) => {
                        next.insert(name, library);
                    }
                    Err(e) => {
                        tracing::error!(version, error = ?e, "a library of the instance does not load here")
                    }
                }
            }
            self.clients.unregister(session.id);
            *self.functions.libraries.lock() = next;
        }
        self.functions
            .version
            .fetch_max(version, std::sync::atomic::Ordering::AcqRel);
    }
}

/// `FCALL` and `FCALL_RO name numkeys key... arg...`.
pub async fn fcall(
    engine: &Engine,
    session: &mut Session,
    args: &[Bytes],
    read_only: bool,
) -> Reply {
    let name = String::from_utf8_lossy(&args[1]).into_owned();
    let Some(function) = engine.functions.find(&name) else {
        return Reply::err("ERR Function not found");
    };
    let no_writes = function.flags.iter().any(|f| f == "no-writes");
    if read_only && !no_writes {
        return Reply::err("ERR Can not execute a script with write flag using *_ro command.");
    }
    let n = match super::numkeys(args) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let reply = super::run_body(
        engine,
        session,
        &function.call,
        &function.sha,
        &args[3..3 + n],
        &args[3 + n..],
        no_writes,
    )
    .await;
    match reply {
        // Errors name the function, as Redis's do, not the wrapper's SHA.
        Reply::Error(e) => match e.split_once(" script: ") {
            Some((text, _)) => Reply::Error(format!(
                "{} script: {name}, on @user_function:{}.",
                text.replace("user_script:", "user_function:"),
                line_of(&e)
            )),
            None => Reply::Error(e),
        },
        other => other,
    }
}

/// The line a script error names (`on @user_script:N.`).
fn line_of(e: &str) -> String {
    e.rsplit_once("@user_script:")
        .map(|(_, n)| n.trim_end_matches('.').to_string())
        .unwrap_or_else(|| "1".into())
}

/// `FUNCTION LOAD|LIST|DELETE|FLUSH|STATS|KILL|HELP`.
pub async fn function(engine: &Engine, session: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_uppercase();
    match (sub.as_str(), args.len()) {
        ("LOAD", _) => load(engine, session, args).await,
        ("DELETE", 3) => {
            let name = String::from_utf8_lossy(&args[2]).into_owned();
            match engine.functions.libraries.lock().remove(&name) {
                Some(_) => Reply::ok(),
                None => Reply::err("ERR Library not found"),
            }
        }
        ("FLUSH", 2) | ("FLUSH", 3) => {
            if let Some(mode) = args.get(2) {
                let mode = String::from_utf8_lossy(mode).to_ascii_uppercase();
                if mode != "ASYNC" && mode != "SYNC" {
                    return Reply::err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
                }
            }
            engine.functions.libraries.lock().clear();
            Reply::ok()
        }
        ("LIST", _) => list(engine, &args[2..]),
        ("STATS", 2) => {
            let libs = engine.functions.libraries.lock();
            let functions: usize = libs.values().map(|l| l.functions.len()).sum();
            Reply::Map(vec![
                (Reply::bulk("running_script"), Reply::Null),
                (
                    Reply::bulk("engines"),
                    Reply::Map(vec![(
                        Reply::bulk("LUA"),
                        Reply::Map(vec![
                            (
                                Reply::bulk("libraries_count"),
                                Reply::Int(libs.len() as i64),
                            ),
                            (Reply::bulk("functions_count"), Reply::Int(functions as i64)),
                        ]),
                    )]),
                ),
            ])
        }
        ("KILL", 2) => super::kill(engine),
        ("DUMP", 2) => super::function_dump::dump(engine),
        ("RESTORE", 3 | 4) => super::function_dump::restore(engine, session, args).await,
        ("HELP", 2) => Reply::Array(
            HELP.iter()
                .map(|l| Reply::Status((*l).to_string()))
                .collect(),
        ),
        ("DELETE" | "FLUSH" | "STATS" | "KILL" | "HELP" | "DUMP", _) => Reply::Error(format!(
            "ERR wrong number of arguments for 'function|{}' command",
            sub.to_ascii_lowercase()
        )),
        _ => crate::subcommands::refused(
            "FUNCTION",
            &args[1],
            &[
                "LOAD", "LIST", "DELETE", "FLUSH", "STATS", "KILL", "HELP", "DUMP", "RESTORE",
            ],
        ),
    }
}

/// `FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]`.
fn list(engine: &Engine, opts: &[Bytes]) -> Reply {
    let (mut pattern, mut with_code) = (None, false);
    let mut i = 0;
    while i < opts.len() {
        if opts[i].eq_ignore_ascii_case(b"WITHCODE") && !with_code {
            with_code = true;
            i += 1;
        } else if opts[i].eq_ignore_ascii_case(b"LIBRARYNAME") && pattern.is_none() {
            let Some(p) = opts.get(i + 1) else {
                return Reply::err("ERR library name argument was not given");
            };
            pattern = Some(p.clone());
            i += 2;
        } else {
            return Reply::Error(format!(
                "ERR Unknown argument {}",
                String::from_utf8_lossy(&opts[i])
            ));
        }
    }
    let libs = engine.functions.libraries.lock();
    let items = libs
        .iter()
        .filter(|(name, _)| {
            pattern
                .as_ref()
                .is_none_or(|p| crate::glob::glob(p, name.as_bytes(), false))
        })
        .map(|(name, lib)| {
            let functions = lib
                .functions
                .iter()
                .map(|f| {
                    Reply::Map(vec![
                        (Reply::bulk("name"), Reply::bulk(f.name.clone())),
                        (
                            Reply::bulk("description"),
                            f.description.clone().map_or(Reply::Null, Reply::bulk),
                        ),
                        (
                            Reply::bulk("flags"),
                            Reply::Set(
                                f.flags.iter().map(|fl| Reply::Status(fl.clone())).collect(),
                            ),
                        ),
                    ])
                })
                .collect();
            let mut fields = vec![
                (Reply::bulk("library_name"), Reply::bulk(name.clone())),
                (Reply::bulk("engine"), Reply::bulk("LUA")),
                (Reply::bulk("functions"), Reply::Array(functions)),
            ];
            if with_code {
                fields.push((Reply::bulk("library_code"), Reply::Bulk(lib.code.clone())));
            }
            Reply::Map(fields)
        })
        .collect();
    Reply::Array(items)
}

const HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];
