//! The command rows of the data types built on strings and sorted sets: bitmaps,
//! HyperLogLog and geo, with Redis 7.0's arity, flags and key positions, and the
//! per-family command enums their handlers match on.

use super::{Cmd, Spec};

/// The bitmap commands ([`crate::bitmaps`]): bit operations on strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitCmd {
    SetBit,
    GetBit,
    BitCount,
    BitPos,
    BitOp,
    BitField,
    BitFieldRo,
}

/// The HyperLogLog commands ([`crate::hyperloglog`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HllCmd {
    PfAdd,
    PfCount,
    PfMerge,
    PfDebug,
}

/// The geo commands ([`crate::geo`]): points stored in sorted sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeoCmd {
    GeoAdd,
    GeoDist,
    GeoHash,
    GeoPos,
    GeoRadius,
    GeoRadiusRo,
    GeoRadiusByMember,
    GeoRadiusByMemberRo,
    GeoSearch,
    GeoSearchStore,
}

/// The stream commands ([`crate::streams`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamCmd {
    XAdd,
    XRange,
    XRevRange,
    XLen,
    XDel,
    XTrim,
    XSetId,
    XRead,
    XReadGroup,
    XGroup,
    XAck,
    XPending,
    XClaim,
    XAutoClaim,
    XInfo,
}

const WD: &[&str] = &["write", "denyoom"];
const WDF: &[&str] = &["write", "denyoom", "fast"];
const WDM: &[&str] = &["write", "denyoom", "movablekeys"];
const R: &[&str] = &["readonly"];
const RF: &[&str] = &["readonly", "fast"];

pub(super) const ROWS: &[Spec] = &[
    row!("setbit", 4, WD, 1, 1, 1, 0, Bit(SetBit)),
    row!("getbit", 3, RF, 1, 1, 1, 0, Bit(GetBit)),
    row!("bitcount", -2, R, 1, 1, 1, 0, Bit(BitCount)),
    row!("bitpos", -3, R, 1, 1, 1, 0, Bit(BitPos)),
    row!("bitop", -4, WD, 2, -1, 1, 0, Bit(BitOp)),
    row!("bitfield", -2, WD, 1, 1, 1, 0, Bit(BitField)),
    row!("bitfield_ro", -2, RF, 1, 1, 1, 0, Bit(BitFieldRo)),
    row!("pfadd", -2, WDF, 1, 1, 1, 0, Hll(PfAdd)),
    row!("pfcount", -2, R, 1, -1, 1, 0, Hll(PfCount)),
    row!("pfmerge", -2, WD, 1, -1, 1, 0, Hll(PfMerge)),
    row!(
        "pfdebug",
        3,
        &["write", "denyoom", "admin"],
        2,
        2,
        1,
        0,
        Hll(PfDebug)
    ),
    row!("xadd", -5, WDF, 1, 1, 1, 0, Stream(XAdd)),
    row!("xrange", -4, R, 1, 1, 1, 0, Stream(XRange)),
    row!("xrevrange", -4, R, 1, 1, 1, 0, Stream(XRevRange)),
    row!("xlen", 2, RF, 1, 1, 1, 0, Stream(XLen)),
    row!("xdel", -3, &["write", "fast"], 1, 1, 1, 0, Stream(XDel)),
    row!("xtrim", -4, &["write"], 1, 1, 1, 0, Stream(XTrim)),
    row!("xsetid", -3, WDF, 1, 1, 1, 0, Stream(XSetId)),
    row!(
        "xread",
        -4,
        &["readonly", "blocking", "movablekeys"],
        0,
        0,
        0,
        0,
        Stream(XRead)
    ),
    row!(
        "xreadgroup",
        -7,
        &["write", "blocking", "movablekeys"],
        0,
        0,
        0,
        0,
        Stream(XReadGroup)
    ),
    // A container whose every subcommand but HELP writes the key at 2.
    row!("xgroup", -2, &["write"], 0, 0, 0, 0, Stream(XGroup)),
    row!("xack", -4, &["write", "fast"], 1, 1, 1, 0, Stream(XAck)),
    row!("xpending", -3, R, 1, 1, 1, 0, Stream(XPending)),
    row!("xclaim", -6, &["write", "fast"], 1, 1, 1, 0, Stream(XClaim)),
    row!(
        "xautoclaim",
        -6,
        &["write", "fast"],
        1,
        1,
        1,
        0,
        Stream(XAutoClaim)
    ),
    row!("xinfo", -2, &[], 0, 0, 0, 0, Stream(XInfo)),
    row!("geoadd", -5, WD, 1, 1, 1, 0, Geo(GeoAdd)),
    row!("geodist", -4, R, 1, 1, 1, 0, Geo(GeoDist)),
    row!("geohash", -2, R, 1, 1, 1, 0, Geo(GeoHash)),
    row!("geopos", -2, R, 1, 1, 1, 0, Geo(GeoPos)),
    row!("georadius", -6, WDM, 1, 1, 1, 0, Geo(GeoRadius)),
    row!("georadius_ro", -6, R, 1, 1, 1, 0, Geo(GeoRadiusRo)),
    row!(
        "georadiusbymember",
        -5,
        WDM,
        1,
        1,
        1,
        0,
        Geo(GeoRadiusByMember)
    ),
    row!(
        "georadiusbymember_ro",
        -5,
        R,
        1,
        1,
        1,
        0,
        Geo(GeoRadiusByMemberRo)
    ),
    row!("geosearch", -7, R, 1, 1, 1, 0, Geo(GeoSearch)),
    row!("geosearchstore", -8, WD, 1, 2, 1, 0, Geo(GeoSearchStore)),
];

