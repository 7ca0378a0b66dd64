//! HyperLogLog, byte-for-byte compatible with Redis 7.0 (`src/hyperloglog.c`).
//!
//! This file owns the value type [`Hll`] (the exact bytes Redis stores in the
//! string key), the header, the command-level semantics (PFADD, PFCOUNT,
//! PFMERGE, PFDEBUG) and the fuzz / property tests. The encodings live in
//! [`sparse`] and [`dense`], the estimator in [`estimate`], the hash in
//! [`hash`].
//!
//! # Wire format
//!
//! ```text
//!  offset 0      4     5         8                       16
//!        +------+-----+---------+-----------------------+------------------//
//!        | HYLL |  E  | 0  0  0 | cached cardinality    | registers ...
//!        +------+-----+---------+-----------------------+------------------//
//!         magic   E = 0 dense      8 bytes little endian;
//!                     1 sparse     bit 7 of byte 15 set = cache invalid
//!                  (unused, not checked)
//!
//!  dense  (E = 0): exactly 12304 bytes = 16 + 16384 * 6 bits
//!        +--------+--------+--------+--//
//!        |11000000|22221111|33333322|...   6-bit registers, LSB first
//!        +--------+--------+--------+--//
//!
//!  sparse (E = 1): any length >= 16; opcodes covering exactly 16384 registers
//!        ZERO  00xxxxxx            1..=64 registers at 0
//!        XZERO 01xxxxxx yyyyyyyy   1..=16384 registers at 0
//!        VAL   1vvvvvxx            1..=4 registers at 1..=32
//!        empty: "HYLL" 01 000000 0000000000000000 7f ff   (18 bytes)
//! ```
//!
//! # Redis 7.0 semantics reproduced here
//!
//! * PFADD on a missing key creates [`Hll::new`] (sparse, cache bytes all 0)
//!   and always counts as an update, so the stored value's cache is invalid
//!   even with no elements; see [`Hll::add_all`].
//! * PFCOUNT with one key returns a valid cache as is; otherwise it computes,
//!   writes the 8 cache bytes back into the value (the key is modified) and
//!   replies. With several keys nothing is written ([`HllUnion::count`]).
//! * PFMERGE merges the destination too (as a source, first), converts it to
//!   dense only if some merged HLL is dense, otherwise updates it sparse in
//!   register order (possibly promoting), and always invalidates its cache,
//!   keeping the other 63 cache bits ([`HllUnion::store`]).
//! * Replies: counts are sent with `addReplyLongLong`, i.e. as `i64`.
//!
//! Known, deliberate difference: on a *malformed* sparse value Redis's PFADD
//! sometimes still succeeds (e.g. trailing garbage after the register it
//! updates); here any malformed sparse stream is `Corrupt` when used.

mod dense;
mod estimate;
mod hash;
mod sparse;

pub use hash::{HLL_SEED, murmur_hash64a};

/// The error replies of Redis's HyperLogLog commands.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
pub enum HllError {
    /// Redis: "WRONGTYPE Key is not a valid HyperLogLog string value."
    #[error("WRONGTYPE Key is not a valid HyperLogLog string value.")]
    NotHll,
    /// Redis: "INVALIDOBJ Corrupted HLL object detected"
    #[error("INVALIDOBJ Corrupted HLL object detected")]
    Corrupt,
}

/// `HLL_P`: bits of the hash used for the register index.
pub const HLL_P: u32 = 14;
/// `HLL_Q`: bits of the hash used for the zero run.
pub const HLL_Q: usize = 64 - HLL_P as usize;
/// Number of registers.
pub const REGISTERS: usize = 1 << HLL_P;
/// Bits per dense register.
pub const HLL_BITS: usize = 6;
/// Header length (`sizeof(struct hllhdr)`).
pub const HDR_LEN: usize = 16;
/// Total length of a dense HLL (`HLL_DENSE_SIZE`).
pub const DENSE_LEN: usize = HDR_LEN + dense::DENSE_DATA_LEN;
/// Magic bytes.
pub const MAGIC: [u8; 4] = *b"HYLL";
/// Encoding byte of the dense representation.
pub const ENCODING_DENSE: u8 = 0;
/// Encoding byte of the sparse representation.
pub const ENCODING_SPARSE: u8 = 1;
/// Redis's default `hll-sparse-max-bytes`.
pub const DEFAULT_SPARSE_MAX_BYTES: usize = 3000;

