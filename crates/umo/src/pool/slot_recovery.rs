//! Recovery of a slot whose commit stopped half-way, so that its copies agree again and
//! the key is writable: a primary slot word left locked by a single-key commit
//! ([`super::slot_commit`]) whose writer is gone, with backups that may be ahead of it,
//! or a primary left behind its backups by a two-phase commit whose coordinator died
//! between committing the backups and the primary (the primary's node then aborted its
//! part).
//!
//! The rule is **roll forward**. A single-key writer locks the primary only after its
//! object is on every copy, and writes the new pair to the backups only while it holds
//! that lock; a two-phase commit commits the backups only once every copy voted yes,
//! and the primary last. So a backup whose slot word differs from the primary's holds
//! the new pair, pointing at a complete object: it is copied to the primary and to every
//! lagging backup, and the primary's CAS to the new word unlocks it. When no backup
//! differs, a locked primary is unlocked to its old word. Either way the copies agree.
//!
//! Called by the hash table for the slots it owns and no write of its own holds: when
//! it gains a shard (the previous owner released it or died) and for its own commits
//! that failed with a node unreachable. A word locked on a backup is a two-phase commit
//! still prepared there: left to the memory nodes, which commit or abort it.

use super::Pool;
use super::slot_commit::pair;
use crate::addr::GlobalAddr;
use crate::error::UmoError;
use dmc_verbs::node::WORD_LOCK;

/// What [`Pool::roll_forward_slot`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRecovery {
    /// The copies agree and the primary is not locked: nothing to do.
    Agreed,
    /// A backup is locked (a two-phase commit is prepared there): left alone.
    Prepared,
    /// The primary was locked and no backup ahead: unlocked to its old word.
    Unlocked { word: u64 },
    /// A backup was ahead: its pair is now on every copy.
    RolledForward { word: u64, meta: u64 },
}

impl Pool {
    /// Makes a slot's copies agree again (see the module doc). Fails only when a copy
    /// cannot be read or written; the slot is then as it was, or partly repaired, and
    /// the call can be repeated.
    pub async fn roll_forward_slot(&self, addr: GlobalAddr) -> Result<SlotRecovery, UmoError> {
        let copies = self.copy_count(addr.region()).await?;
        let mut pairs = Vec::with_capacity(copies);
        for copy in 0..copies {
            let mut buf = [0u8; 16];
            self.read_copy(addr, copy, &mut buf).await?;
            let word = u64::from_le_bytes(buf[..8].try_into().unwrap_or_default());
            let meta = u64::from_le_bytes(buf[8..].try_into().unwrap_or_default());
            pairs.push((word, meta));
        }
        let Some((&(primary, _), backups)) = pairs.split_first() else {
            return Ok(SlotRecovery::Agreed);
        };
        if backups.iter().any(|&(word, _)| word & WORD_LOCK != 0) {
            return Ok(SlotRecovery::Prepared);
        }
        let old = primary & !WORD_LOCK;
        // Slot words only: a backup's metadata word lags the primary's by design (hits
        // add to the primary's LRU and LFU fields alone), and a commit always changes
        // the word (a new object), so a different word is a commit the primary missed.
        let ahead = backups.iter().copied().find(|&(word, _)| word != old);
        let (word, meta) = match ahead {
            None if primary & WORD_LOCK == 0 => return Ok(SlotRecovery::Agreed),
            None => {
                self.cas_copy(addr, 0, primary, old).await?;
                return Ok(SlotRecovery::Unlocked { word: old });
            }
            Some(p) => p,
        };
        let new_pair = pair(word, meta);
        for (copy, &p) in pairs.iter().enumerate().skip(1) {
            if p != (word, meta) {
                self.write_copy(addr, copy, &new_pair).await?;
            }
        }
        self.write_copy(addr.offset_by(8), 0, &meta.to_le_bytes())
            .await?;
        let seen = self.cas_copy(addr, 0, primary, word).await?;
        if seen != primary && seen != word {
            return Err(UmoError::Layout(format!(
                "slot word {:#x} changed from {primary:#x} while rolled forward (now {seen:#x})",
                addr.bits()
            )));
        }
        Ok(SlotRecovery::RolledForward { word, meta })
    }
}
