//! `COMMAND DOCS` rows of bitmaps, HyperLogLog, geo and SORT: summary, group, first
//! Redis version and complexity, from Redis 7.0's command table.

use crate::table::{BitCmd, GeoCmd, HllCmd, StreamCmd};

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

pub(super) fn stream_doc(cmd: StreamCmd) -> Doc {
    use StreamCmd::*;
    let (summary, since, complexity) = match cmd {
        XAdd => (
            "Appends a new entry to a stream",
            "5.0.0",
            "O(1) when adding a new entry, O(N) when trimming where N being the number of entries evicted.",
        ),
        XRange => (
            "Return a range of elements in a stream, with IDs matching the specified IDs interval",
            "5.0.0",
            "O(N) with N being the number of elements being returned. If N is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1).",
        ),
        XRevRange => (
            "Return a range of elements in a stream, with IDs matching the specified IDs interval, in reverse order (from greater to smaller IDs) compared to XRANGE",
            "5.0.0",
            "O(N) with N being the number of elements returned. If N is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1).",
        ),
        XLen => ("Return the number of entries in a stream", "5.0.0", "O(1)"),
        XDel => (
            "Removes the specified entries from the stream. Returns the number of items actually deleted, that may be different from the number of IDs passed in case certain IDs do not exist.",
            "5.0.0",
            "O(1) for each single item to delete in the stream, regardless of the stream size.",
        ),
        XTrim => (
            "Trims the stream to (approximately if '~' is passed) a certain size",
            "5.0.0",
            "O(N), with N being the number of evicted entries. Constant times are very small however, since entries are organized in macro nodes containing multiple entries that can be released with a single deallocation.",
        ),
        XSetId => (
            "An internal command for replicating stream values",
            "5.0.0",
            "O(1)",
        ),
        XRead => (
            "Return never seen elements in multiple streams, with IDs greater than the ones reported by the caller for each stream. Can block.",
            "5.0.0",
            "For each stream mentioned: O(N) with N being the number of elements being returned, it means that XREAD-ing with a fixed COUNT is O(1). Note that when the BLOCK option is used, XADD will pay O(M) time in order to serve the M clients blocked on the stream getting new data.",
        ),
        XReadGroup => (
            "Return new entries from a stream using a consumer group, or access the history of the pending entries for a given consumer. Can block.",
            "5.0.0",
            "For each stream mentioned: O(M) with M being the number of elements returned. If M is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1). On the other side when XREADGROUP blocks, XADD will pay the O(N) time in order to serve the N clients blocked on the stream getting new data.",
        ),
        XGroup => (
            "A container for consumer groups commands",
            "5.0.0",
            "Depends on subcommand.",
        ),
        XAck => (
            "Marks a pending message as correctly processed, effectively removing it from the pending entries list of the consumer group. Return value of the command is the number of messages successfully acknowledged, that is, the IDs we were actually able to resolve in the PEL.",
            "5.0.0",
            "O(1) for each message ID processed.",
        ),
        XPending => (
            "Return information and entries from a stream consumer group pending entries list, that are messages fetched but never acknowledged.",
            "5.0.0",
            "O(N) with N being the number of elements returned, so asking for a small fixed number of entries per call is O(1). O(M), where M is the total number of entries scanned when used with the IDLE filter. When the command returns just the summary and the list of consumers is small, it runs in O(1) time; otherwise, an additional O(N) time for iterating every consumer.",
        ),
        XClaim => (
            "Changes (or acquires) ownership of a message in a consumer group, as if the message was delivered to the specified consumer.",
            "5.0.0",
            "O(log N) with N being the number of messages in the PEL of the consumer group.",
        ),
        XAutoClaim => (
            "Changes (or acquires) ownership of messages in a consumer group, as if the messages were delivered to the specified consumer.",
            "6.2.0",
            "O(1) if COUNT is small.",
        ),
        XInfo => (
            "A container for stream introspection commands",
            "5.0.0",
            "Depends on subcommand.",
        ),
    };
    (summary, "stream", since, complexity)
}