const ENCODING_OFFSET: usize = 4;
const CARD_OFFSET: usize = 8;
const CARD_INVALID_BYTE: usize = CARD_OFFSET + 7;
const CARD_INVALID_BIT: u8 = 0x80;

const _: () = assert!(HDR_LEN == MAGIC.len() + 1 + 3 + 8);
const _: () = assert!(CARD_INVALID_BYTE == HDR_LEN - 1);
const _: () = assert!(REGISTERS == 16384);
const _: () = assert!(DENSE_LEN == 12304);
const _: () = assert!(HDR_LEN + 2 < DEFAULT_SPARSE_MAX_BYTES);

/// Sets the "cache invalid" bit of a header (`HLL_INVALIDATE_CACHE`).
fn invalidate_cache_bytes(bytes: &mut [u8]) {
    if let Some(b) = bytes.get_mut(CARD_INVALID_BYTE) {
        *b |= CARD_INVALID_BIT;
    }
}

/// A HyperLogLog value: exactly the bytes Redis keeps in the string key.
///
/// Invariant (checked by [`Hll::parse`]): at least a header, magic `HYLL`,
/// encoding 0 or 1, and exactly [`DENSE_LEN`] bytes when dense. The sparse
/// stream itself is only checked when used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hll {
    bytes: Vec<u8>,
}

impl Default for Hll {
    fn default() -> Self {
        Self::new()
    }
}

impl Hll {
    /// `createHLLObject`: sparse, all registers 0 (XZERO runs), cached
    /// cardinality 0 and valid.
    pub fn new() -> Hll {
        let mut bytes = Vec::with_capacity(HDR_LEN + 2);
        bytes.extend_from_slice(&MAGIC);
        bytes.push(ENCODING_SPARSE);
        bytes.extend_from_slice(&[0u8; 3 + 8]);
        bytes.extend_from_slice(&sparse::empty_stream());
        Hll { bytes }
    }

    /// `isHLLObjectOrReply`'s checks on a string value (copied).
    pub fn parse(bytes: &[u8]) -> Result<Hll, HllError> {
        Self::check(bytes)?;
        Ok(Hll {
            bytes: bytes.to_vec(),
        })
    }

    /// Like [`Hll::parse`], taking ownership of the buffer (no copy).
    pub fn from_vec(bytes: Vec<u8>) -> Result<Hll, HllError> {
        Self::check(&bytes)?;
        Ok(Hll { bytes })
    }

    fn check(bytes: &[u8]) -> Result<(), HllError> {
        if bytes.len() < HDR_LEN || bytes.get(..MAGIC.len()) != Some(&MAGIC[..]) {
            return Err(HllError::NotHll);
        }
        match bytes.get(ENCODING_OFFSET) {
            Some(&ENCODING_SPARSE) => Ok(()),
            Some(&ENCODING_DENSE) if bytes.len() == DENSE_LEN => Ok(()),
            _ => Err(HllError::NotHll),
        }
    }

    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The value's bytes, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Whether the encoding is dense.
    pub fn is_dense(&self) -> bool {
        self.bytes.get(ENCODING_OFFSET) == Some(&ENCODING_DENSE)
    }