/// Where a `STORE key` (SORT) or `STORE key` / `STOREDIST key` (GEORADIUS and
/// GEORADIUSBYMEMBER) option names its destination, as Redis's `sortGetKeys` and
/// `georadiusGetKeys` find it: options are scanned from `from`, the last one wins.
/// `skip` says how many arguments an option takes (SORT's LIMIT takes two), so an
/// option's argument spelled `store` is not mistaken for the option.
pub(super) fn store_key_position(
    args: &[bytes::Bytes],
    from: usize,
    names: &[&str],
    skip: fn(&[u8]) -> usize,
) -> Option<usize> {
    let mut found = None;
    let mut i = from;
    while i < args.len() {
        let arg = &args[i];
        if names.iter().any(|n| arg.eq_ignore_ascii_case(n.as_bytes())) {
            if i + 1 < args.len() {
                found = Some(i + 1);
            }
            i += 2;
        } else {
            i += 1 + skip(arg);
        }
    }
    found
}

/// The keys of XREAD and XREADGROUP: the first half of what follows STREAMS (Redis's
/// `xreadGetKeys`).
pub(super) fn xread_key_positions(args: &[bytes::Bytes]) -> std::ops::Range<usize> {
    let Some(at) = args
        .iter()
        .position(|a| a.eq_ignore_ascii_case(b"streams"))
        .map(|i| i + 1)
    else {
        return 0..0;
    };
    let n = args.len().saturating_sub(at);
    if n % 2 != 0 {
        return 0..0;
    }
    at..at + n / 2
}

/// The arguments a SORT option takes besides itself (Redis's `sortGetKeys` table).
pub(super) fn sort_option_width(arg: &[u8]) -> usize {
    if arg.eq_ignore_ascii_case(b"limit") {
        2
    } else if arg.eq_ignore_ascii_case(b"get") || arg.eq_ignore_ascii_case(b"by") {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use crate::table::keys_of_line as keys;

    #[test]
    fn store_options_name_a_key() {
        assert_eq!(keys("sort k"), vec![1]);
        assert_eq!(keys("sort k STORE d"), vec![1, 3]);
        assert_eq!(keys("sort k by w limit 0 store get x store d"), vec![1, 10]);
        // `store` as BY's pattern is not the option.
        assert_eq!(keys("sort k BY store"), vec![1]);
        assert_eq!(keys("sort k STORE"), vec![1]);
        assert_eq!(keys("sort_ro k STORE d"), vec![1]);
        assert_eq!(keys("georadius g 0 0 1 km STORE d"), vec![1, 7]);
        assert_eq!(keys("georadius g 0 0 1 km store a storedist b"), vec![1, 9]);
        assert_eq!(keys("georadiusbymember g m 1 km storedist d"), vec![1, 6]);
        assert_eq!(keys("georadius_ro g 0 0 1 km store d"), vec![1]);
        assert_eq!(
            keys("geosearchstore d s frommember m byradius 1 km"),
            vec![1, 2]
        );
        assert_eq!(keys("bitop and d a b"), vec![2, 3, 4]);
        assert_eq!(keys("xread count 2 streams a b 0 0"), vec![4, 5]);
        assert_eq!(keys("xreadgroup group g c streams a >"), vec![5]);
        assert!(keys("xread streams a b 0").is_empty());
        assert_eq!(keys("xgroup create s g $"), vec![2]);
        assert!(keys("xgroup help").is_empty());
        assert_eq!(keys("xinfo stream s"), vec![2]);
    }
}
