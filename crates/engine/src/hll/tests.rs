//! Unit, model and fuzz tests of the HyperLogLog module (the comparison with
//! a real redis-server lives in the crate's `tests/redis_compat.rs`).

use super::*;

/// Deterministic xorshift64 generator (no extra dependencies).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn sparse_header() -> Vec<u8> {
    Hll::new().as_bytes()[..HDR_LEN].to_vec()
}

#[test]
fn new_matches_create_hll_object() {
    let h = Hll::new();
    assert_eq!(
        h.as_bytes(),
        b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x7f\xff"
    );
    assert!(!h.is_dense());
    assert_eq!(h.encoding_name(), "sparse");
    assert_eq!(h.cached_cardinality(), Some(0));
    assert_eq!(h.decode().as_deref(), Some("Z:16384"));
}

#[test]
fn parse_checks() {
    assert_eq!(Hll::parse(b""), Err(HllError::NotHll));
    assert_eq!(Hll::parse(b"HYLL\x01"), Err(HllError::NotHll));
    let mut good = Hll::new().into_bytes();
    assert!(Hll::parse(&good).is_ok());
    // Header only: accepted by the type check, corrupt when used.
    let mut only_header = Hll::parse(&good[..HDR_LEN]).unwrap();
    // A valid cache is answered without looking at the registers, as Redis does.
    assert_eq!(only_header.count(), Ok((0, false)));
    only_header.invalidate_cache();
    assert_eq!(only_header.count(), Err(HllError::Corrupt));
    good[0] = b'h';
    assert_eq!(Hll::parse(&good), Err(HllError::NotHll));
    good[0] = b'H';
    good[4] = 2;
    assert_eq!(Hll::parse(&good), Err(HllError::NotHll));
    good[4] = ENCODING_DENSE;
    assert_eq!(Hll::parse(&good), Err(HllError::NotHll));
    let mut dense = dense_from_registers(&[0; REGISTERS]).into_bytes();
    assert_eq!(dense.len(), DENSE_LEN);
    assert!(Hll::parse(&dense).is_ok());
    dense.push(0);
    assert_eq!(Hll::parse(&dense), Err(HllError::NotHll));
    dense.truncate(DENSE_LEN - 1);
    assert_eq!(Hll::parse(&dense), Err(HllError::NotHll));
    // The three unused bytes are not checked.
    let mut odd = Hll::new().into_bytes();
    odd[5] = 9;
    assert!(Hll::from_vec(odd).is_ok());
    assert_eq!(
        HllError::NotHll.to_string(),
        "WRONGTYPE Key is not a valid HyperLogLog string value."
    );
    assert_eq!(
        HllError::Corrupt.to_string(),
        "INVALIDOBJ Corrupted HLL object detected"
    );
}

#[test]
fn add_count_and_cache() {
    let mut h = Hll::new();
    assert_eq!(h.add_all(["a", "b", "c"], true, 3000), Ok(true));
    assert_eq!(h.cached_cardinality(), None);
    assert_eq!(h.count(), Ok((3, true)));
    assert_eq!(h.count(), Ok((3, false)));
    assert_eq!(h.add(b"a", 3000), Ok(false));
    assert_eq!(h.cached_cardinality(), Some(3));
    // A fresh key counts as updated even with no elements.
    let mut e = Hll::new();
    assert_eq!(e.add_all(Vec::<&[u8]>::new(), true, 3000), Ok(true));
    assert_eq!(e.as_bytes()[15], 0x80);
    assert_eq!(e.count(), Ok((0, true)));
}

#[test]
fn promotion_by_size_and_by_value() {
    let mut h = Hll::new();
    let mut i = 0u32;
    while !h.is_dense() {
        let before = h.as_bytes().len();
        h.add(format!("e{i}").as_bytes(), 3000).unwrap();
        if !h.is_dense() {
            assert!(h.as_bytes().len() <= 3000);
        } else {
            assert!(before + 3 > 3000 - 3, "promoted early at {before}");
        }
        i += 1;
    }
    assert_eq!(h.as_bytes().len(), DENSE_LEN);
    assert!(i > 500, "promoted after {i} elements");

    // A register value above 32 forces dense at once (no element with a
    // 33+ zero run is cheap to find: 2^-32 odds, so set the register).
    let mut h = Hll::new();
    h.add(b"x", 3000).unwrap();
    assert_eq!(h.count(), Ok((1, true)));
    assert_eq!(h.set_register(77, 33, 3000, true), Ok(true));
    assert!(h.is_dense());
    // Promotion copies the header (cache included).
    assert_eq!(h.cached_cardinality(), Some(1));
    assert_eq!(h.registers().unwrap()[77], 33);
    assert_eq!(h.set_register(77, 33, 3000, true), Ok(false));
    assert_eq!(h.decode(), None);
}

#[test]
fn sparse_model_check() {
    // Random register updates on a sparse HLL must always leave a valid
    // stream holding exactly the model's registers, and dense/sparse counts
    // must agree (what PFSELFTEST checks in Redis).
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for round in 0..20 {
        let mut h = Hll::new();
        let mut model = [0u8; REGISTERS];
        let clustered = round % 2 == 0;
        for _ in 0..400 {
            let index = if clustered {
                rng.below(64) as usize + 1000
            } else {
                rng.below(REGISTERS as u64) as usize
            };
            let count = rng.below(32) as u8 + 1;
            let changed = h.set_register(index, count, 1 << 20, true).unwrap();
            assert_eq!(changed, count > model[index]);
            model[index] = model[index].max(count);
            assert!(!h.is_dense());
            sparse::validate(&h.as_bytes()[HDR_LEN..]).unwrap();
        }
        assert_eq!(*h.registers().unwrap(), model);
        let dense = dense_from_registers(&model);
        assert_eq!(
            h.compute_cardinality().unwrap(),
            dense.compute_cardinality().unwrap()
        );
        assert_eq!(h.compute_cardinality().unwrap(), count_registers(&model));
        let mut d = h.clone();
        assert_eq!(d.to_dense(), Ok(true));
        assert_eq!(*d.registers().unwrap(), model);
        assert_eq!(&d.as_bytes()[HDR_LEN..], &dense.as_bytes()[HDR_LEN..]);
    }
}

