//! What the engine's integration tests share: an engine over a fresh table (the dht
//! tests' harness: `local`, or in-process memory nodes over `shm`) and running a
//! command by its words.

#![allow(dead_code)]

#[path = "../../../dht/tests/common/mod.rs"]
pub mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dmc_dht::{DhtConfig, SystemClock};
use dmc_engine::{Engine, EngineConfig, Session};
use dmc_resp::Reply;

pub use common::{Backend, Harness};

/// An engine with the default configuration over a new table on `backend` (keep the
/// harness alive as long as the engine).
pub async fn engine(backend: Backend) -> (Harness, Arc<Engine>) {
    let h = common::open(
        backend,
        DhtConfig::default(),
        Arc::new(SystemClock),
        Duration::from_millis(5),
    )
    .await;
    let engine = Engine::new(
        h.dht.clone(),
        Arc::new(SystemClock),
        EngineConfig::default(),
    );
    (h, engine)
}

/// A command's arguments from its words.
pub fn cmd<S: AsRef<str>>(words: &[S]) -> Vec<Bytes> {
    words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_ref().as_bytes()))
        .collect()
}

/// Runs the command `words` in session `s`.
pub async fn run<S: AsRef<str>>(engine: &Engine, s: &mut Session, words: &[S]) -> Reply {
    engine.execute(s, cmd(words)).await.0
}