    /// `PFDEBUG ENCODING`'s status reply: `"dense"` or `"sparse"`.
    pub fn encoding_name(&self) -> &'static str {
        if self.is_dense() { "dense" } else { "sparse" }
    }

    /// The cached cardinality, if the cache is valid.
    pub fn cached_cardinality(&self) -> Option<u64> {
        let card: [u8; 8] = self
            .bytes
            .get(CARD_OFFSET..HDR_LEN)
            .and_then(|s| s.try_into().ok())?;
        let card = u64::from_le_bytes(card);
        (card & (1 << 63) == 0).then_some(card)
    }

    /// Sets the header's "cache invalid" bit (`HLL_INVALIDATE_CACHE`).
    pub fn invalidate_cache(&mut self) {
        invalidate_cache_bytes(&mut self.bytes);
    }

    fn registers_bytes(&self) -> &[u8] {
        self.bytes.get(HDR_LEN..).unwrap_or(&[])
    }

    fn registers_bytes_mut(&mut self) -> &mut [u8] {
        self.bytes.get_mut(HDR_LEN..).unwrap_or(&mut [])
    }

    /// `hllAdd` of one element (one PFADD argument): true if a register
    /// changed, in which case the cache is invalidated. A sparse HLL turns
    /// dense exactly when Redis's does: the register needs a value > 32, or
    /// the sparse value would grow past `sparse_max_bytes` (header included;
    /// Redis's `hll-sparse-max-bytes`, default 3000).
    ///
    /// On `Err` the value is unchanged.
    pub fn add(&mut self, element: &[u8], sparse_max_bytes: usize) -> Result<bool, HllError> {
        let (index, count) = hash::pattern(element);
        let changed = self.set_register(index, count, sparse_max_bytes, true)?;
        if changed {
            self.invalidate_cache();
        }
        Ok(changed)
    }

    /// Raises one register like `hllDenseSet` / `hllSparseSet`.
    fn set_register(
        &mut self,
        index: usize,
        count: u8,
        sparse_max_bytes: usize,
        validate: bool,
    ) -> Result<bool, HllError> {
        if !self.is_dense() {
            if validate {
                sparse::validate(self.registers_bytes())?;
            }
            match sparse::set(&mut self.bytes, index, count, sparse_max_bytes)? {
                sparse::SetOutcome::Unchanged => return Ok(false),
                sparse::SetOutcome::Updated => return Ok(true),
                sparse::SetOutcome::Promote => {
                    self.to_dense()?;
                }
            }
        }
        Ok(dense::set_if_greater(
            self.registers_bytes_mut(),
            index,
            count,
        ))
    }

    /// The whole of PFADD on one key: `created` is true when the key did not
    /// exist and `self` is a fresh [`Hll::new`] (Redis then counts the
    /// creation as an update). Returns PFADD's reply (true = 1). If it
    /// returns `Err`, `self` keeps the updates of the elements before the bad
    /// one, exactly like Redis's in-place value (no error can occur on a
    /// dense or freshly created HLL).
    pub fn add_all<I, E>(
        &mut self,
        elements: I,
        created: bool,
        sparse_max_bytes: usize,
    ) -> Result<bool, HllError>
    where
        I: IntoIterator<Item = E>,
        E: AsRef<[u8]>,
    {
        let mut updated = created;
        for e in elements {
            updated |= self.add(e.as_ref(), sparse_max_bytes)?;
        }
        if updated {
            self.invalidate_cache();
        }
        Ok(updated)
    }

    /// PFCOUNT of a single key: the cached cardinality if valid, else the
    /// computed one, which is then stored in the header (the second value is
    /// true: the key's bytes changed and must be persisted / propagated, as
    /// Redis does with `signalModifiedKey` + `dirty++`). On `Err` nothing is
    /// written. Reply with `card as i64` (Redis uses `addReplyLongLong`).
    pub fn count(&mut self) -> Result<(u64, bool), HllError> {
        if let Some(card) = self.cached_cardinality() {
            return Ok((card, false));
        }
        let card = self.compute_cardinality()?;
        if let Some(c) = self.bytes.get_mut(CARD_OFFSET..HDR_LEN) {
            c.copy_from_slice(&card.to_le_bytes());
        }
        Ok((card, true))
    }

    /// `hllCount`: the estimate from the registers, ignoring the cache.
    pub fn compute_cardinality(&self) -> Result<u64, HllError> {
        let mut histo = [0u32; estimate::HISTO_LEN];
        if self.is_dense() {
            dense::histogram(self.registers_bytes(), &mut histo);
        } else {
            sparse::histogram(self.registers_bytes(), &mut histo)?;
        }
        Ok(estimate::from_histogram(&histo))
    }

    /// `hllMerge`: `regs[i] = max(regs[i], self[i])` (PFMERGE / multi-key
    /// PFCOUNT). `Corrupt` on a malformed sparse stream (`regs` unchanged).
    pub fn merge_into(&self, regs: &mut [u8; REGISTERS]) -> Result<(), HllError> {
        if self.is_dense() {
            dense::merge_into(self.registers_bytes(), regs);
            Ok(())
        } else {
            sparse::merge_into(self.registers_bytes(), regs)
        }
    }

    /// All register values (PFDEBUG GETREG; note that Redis's GETREG first
    /// converts a sparse key to dense in place: call [`Hll::to_dense`]).
    pub fn registers(&self) -> Result<Box<[u8; REGISTERS]>, HllError> {
        let mut regs = Box::new([0u8; REGISTERS]);
        self.merge_into(&mut regs)?;
        Ok(regs)
    }

    /// `hllSparseToDense` (PFDEBUG TODENSE, GETREG): converts in place,
    /// keeping the header's other bytes (cache included). Returns whether a
    /// conversion happened (TODENSE's reply; Redis then propagates the key).
    pub fn to_dense(&mut self) -> Result<bool, HllError> {
        if self.is_dense() {
            return Ok(false);
        }
        self.bytes = sparse::to_dense(&self.bytes)?;
        Ok(true)
    }

    /// PFDEBUG DECODE: the sparse opcodes as text (`Z:16384`, `z:3`, `v:2,1`
    /// separated by spaces), or `None` for a dense HLL (Redis replies
    /// "ERR HLL encoding is not sparse"). Not validated, like Redis.
    pub fn decode(&self) -> Option<String> {
        (!self.is_dense()).then(|| sparse::decode_text(self.registers_bytes()))
    }
}

