//! Turning a post of [`Verb`]s into rounds of work requests.
//!
//! A round is one chain posted with one doorbell: its work requests read and write a
//! staging buffer registered with the device (callers' buffers are not registered),
//! only its last request is signaled, and it waits for one completion. A round holds
//! at most `stage` bytes of data and `max_chain` requests; a READ or WRITE longer than
//! the device's message limit or the stage becomes several requests. Verbs are checked
//! against their region's registered length and atomics' alignment before anything is
//! posted, so a bad verb is a typed error and never breaks the queue pair: the verbs
//! before it run, it and the rest do not (the [`crate::Transport::post`] contract).

use crate::RegionId;
use crate::error::VerbsError;
use crate::transport::Verb;

/// What the node told us of a region registered for one-sided access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteKey {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

/// The operation of one planned work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlannedOp {
    Read,
    Write,
    Cas { expected: u64, swap: u64 },
    Faa { add: u64 },
}

/// One work request of a round: which verb it serves, which bytes of the verb's buffer
/// (`at..at+len`), where they sit in the stage, and the remote address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    pub verb: usize,
    pub op: PlannedOp,
    pub at: usize,
    pub len: usize,
    pub stage_at: usize,
    pub remote_addr: u64,
    pub rkey: u32,
    pub region: RegionId,
}

/// One chain: its requests and the staging bytes they use.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    pub requests: Vec<Planned>,
    pub stage_len: usize,
}

/// Limits of a plan.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Data bytes of one round (the staging buffer's size at most).
    pub stage: usize,
    /// Bytes of one work request (the device's message limit).
    pub max_message: usize,
    /// Work requests of one chain.
    pub max_chain: usize,
}

