//! The memory node answering RPC messages on a client's queue pair.
//!
//! A thread per queue pair takes the client's messages off the receive buffers, runs
//! each request as the RPC connection would (under the connection's client fence and
//! in its session, so a transaction prepared by message commits by message or over the
//! channel alike) and SENDs the answer. It ends when the connection that owns the
//! queue pair closes (its [`ResponderLink`] is dropped) or the pair fails.

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::BytesMut;
use hashbrown::HashMap;

use super::device::{Completion, CompletionKind, RcQp, Sge, WcStatus, WorkOp, WorkRequest};
use super::messages::{self, Inbox};
use super::stage::{Stage, StagePool};
use crate::error::VerbsError;
use crate::node::NodeCore;
use crate::revoke::ClientFence;
use crate::wire::{Request, Response};

/// How long the serving thread waits on an idle queue pair before checking that its
/// connection still lives.
const IDLE: Duration = Duration::from_millis(50);

/// What a message runs as: the RPC connection's node, session and client fence.
pub struct Serving {
    pub core: Arc<NodeCore>,
    pub session: u64,
    pub fence: Option<Arc<ClientFence>>,
}

/// A connection's queue pair: serving stops and the pair is destroyed when this drops.
pub struct ResponderLink {
    pub qp: Arc<dyn RcQp>,
    _alive: Arc<()>,
}

/// Starts answering messages on `qp` (connected, its `inbox` posted).
pub fn start(
    qp: Arc<dyn RcQp>,
    inbox: Inbox,
    stages: StagePool,
    serving: Serving,
) -> Result<ResponderLink, VerbsError> {
    let alive = Arc::new(());
    let watch = Arc::downgrade(&alive);
    let thread_qp = qp.clone();
    std::thread::Builder::new()
        .name("dmc-rdma-rpc".into())
        .spawn(move || serve(thread_qp, inbox, stages, serving, watch))
        .map_err(|e| VerbsError::io("starting an RDMA message server", e))?;
    Ok(ResponderLink { qp, _alive: alive })
}

fn serve(qp: Arc<dyn RcQp>, inbox: Inbox, stages: StagePool, s: Serving, alive: Weak<()>) {
    answer_messages(&*qp, &inbox, &stages, &s, &alive);
    // Whatever the client still waits for on this pair is flushed, not left to time
    // out.
    qp.fail();
}

fn answer_messages(
    qp: &dyn RcQp,
    inbox: &Inbox,
    stages: &StagePool,
    s: &Serving,
    alive: &Weak<()>,
) {
    let mut completions: Vec<Completion> = Vec::new();
    // Answers being sent, by work request id: their buffers live until sent.
    let mut sending: HashMap<u64, Stage> = HashMap::new();
    let mut next = 1u64;
    while alive.strong_count() > 0 {
        if qp.poll(&mut completions, IDLE).is_err() {
            return;
        }
        for c in completions.drain(..) {
            match (c.kind, c.status) {
                (CompletionKind::Send, _) => {
                    sending.remove(&c.id);
                }
                (CompletionKind::Recv { len }, WcStatus::Success) => {
                    let answer = match inbox.take(qp, c.id, len) {
                        Ok(frame) => {
                            let resp = match Request::decode(frame.tag, frame.payload) {
                                Ok(req) => run(s, req),
                                Err(e) => Response::Error(e),
                            };
                            let mut out = BytesMut::new();
                            resp.encode(frame.id, &mut out);
                            if out.len() > messages::MESSAGE_MAX {
                                out.clear();
                                Response::Error(VerbsError::Remote(
                                    "the answer does not fit an RDMA message".into(),
                                ))
                                .encode(frame.id, &mut out);
                            }
                            out
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "a bad RPC message on a queue pair");
                            return;
                        }
                    };
                    let id = next;
                    next += 1;
                    match send(qp, stages, id, &answer) {
                        Ok(stage) => {
                            sending.insert(id, stage);
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "cannot answer on a queue pair");
                            return;
                        }
                    }
                }
                // The pair failed (revoked, or the client is gone).
                (CompletionKind::Recv { .. }, _) => return,
            }
        }
    }
}

/// Runs one request as the connection would.
fn run(s: &Serving, req: Request) -> Response {
    if !messages::sendable(&req) {
        s.core.count_error();
        return Response::Error(VerbsError::Malformed(format!(
            "{} is not served as an RDMA message",
            req.kind()
        )));
    }
    let started = std::time::Instant::now();
    let kind = req.kind();
    let resp = match s.fence.as_deref().map(|f| f.admit()).transpose() {
        Ok(_admitted) => s.core.handle(s.session, req),
        Err(e) => Response::Error(e),
    };
    metrics::histogram!(dmc_proto::metrics::node::REQUEST_DURATION.name, "request" => kind)
        .record(started.elapsed().as_secs_f64());
    resp
}

fn send(qp: &dyn RcQp, stages: &StagePool, id: u64, bytes: &[u8]) -> Result<Stage, VerbsError> {
    let stage = stages.take(bytes.len())?;
    let reg = stage.registration();
    reg.memory().write(0, bytes)?;
    qp.post(&[WorkRequest {
        id,
        op: WorkOp::Send {
            local: Sge {
                addr: reg.addr(),
                len: bytes.len() as u32,
                lkey: reg.lkey(),
            },
        },
        signaled: true,
    }])?;
    Ok(stage)
}
