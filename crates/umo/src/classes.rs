//! The size classes objects are allocated from (best fit).
//!
//! 13 classes from 16 to 64 bytes in 4-byte steps (small objects dominate caches and a
//! 4-byte step wastes at most 3 bytes), then classes growing by 1.25× in multiples of 8
//! up to 1 MiB, plus the powers of two from 128 B to 8 KiB (hash-table subtables):
//! 63 classes in all. Classes above 64 bytes are multiples of 8, so blocks
//! of them hold 8-byte atomic words. A class id is stored in every hash-table slot, so
//! this table is part of the pool's wire format: [`CLASSES_VERSION`] changes with it.

/// Bumped whenever the table below changes.
pub const CLASSES_VERSION: u32 = 1;

const fn build() -> ([u32; 64], usize) {
    // The geometric sequence first.
    let mut g = [0u32; 64];
    let mut n = 0;
    let mut s = 16;
    while s <= 64 {
        g[n] = s;
        n += 1;
        s += 4;
    }
    let mut prev: u32 = 64;
    loop {
        let mut next = (prev * 5 / 4).div_ceil(8) * 8;
        if next >= 1 << 20 {
            next = 1 << 20;
        }
        g[n] = next;
        n += 1;
        if next == 1 << 20 {
            break;
        }
        prev = next;
    }
    // Then merge in the powers of two from 128 B to 8 KiB: hash-table subtables are
    // power-of-two sized and would otherwise waste up to 25 % of their class.
    let mut t = [0u32; 64];
    let (mut i, mut m) = (0, 0);
    let mut pow2: u32 = 128;
    while i < n {
        if pow2 <= 8192 && pow2 < g[i] {
            t[m] = pow2;
            pow2 *= 2;
        } else {
            if pow2 == g[i] {
                pow2 *= 2;
            }
            t[m] = g[i];
            i += 1;
        }
        m += 1;
    }
    (t, m)
}

const TABLE: ([u32; 64], usize) = build();

/// Number of size classes.
pub const NUM_CLASSES: usize = TABLE.1;
/// The largest class: 1 MiB.
pub const MAX_CLASS_SIZE: u32 = 1 << 20;

const _: () = assert!(
    NUM_CLASSES == 63,
    "class table changed: bump CLASSES_VERSION"
);
const _: () = assert!(TABLE.0[NUM_CLASSES - 1] == MAX_CLASS_SIZE);

/// Size in bytes of class `class`.
pub fn size(class: u8) -> u32 {
    TABLE.0[class as usize]
}

/// All class sizes, ascending.
pub fn sizes() -> &'static [u32] {
    &TABLE.0[..NUM_CLASSES]
}

/// The smallest class of at least `len` bytes whose size is at most `max`, and a
/// multiple of 8 when `aligned`.
pub fn best_fit(len: u64, max: u32, aligned: bool) -> Option<u8> {
    let i = sizes().partition_point(|&s| (s as u64) < len);
    (i..NUM_CLASSES)
        .take_while(|&c| sizes()[c] <= max)
        .find(|&c| !aligned || sizes()[c].is_multiple_of(8))
        .map(|c| c as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_ascending_and_aligned_above_64() {
        for w in sizes().windows(2) {
            assert!(w[0] < w[1]);
        }
        assert!(sizes().iter().filter(|&&s| s > 64).all(|s| s % 8 == 0));
        assert_eq!(sizes()[0], 16);
    }

    #[test]
    fn best_fit_picks_the_smallest_class() {
        assert_eq!(size(best_fit(60, MAX_CLASS_SIZE, false).unwrap()), 60);
        assert_eq!(size(best_fit(61, MAX_CLASS_SIZE, false).unwrap()), 64);
        assert_eq!(size(best_fit(1, MAX_CLASS_SIZE, false).unwrap()), 16);
        assert_eq!(size(best_fit(20, MAX_CLASS_SIZE, true).unwrap()), 24);
        assert_eq!(
            best_fit(MAX_CLASS_SIZE as u64 + 1, MAX_CLASS_SIZE, false),
            None
        );
        assert_eq!(best_fit(5000, 4096, false), None);
    }
}
