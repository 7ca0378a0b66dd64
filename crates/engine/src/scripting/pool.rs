//! The agent's Lua states: at most [`STATES`] exist at once (idle or running a
//! script), and together they may hold at most `lua-memory-limit` bytes — each state
//! gets an equal share as its memory limit when it is taken. A script that finds every
//! state busy waits for one before it takes any key lock (a script holding a state may
//! wait for locks, in lock order: the two kinds of wait cannot close a cycle).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::state::State;

/// The most Lua states (scripts running at once) an agent has.
pub const STATES: usize = 8;
/// `lua-memory-limit`'s default: 128 MiB per state.
pub const DEFAULT_MEMORY_LIMIT: usize = 1 << 30;
/// The smallest `lua-memory-limit` accepted (a state with less cannot start).
pub const MIN_MEMORY_LIMIT: usize = STATES * (4 << 20);

/// Idle states and the permits to use one.
pub struct StatePool {
    idle: parking_lot::Mutex<Vec<State>>,
    permits: tokio::sync::Semaphore,
    /// `lua-memory-limit`: what all states may hold together.
    memory_limit: AtomicUsize,
}

impl Default for StatePool {
    fn default() -> Self {
        StatePool {
            idle: Default::default(),
            permits: tokio::sync::Semaphore::new(STATES),
            memory_limit: AtomicUsize::new(DEFAULT_MEMORY_LIMIT),
        }
    }
}

/// A state taken from the pool; back to it when dropped.
pub struct Taken<'a> {
    pool: &'a StatePool,
    state: Option<State>,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl StatePool {
    /// `lua-memory-limit` in bytes.
    pub fn memory_limit(&self) -> usize {
        self.memory_limit.load(Ordering::Relaxed)
    }

    /// Sets `lua-memory-limit` (states taken from now on get their share of it).
    pub fn set_memory_limit(&self, bytes: usize) -> Result<(), String> {
        if bytes < MIN_MEMORY_LIMIT {
            return Err(format!(
                "lua-memory-limit must be at least {MIN_MEMORY_LIMIT} bytes"
            ));
        }
        self.memory_limit.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// The memory the idle states hold now (INFO's `used_memory_lua`).
    pub fn idle_memory(&self) -> usize {
        self.idle.lock().iter().map(State::used_memory).sum()
    }

    /// Drops every idle state (SCRIPT FLUSH: their compiled scripts go with them).
    pub fn clear(&self) {
        self.idle.lock().clear();
    }

    /// A state to run a script on: an idle one, or a new one while fewer than
    /// [`STATES`] exist; waits for one otherwise.
    pub async fn take(&self) -> Result<Taken<'_>, String> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| "the script pool is closed".to_string())?;
        let idle = self.idle.lock().pop();
        let state = match idle {
            Some(s) => s,
            None => State::new().map_err(|e| format!("could not start Lua: {e}"))?,
        };
        let share = self.memory_limit() / STATES;
        super::budget::set_state_limit(share);
        state
            .set_memory_limit(share)
            .map_err(|e| format!("could not limit Lua's memory: {e}"))?;
        Ok(Taken {
            pool: self,
            state: Some(state),
            _permit: permit,
        })
    }
}

impl std::ops::Deref for Taken<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.state
            .as_ref()
            .expect("a taken state is present until dropped")
    }
}

impl std::ops::DerefMut for Taken<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.state
            .as_mut()
            .expect("a taken state is present until dropped")
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            self.pool.idle.lock().push(state);
        }
    }
}
