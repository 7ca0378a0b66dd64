//! The script sandbox: what a script may reach and what it may not change, on DMC's
//! patched Lua 5.1 (`vendor/lua-src`: read-only tables, no bytecode, bounded pattern
//! matching, an interrupt flag).
//!
//! As Redis 7 does: the globals are the base library without `print`, `loadfile` and
//! `dofile`, plus `string`, `table`, `math`, `redis`, `cjson`, `bit`, `cmsgpack` and
//! `struct`; then the globals, every table reachable from them and their metatables,
//! and the string metatable are made read-only, so `redis.call = f`,
//! `getmetatable('').__index = t` or a new global raise `Attempt to modify a readonly
//! table`, and reading an unknown global is an error. Nothing a script does can change
//! what the next script finds: it can only write tables it made, its own function's
//! environment (set back after every run, [`after_run`]) and the collector's settings
//! (set back too). `KEYS` and `ARGV` are set with the globals writable for that moment
//! ([`set_arguments`]), as Redis does.

use std::collections::HashSet;
use std::ffi::c_int;
use std::sync::atomic::AtomicI32;

use mlua::{Function, Lua, Table, Value, ffi};

unsafe extern "C-unwind" {
    /// The patched Lua's read-only flag of the table at `index`.
    fn lua_enablereadonlytable(state: *mut ffi::lua_State, index: c_int, enabled: c_int);
    /// Points the state at the embedder's interrupt flag (read by long C calls, and by
    /// `pcall`, `xpcall` and `coroutine.resume`, which re-raise while it is set).
    fn lua_setinterruptflag(state: *mut ffi::lua_State, flag: *mut c_int);
}

/// The globals a script may not have (Redis's deny list).
const REMOVED: [&str; 3] = ["print", "loadfile", "dofile"];

/// Removes what scripts may not call; run before anything else is installed.
pub(super) fn trim_globals(lua: &Lua) -> mlua::Result<()> {
    let g = lua.globals();
    for name in REMOVED {
        g.raw_set(name, Value::Nil)?;
    }
    Ok(())
}

/// Locks the finished environment: an unknown global read is an error, and the
/// globals, every table reachable from them (and their metatables) and the string
/// metatable become read-only. Walks with an explicit stack (no recursion).
pub(super) fn lock(lua: &Lua) -> mlua::Result<()> {
    let g = lua.globals();
    let guard = lua.create_table()?;
    guard.raw_set(
        "__index",
        lua.create_function(|lua, (_, name): (Value, Value)| -> mlua::Result<()> {
            let name = match name {
                Value::String(s) => s.to_string_lossy(),
                other => other.to_string()?,
            };
            Err(super::libs::raised(
                lua,
                format!("Script attempted to access nonexistent global variable '{name}'"),
            ))
        })?,
    )?;
    g.set_metatable(Some(guard))?;
    let string_meta: Table = lua.load("return getmetatable('')").eval()?;
    let mut seen: HashSet<*const std::ffi::c_void> = HashSet::new();
    let mut todo = vec![g, string_meta];
    while let Some(t) = todo.pop() {
        if !seen.insert(t.to_pointer()) {
            continue;
        }
        for pair in t.pairs::<Value, Value>() {
            if let (_, Value::Table(inner)) = pair? {
                todo.push(inner);
            }
        }
        if let Some(meta) = t.metatable() {
            todo.push(meta);
        }
        set_readonly(lua, &t, true)?;
    }
    Ok(())
}

/// Sets or clears table `t`'s read-only flag.
fn set_readonly(lua: &Lua, t: &Table, on: bool) -> mlua::Result<()> {
    // SAFETY: the table is the one argument on the stack; the call sets a flag of it
    // and pops it, leaving nothing (no results).
    unsafe {
        lua.exec_raw::<()>(t, |state| {
            lua_enablereadonlytable(state, -1, c_int::from(on));
            ffi::lua_pop(state, 1);
        })
    }
}

/// Points `lua` at `flag`: while it is non-zero, long C calls raise and a script
/// cannot catch the error. The flag must outlive the state (the state keeps it in an
/// `Arc` beside itself).
pub(super) fn set_interrupt_flag(lua: &Lua, flag: &AtomicI32) -> mlua::Result<()> {
    let ptr = flag.as_ptr();
    // SAFETY: `ptr` stays valid for the state's life (see above); the call pops
    // nothing and pushes nothing.
    unsafe { lua.exec_raw::<()>((), |state| lua_setinterruptflag(state, ptr)) }
}

/// Sets the globals `KEYS` and `ARGV` of the run about to start, the globals writable
/// only while it does.
pub(super) fn set_arguments(lua: &Lua, keys: Table, argv: Table) -> mlua::Result<()> {
    // SAFETY: the stack holds `keys` then `argv`; each is popped by its rawset, the
    // globals are read-only again before the call returns, and nothing is left.
    unsafe {
        lua.exec_raw::<()>((keys, argv), |state| {
            lua_enablereadonlytable(state, ffi::LUA_GLOBALSINDEX, 0);
            ffi::lua_pushstring(state, c"ARGV".as_ptr());
            ffi::lua_insert(state, -2);
            ffi::lua_rawset(state, ffi::LUA_GLOBALSINDEX);
            ffi::lua_pushstring(state, c"KEYS".as_ptr());
            ffi::lua_insert(state, -2);
            ffi::lua_rawset(state, ffi::LUA_GLOBALSINDEX);
            lua_enablereadonlytable(state, ffi::LUA_GLOBALSINDEX, 1);
        })
    }
}

/// Undoes what a run may have changed that outlives it: its function's environment
/// (`setfenv(1, t)`) back to the globals, and the collector running with its default
/// settings (`collectgarbage('stop')`, `'setpause'`, `'setstepmul'`).
pub(super) fn after_run(lua: &Lua, func: &Function) -> mlua::Result<()> {
    // SAFETY: the stack holds the function; `lua_setfenv` with the globals pushed
    // pops them, then the function is popped; `lua_gc` leaves the stack as it is.
    unsafe {
        lua.exec_raw::<()>(func, |state| {
            ffi::lua_pushvalue(state, ffi::LUA_GLOBALSINDEX);
            ffi::lua_setfenv(state, -2);
            ffi::lua_pop(state, 1);
            ffi::lua_gc(state, ffi::LUA_GCRESTART, 0);
            ffi::lua_gc(state, ffi::LUA_GCSETPAUSE, 200);
            ffi::lua_gc(state, ffi::LUA_GCSETSTEPMUL, 200);
        })
    }
}