/// Plans `verbs`: the rounds of the verbs that are valid, up to the first that is not,
/// and that verb's error.
pub fn plan(
    verbs: &[Verb<'_>],
    key: impl Fn(RegionId) -> Option<RemoteKey>,
    limits: Limits,
) -> (Vec<Round>, Option<VerbsError>) {
    let piece = limits.stage.min(limits.max_message).max(8);
    let max_chain = limits.max_chain.max(1);
    let mut rounds = vec![Round::default()];
    let add = |p: Planned, rounds: &mut Vec<Round>| {
        let need = if matches!(p.op, PlannedOp::Read | PlannedOp::Write) {
            p.len
        } else {
            8
        };
        let full = rounds.last().is_some_and(|r| {
            !r.requests.is_empty()
                && (r.stage_len + need > limits.stage || r.requests.len() >= max_chain)
        });
        if full {
            rounds.push(Round::default());
        }
        if let Some(r) = rounds.last_mut() {
            // Atomic results sit 8-byte aligned in the stage.
            if need == 8 && !matches!(p.op, PlannedOp::Read | PlannedOp::Write) {
                r.stage_len = r.stage_len.div_ceil(8) * 8;
            }
            r.requests.push(Planned {
                stage_at: r.stage_len,
                ..p
            });
            r.stage_len += need;
        }
    };
    for (index, verb) in verbs.iter().enumerate() {
        let region = verb.region();
        let Some(k) = key(region) else {
            rounds.retain(|r| !r.requests.is_empty());
            return (rounds, Some(VerbsError::NoSuchRegion(region)));
        };
        let (offset, len, op) = match verb {
            Verb::Read { offset, buf, .. } => (*offset, buf.len(), PlannedOp::Read),
            Verb::Write { offset, data, .. } => (*offset, data.len(), PlannedOp::Write),
            Verb::Cas {
                offset,
                expected,
                new,
                ..
            } => (
                *offset,
                8,
                PlannedOp::Cas {
                    expected: *expected,
                    swap: *new,
                },
            ),
            Verb::Faa { offset, add, .. } => (*offset, 8, PlannedOp::Faa { add: *add }),
        };
        let atomic = !matches!(op, PlannedOp::Read | PlannedOp::Write);
        let bad = if atomic && !offset.is_multiple_of(8) {
            Some(VerbsError::Misaligned { offset })
        } else if offset.checked_add(len as u64).is_none_or(|end| end > k.len) {
            Some(VerbsError::OutOfBounds {
                region,
                offset,
                len: len as u64,
                size: k.len,
            })
        } else {
            None
        };
        if let Some(e) = bad {
            rounds.retain(|r| !r.requests.is_empty());
            return (rounds, Some(e));
        }
        let base = k.addr.wrapping_add(offset);
        let planned = |at: usize, len: usize| Planned {
            verb: index,
            op,
            at,
            len,
            stage_at: 0,
            remote_addr: base.wrapping_add(at as u64),
            rkey: k.rkey,
            region,
        };
        if atomic {
            add(planned(0, 8), &mut rounds);
        } else if len == 0 {
            // A zero-length verb does nothing on a NIC; it needs no request.
        } else {
            let mut at = 0;
            while at < len {
                let n = piece.min(len - at);
                add(planned(at, n), &mut rounds);
                at += n;
            }
        }
    }
    rounds.retain(|r| !r.requests.is_empty());
    (rounds, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: RemoteKey = RemoteKey {
        addr: 0x10_000,
        rkey: 5,
        len: 1 << 20,
    };

    fn limits(stage: usize, max_chain: usize) -> Limits {
        Limits {
            stage,
            max_message: 1 << 30,
            max_chain,
        }
    }

    #[test]
    fn a_small_batch_is_one_round_in_order() {
        let mut buf = [0u8; 16];
        let verbs = [
            Verb::Write {
                region: 1,
                offset: 3,
                data: b"hello",
            },
            Verb::Cas {
                region: 1,
                offset: 8,
                expected: 0,
                new: 1,
                old: 0,
            },
            Verb::Read {
                region: 1,
                offset: 100,
                buf: &mut buf,
            },
        ];
        let (rounds, err) = plan(&verbs, |_| Some(KEY), limits(4096, 64));
        assert!(err.is_none());
        assert_eq!(rounds.len(), 1);
        let r = &rounds[0].requests;
        assert_eq!(r.iter().map(|p| p.verb).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(r[0].remote_addr, KEY.addr + 3);
        assert_eq!(r[1].stage_at, 8, "the atomic's result is 8-byte aligned");
        assert_eq!(r[2].stage_at, 16);
        assert_eq!(rounds[0].stage_len, 32);
    }

    #[test]
    fn large_verbs_split_into_pieces_and_rounds() {
        let data = vec![7u8; 10_000];
        let verbs = [Verb::Write {
            region: 1,
            offset: 0,
            data: &data,
        }];
        let (rounds, err) = plan(
            &verbs,
            |_| Some(KEY),
            Limits {
                stage: 4096,
                max_message: 3000,
                max_chain: 64,
            },
        );
        assert!(err.is_none());
        let pieces: Vec<(usize, usize, u64)> = rounds
            .iter()
            .flat_map(|r| r.requests.iter().map(|p| (p.at, p.len, p.remote_addr)))
            .collect();
        assert_eq!(
            pieces,
            vec![
                (0, 3000, KEY.addr),
                (3000, 3000, KEY.addr + 3000),
                (6000, 3000, KEY.addr + 6000),
                (9000, 1000, KEY.addr + 9000),
            ]
        );
        assert!(rounds.iter().all(|r| r.stage_len <= 4096));
        assert_eq!(
            rounds.iter().map(|r| r.requests.len()).collect::<Vec<_>>(),
            vec![1, 1, 2],
            "3000 + 3000 exceeds the stage; 3000 + 1000 does not"
        );
    }

    #[test]
    fn chains_respect_the_send_queue() {
        let verbs: Vec<Verb> = (0..10)
            .map(|i| Verb::Faa {
                region: 1,
                offset: i * 8,
                add: 1,
                old: 0,
            })
            .collect();
        let (rounds, _) = plan(&verbs, |_| Some(KEY), limits(4096, 4));
        assert_eq!(
            rounds.iter().map(|r| r.requests.len()).collect::<Vec<_>>(),
            vec![4, 4, 2]
        );
    }

    #[test]
    fn a_bad_verb_stops_the_plan_after_the_good_ones() {
        let mut buf = [0u8; 16];
        let verbs = [
            Verb::Faa {
                region: 1,
                offset: 0,
                add: 1,
                old: 0,
            },
            Verb::Cas {
                region: 1,
                offset: 4,
                expected: 0,
                new: 1,
                old: 0,
            },
            Verb::Read {
                region: 1,
                offset: 0,
                buf: &mut buf,
            },
        ];
        let (rounds, err) = plan(&verbs, |_| Some(KEY), limits(4096, 64));
        assert_eq!(err, Some(VerbsError::Misaligned { offset: 4 }));
        assert_eq!(rounds.len(), 1);
        assert_eq!(rounds[0].requests.len(), 1);

        let mut end = [0u8; 16];
        let past = [Verb::Read {
            region: 1,
            offset: KEY.len - 8,
            buf: &mut end,
        }];
        let (rounds, err) = plan(&past, |_| Some(KEY), limits(4096, 64));
        assert!(rounds.is_empty());
        assert!(matches!(err, Some(VerbsError::OutOfBounds { .. })));
        let (_, err) = plan(&past, |_| None, limits(4096, 64));
        assert_eq!(err, Some(VerbsError::NoSuchRegion(1)));
    }

    #[test]
    fn an_offset_near_the_top_of_the_address_space_is_out_of_bounds() {
        let mut buf = [0u8; 16];
        let verbs = [Verb::Read {
            region: 1,
            offset: u64::MAX - 3,
            buf: &mut buf,
        }];
        let (_, err) = plan(&verbs, |_| Some(KEY), limits(4096, 64));
        assert!(matches!(err, Some(VerbsError::OutOfBounds { .. })));
    }
}