#[test]
fn union_and_merge_store() {
    let mut a = Hll::new();
    a.add_all((0..100).map(|i| format!("a{i}")), true, 3000)
        .unwrap();
    let mut b = Hll::new();
    b.add_all((0..3000).map(|i| format!("b{i}")), true, 3000)
        .unwrap();
    assert!(b.is_dense());

    let mut u = HllUnion::new();
    u.add(&a).unwrap();
    assert!(!u.any_dense());
    let only_a = u.store(None, 3000).unwrap();
    assert!(!only_a.is_dense());
    assert_eq!(&only_a.as_bytes()[HDR_LEN..], &a.as_bytes()[HDR_LEN..]);
    assert_eq!(&only_a.as_bytes()[8..16], &[0, 0, 0, 0, 0, 0, 0, 0x80]);

    u.add(&b).unwrap();
    assert!(u.any_dense());
    let merged = u.store(None, 3000).unwrap();
    assert_eq!(merged, dense_from_registers(u.registers()));
    assert_eq!(merged.compute_cardinality().unwrap(), u.count());

    // PFMERGE dest alone on an existing key: only the cache bit changes.
    let mut dest = a.clone();
    let (card, _) = dest.count().unwrap();
    let mut u = HllUnion::new();
    u.add(&dest).unwrap();
    let out = u.store(Some(dest.clone()), 3000).unwrap();
    let mut want = dest.into_bytes();
    want[15] |= 0x80;
    assert_eq!(out.as_bytes(), &want[..]);
    assert_eq!(out.as_bytes()[8], card as u8);
    // ... and on a missing key: an empty sparse HLL, cache invalid.
    let out = HllUnion::new().store(None, 3000).unwrap();
    let mut empty = Hll::new();
    empty.invalidate_cache();
    assert_eq!(out, empty);
}

/// Runs every operation on a possibly-malformed value: none may panic.
fn exercise(bytes: &[u8], rng: &mut Rng) {
    let Ok(h) = Hll::parse(bytes) else { return };
    let valid = h.is_dense() || sparse::validate(&h.as_bytes()[HDR_LEN..]).is_ok();
    let mut c = h.clone();
    let counted = c.count();
    let _ = h.decode();
    let mut regs = [0u8; REGISTERS];
    let merged = h.merge_into(&mut regs);
    assert_eq!(merged.is_ok(), valid);
    let mut d = h.clone();
    assert_eq!(d.to_dense().is_ok(), valid);
    let mut u = HllUnion::new();
    if u.add(&h).is_ok() {
        let _ = u.store(Some(h.clone()), rng.below(4000) as usize);
    }
    let mut a = h.clone();
    for _ in 0..4 {
        let e = rng.next().to_le_bytes();
        let r = a.add(&e, rng.below(4000) as usize);
        assert_eq!(r.is_ok(), valid);
    }
    if valid {
        assert!(counted.is_ok() || h.cached_cardinality().is_none());
        assert!(*a.registers().unwrap() >= *h.registers().unwrap());
    } else {
        assert_eq!(a, h);
    }
}

#[test]
fn fuzz_random_sparse_streams() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    for _ in 0..20_000 {
        let mut bytes = sparse_header();
        if rng.below(2) == 0 {
            bytes[15] |= 0x80;
        }
        let len = rng.below(80) as usize;
        for _ in 0..len {
            bytes.push(rng.next() as u8);
        }
        exercise(&bytes, &mut rng);
    }
}

#[test]
fn fuzz_mutated_valid_streams() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let mut base = Hll::new();
    base.add_all((0..300).map(|i| format!("m{i}")), true, 3000)
        .unwrap();
    let base = base.into_bytes();
    for _ in 0..3_000 {
        let mut bytes = base.clone();
        for _ in 0..=rng.below(3) {
            let at = HDR_LEN + rng.below((bytes.len() - HDR_LEN) as u64) as usize;
            match rng.below(4) {
                0 => bytes[at] = rng.next() as u8,
                1 => bytes.truncate(at),
                2 => bytes.insert(at, rng.next() as u8),
                _ => {
                    bytes.remove(at);
                }
            }
            if bytes.len() <= HDR_LEN {
                break;
            }
        }
        exercise(&bytes, &mut rng);
    }
}

#[test]
fn fuzz_dense_and_huge_values() {
    let mut rng = Rng(0x5555_aaaa_1234_4321);
    for _ in 0..20 {
        let mut bytes = dense_from_registers(&[0; REGISTERS]).into_bytes();
        for b in bytes[HDR_LEN..].iter_mut() {
            *b = rng.next() as u8;
        }
        exercise(&bytes, &mut rng);
    }
    // A huge sparse value made of XZERO runs: rejected quickly.
    let mut huge = sparse_header();
    huge[15] = 0x80;
    huge.extend_from_slice(&[0x7f, 0xff].repeat(1 << 20));
    let mut h = Hll::parse(&huge).unwrap();
    assert_eq!(h.count(), Err(HllError::Corrupt));
    assert_eq!(h.add(b"x", 3000), Err(HllError::Corrupt));
    // All registers saturated: Redis's estimator overflows to 2^63.
    let sat = dense_from_registers(&[63; REGISTERS]);
    assert_eq!(sat.compute_cardinality(), Ok(1 << 63));
}
