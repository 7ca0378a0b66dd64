//! `COMMAND DOCS` rows of bitmaps, HyperLogLog, geo and SORT: summary, group, first
//! Redis version and complexity, from Redis 7.0's command table.

use crate::table::{BitCmd, GeoCmd, HllCmd};

type Doc = (&'static str, &'static str, &'static str, &'static str);

pub(super) fn bit_doc(cmd: BitCmd) -> Doc {
    use BitCmd::*;
    let (summary, since, complexity) = match cmd {
        SetBit => (
            "Sets or clears the bit at offset in the string value stored at key",
            "2.2.0",
            "O(1)",
        ),
        GetBit => (
            "Returns the bit value at offset in the string value stored at key",
            "2.2.0",
            "O(1)",
        ),
        BitCount => ("Count set bits in a string", "2.6.0", "O(N)"),
        BitPos => ("Find first bit set or clear in a string", "2.8.7", "O(N)"),
        BitOp => (
            "Perform bitwise operations between strings",
            "2.6.0",
            "O(N)",
        ),
        BitField => (
            "Perform arbitrary bitfield integer operations on strings",
            "3.2.0",
            "O(1) for each subcommand specified",
        ),
        BitFieldRo => (
            "Perform arbitrary bitfield integer operations on strings. Read-only variant of BITFIELD",
            "6.0.0",
            "O(1) for each subcommand specified",
        ),
    };
    (summary, "bitmap", since, complexity)
}

pub(super) fn hll_doc(cmd: HllCmd) -> Doc {
    use HllCmd::*;
    let (summary, since, complexity) = match cmd {
        PfAdd => (
            "Adds the specified elements to the specified HyperLogLog.",
            "2.8.9",
            "O(1) to add every element.",
        ),
        PfCount => (
            "Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).",
            "2.8.9",
            "O(1) with a very small average constant time when called with a single key. O(N) with N being the number of keys, and much bigger constant times, when called with multiple keys.",
        ),
        PfMerge => (
            "Merge N different HyperLogLogs into a single one.",
            "2.8.9",
            "O(N) to merge N HyperLogLogs, but with high constant times.",
        ),
        PfDebug => (
            "Internal commands for debugging HyperLogLog values",
            "2.8.9",
            "N/A",
        ),
    };
    (summary, "hyperloglog", since, complexity)
}

pub(super) fn geo_doc(cmd: GeoCmd) -> Doc {
    use GeoCmd::*;
    let (summary, since, complexity) = match cmd {
        GeoAdd => (
            "Add one or more geospatial items in the geospatial index represented using a sorted set",
            "3.2.0",
            "O(log(N)) for each item added, where N is the number of elements in the sorted set.",
        ),
        GeoDist => (
            "Returns the distance between two members of a geospatial index",
            "3.2.0",
            "O(log(N))",
        ),
        GeoHash => (
            "Returns members of a geospatial index as standard geohash strings",
            "3.2.0",
            "O(log(N)) for each member requested, where N is the number of elements in the sorted set.",
        ),
        GeoPos => (
            "Returns longitude and latitude of members of a geospatial index",
            "3.2.0",
            "O(N) where N is the number of members requested.",
        ),
        GeoRadius => (
            "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a point",
            "3.2.0",
            "O(N+log(M)) where N is the number of elements inside the bounding box of the circular area delimited by center and radius and M is the number of items inside the index.",
        ),
        GeoRadiusRo => (
            "A read-only variant for GEORADIUS",
            "3.2.10",
            "O(N+log(M)) where N is the number of elements inside the bounding box of the circular area delimited by center and radius and M is the number of items inside the index.",
        ),
        GeoRadiusByMember => (
            "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a member",
            "3.2.0",
            "O(N+log(M)) where N is the number of elements inside the bounding box of the circular area delimited by center and radius and M is the number of items inside the index.",
        ),
        GeoRadiusByMemberRo => (
            "A read-only variant for GEORADIUSBYMEMBER",
            "3.2.10",
            "O(N+log(M)) where N is the number of elements inside the bounding box of the circular area delimited by center and radius and M is the number of items inside the index.",
        ),
        GeoSearch => (
            "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle.",
            "6.2.0",
            "O(N+log(M)) where N is the number of elements in the grid-aligned bounding box area around the shape provided as the filter and M is the number of items inside the shape",
        ),
        GeoSearchStore => (
            "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle, and store the result in another key.",
            "6.2.0",
            "O(N+log(M)) where N is the number of elements in the grid-aligned bounding box area around the shape provided as the filter and M is the number of items inside the shape",
        ),
    };
    (summary, "geo", since, complexity)
}

/// SORT's row (`ro`: SORT_RO's).
pub(super) fn sort_doc(ro: bool) -> Doc {
    if ro {
        (
            "Sort the elements in a list, set or sorted set. Read-only variant of SORT.",
            "generic",
            "7.0.0",
            "O(N+M*log(M)) where N is the number of elements in the list or set to sort, and M the number of returned elements. When the elements are not sorted, complexity is O(N).",
        )
    } else {
        (
            "Sort the elements in a list, set or sorted set",
            "generic",
            "1.0.0",
            "O(N+M*log(M)) where N is the number of elements in the list or set to sort, and M the number of returned elements. When the elements are not sorted, complexity is O(N).",
        )
    }
}

/// DUMP's row (`restore`: RESTORE's).
pub(super) fn dump_doc(restore: bool) -> Doc {
    if restore {
        (
            "Create a key using the provided serialized value, previously obtained using DUMP.",
            "generic",
            "2.6.0",
            "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).",
        )
    } else {
        (
            "Return a serialized version of the value stored at the specified key.",
            "generic",
            "2.6.0",
            "O(1) to access the key and additional O(N*M) to serialize it, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1).",
        )
    }
}
