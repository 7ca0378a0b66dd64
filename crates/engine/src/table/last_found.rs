//! The last command name each thread looked up, as the client spelled it, and its row
//! (see [`super::lookup_index`]): a pipeline is mostly one command over and over, and
//! each command is looked up several times.

use std::cell::Cell;

thread_local! {
    static LAST_FOUND: Cell<LastFound> = const { Cell::new(LastFound::NONE) };
}

/// The row of `name` if it is the last name found on this thread, byte for byte.
pub(super) fn recall(name: &[u8]) -> Option<usize> {
    LAST_FOUND
        .try_with(|last| last.get().found(name))
        .ok()
        .flatten()
}

/// Remembers that `name` is row `index` (a name over 16 bytes is not remembered).
pub(super) fn remember(name: &[u8], index: usize) {
    let _ = LAST_FOUND.try_with(|last| last.set(LastFound::of(name, index)));
}

/// A name as a client spelled it (up to 16 bytes) and its row number.
#[derive(Clone, Copy)]
struct LastFound {
    name: [u8; 16],
    len: u8,
    index: u16,
}

impl LastFound {
    /// Remembers nothing (no name has length 0).
    const NONE: LastFound = LastFound {
        name: [0; 16],
        len: 0,
        index: 0,
    };

    fn of(name: &[u8], index: usize) -> Self {
        let mut kept = [0u8; 16];
        match (kept.get_mut(..name.len()), u16::try_from(index)) {
            (Some(dst), Ok(index)) => {
                dst.copy_from_slice(name);
                LastFound {
                    name: kept,
                    len: name.len() as u8,
                    index,
                }
            }
            _ => Self::NONE,
        }
    }

    fn found(&self, name: &[u8]) -> Option<usize> {
        let len = usize::from(self.len);
        // Byte by byte: a name is a few bytes, shorter than a call to `memcmp` (which a
        // slice comparison is, and which the profile showed).
        (len != 0 && name.len() == len && name.iter().zip(&self.name).all(|(a, b)| a == b))
            .then_some(usize::from(self.index))
    }
}
