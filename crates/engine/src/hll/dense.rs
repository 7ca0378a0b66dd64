//! The dense encoding: 16384 registers of 6 bits each, packed LSB first into
//! 12288 bytes that follow the 16-byte header (`HLL_DENSE_GET_REGISTER` /
//! `HLL_DENSE_SET_REGISTER`, `hllDenseRegHisto`).
//!
//! ```text
//!   byte:   0        1        2        3
//!        +--------+--------+--------+--------+--//
//!        |11000000|22221111|33333322|55444444|
//!        +--------+--------+--------+--------+--//
//!   register i starts at bit 6*i (bit 0 = LSB of byte 0); every 3 bytes
//!   hold exactly 4 registers, so 16384 registers use 12288 bytes.
//! ```
//!
//! All accesses are bounds-checked (`get`/`get_mut`), so a slice of the wrong
//! length can never cause a panic; `Hll::parse` guarantees the length anyway.

use super::estimate::HISTO_LEN;
use super::{HLL_BITS, REGISTERS};

/// Bytes of dense register data (without the header).
pub const DENSE_DATA_LEN: usize = (REGISTERS * HLL_BITS).div_ceil(8);

/// Largest value a 6-bit register holds.
pub const REGISTER_MAX: u8 = (1 << HLL_BITS) - 1;

const _: () = assert!(DENSE_DATA_LEN == 12288);
const _: () = assert!(REGISTERS.is_multiple_of(4) && DENSE_DATA_LEN == REGISTERS / 4 * 3);

/// Position of register `index`: first byte and bit offset inside it.
fn locate(index: usize) -> (usize, u32) {
    let bit = index * HLL_BITS;
    (bit / 8, (bit & 7) as u32)
}

/// Value of register `index` (0 when out of range).
pub fn get(regs: &[u8], index: usize) -> u8 {
    let (byte, fb) = locate(index);
    let b0 = u32::from(regs.get(byte).copied().unwrap_or(0));
    // The last register's "next byte" is the sds terminator in Redis: 0.
    let b1 = u32::from(regs.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) & u32::from(REGISTER_MAX)) as u8
}

/// Set register `index` to `val` (masked to 6 bits); no-op when out of range.
pub fn set(regs: &mut [u8], index: usize, val: u8) {
    let (byte, fb) = locate(index);
    let v = u32::from(val & REGISTER_MAX);
    let max = u32::from(REGISTER_MAX);
    if let Some(b) = regs.get_mut(byte) {
        *b &= !((max << fb) as u8);
        *b |= (v << fb) as u8;
    }
    if let Some(b) = regs.get_mut(byte + 1) {
        *b &= !((max >> (8 - fb)) as u8);
        *b |= (v >> (8 - fb)) as u8;
    }
}

/// `hllDenseSet`: raise register `index` to `count` if it is smaller.
/// Returns whether the register changed.
pub fn set_if_greater(regs: &mut [u8], index: usize, count: u8) -> bool {
    if count > get(regs, index) {
        set(regs, index, count);
        true
    } else {
        false
    }
}

/// Calls `f(index, value)` for every register, in order.
pub fn for_each(regs: &[u8], mut f: impl FnMut(usize, u8)) {
    for (group, c) in regs.chunks_exact(3).take(REGISTERS / 4).enumerate() {
        let &[b0, b1, b2] = c else { continue };
        let base = group * 4;
        f(base, b0 & 63);
        f(base + 1, ((b0 >> 6) | (b1 << 2)) & 63);
        f(base + 2, ((b1 >> 4) | (b2 << 4)) & 63);
        f(base + 3, b2 >> 2);
    }
}

/// `hllDenseRegHisto`.
pub fn histogram(regs: &[u8], histo: &mut [u32; HISTO_LEN]) {
    for_each(regs, |_, v| {
        if let Some(slot) = histo.get_mut(usize::from(v)) {
            *slot += 1;
        }
    });
}

/// `hllMerge` for a dense source: `max[i] = max(max[i], reg[i])`.
pub fn merge_into(regs: &[u8], max: &mut [u8; REGISTERS]) {
    for_each(regs, |i, v| {
        if let Some(m) = max.get_mut(i) {
            *m = (*m).max(v);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_set_roundtrip_without_touching_neighbours() {
        let mut regs = vec![0u8; DENSE_DATA_LEN];
        let mut want = vec![0u8; REGISTERS];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..3 {
            for (i, w) in want.iter_mut().enumerate() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let v = (x & 63) as u8;
                if round == 2 && i % 2 == 0 {
                    continue;
                }
                *w = v;
                set(&mut regs, i, v);
            }
            for (i, &w) in want.iter().enumerate() {
                assert_eq!(get(&regs, i), w, "register {i}");
            }
            let mut seen = vec![0u8; REGISTERS];
            for_each(&regs, |i, v| seen[i] = v);
            assert_eq!(seen, want);
        }
    }

    #[test]
    fn last_register_and_out_of_range() {
        let mut regs = vec![0u8; DENSE_DATA_LEN];
        set(&mut regs, REGISTERS - 1, 63);
        assert_eq!(get(&regs, REGISTERS - 1), 63);
        assert_eq!(regs[DENSE_DATA_LEN - 1], 0b1111_1100);
        set(&mut regs, REGISTERS + 5, 7); // ignored
        assert_eq!(get(&regs, REGISTERS + 5), 0);
        assert_eq!(get(&[], 3), 0);
    }
}