/// Cardinality of raw registers (multi-key PFCOUNT's `HLL_RAW` path), Redis's
/// estimator exactly. Values above 63 cannot come from merges; they are
/// taken modulo 64.
pub fn count_registers(regs: &[u8; REGISTERS]) -> u64 {
    let mut histo = [0u32; estimate::HISTO_LEN];
    for &r in regs.iter() {
        if let Some(slot) = histo.get_mut(usize::from(r & dense::REGISTER_MAX)) {
            *slot += 1;
        }
    }
    estimate::from_histogram(&histo)
}

/// A dense HLL holding `regs` with the cache invalid, i.e. what PFMERGE
/// writes to a *new* destination when some source is dense (cache bytes
/// `00 00 00 00 00 00 00 80`). Values are masked to 6 bits. For PFMERGE in
/// general use [`HllUnion::store`], which is not always dense.
pub fn dense_from_registers(regs: &[u8; REGISTERS]) -> Hll {
    let mut bytes = vec![0u8; DENSE_LEN];
    if let Some(h) = bytes.get_mut(..MAGIC.len()) {
        h.copy_from_slice(&MAGIC);
    }
    invalidate_cache_bytes(&mut bytes);
    if let Some(data) = bytes.get_mut(HDR_LEN..) {
        for (i, &v) in regs.iter().enumerate() {
            dense::set(data, i, v);
        }
    }
    Hll { bytes }
}

/// The union being built by PFMERGE or a multi-key PFCOUNT: the max
/// registers plus whether any merged HLL was dense (PFMERGE's `use_dense`).
///
/// Redis's order, which decides which error wins: for each key in argument
/// order (for PFMERGE the destination first, it is also a source), skip it if
/// missing, else [`Hll::parse`] (`NotHll`), then [`HllUnion::add`]
/// (`Corrupt`).
#[derive(Debug, Clone)]
pub struct HllUnion {
    regs: Box<[u8; REGISTERS]>,
    any_dense: bool,
}

impl Default for HllUnion {
    fn default() -> Self {
        Self::new()
    }
}

impl HllUnion {
    /// All registers 0.
    pub fn new() -> HllUnion {
        HllUnion {
            regs: Box::new([0u8; REGISTERS]),
            any_dense: false,
        }
    }

    /// Merges one HLL in (`hllMerge`).
    pub fn add(&mut self, hll: &Hll) -> Result<(), HllError> {
        hll.merge_into(&mut self.regs)?;
        self.any_dense |= hll.is_dense();
        Ok(())
    }

    /// The max registers so far.
    pub fn registers(&self) -> &[u8; REGISTERS] {
        &self.regs
    }

    /// Whether a dense HLL was merged.
    pub fn any_dense(&self) -> bool {
        self.any_dense
    }

    /// Multi-key PFCOUNT's reply (nothing is written anywhere).
    pub fn count(&self) -> u64 {
        count_registers(&self.regs)
    }

    /// PFMERGE's new value for the destination: `dest` is its current value
    /// (already merged into `self` through [`HllUnion::add`]) or `None` when
    /// the key is missing (then [`Hll::new`] is used). The destination goes
    /// dense first if any merged HLL was dense, then every non-zero register
    /// is raised in index order (sparse updates may promote), and the cache
    /// is invalidated. `PFMERGE dest` alone thus only invalidates the cache of
    /// an existing key, or creates an empty sparse HLL with the cache invalid.
    pub fn store(&self, dest: Option<Hll>, sparse_max_bytes: usize) -> Result<Hll, HllError> {
        let mut hll = dest.unwrap_or_default();
        if self.any_dense {
            hll.to_dense()?;
        } else if !hll.is_dense() {
            sparse::validate(hll.registers_bytes())?;
        }
        for (index, &v) in self.regs.iter().enumerate() {
            if v != 0 {
                // Each sparse update keeps the stream valid: no revalidation.
                hll.set_register(index, v, sparse_max_bytes, false)?;
            }
        }
        hll.invalidate_cache();
        Ok(hll)
    }
}

#[cfg(test)]
mod tests;
