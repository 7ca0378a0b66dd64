//! `COMMAND DOCS` rows of the collection commands: summary, group, first Redis
//! version and complexity, as Redis 7 reports them.

use crate::table::{HashCmd, ListCmd, SetCmd, ZSetCmd};

type Doc = (&'static str, &'static str, &'static str, &'static str);

const O1: &str = "O(1)";
const LOGN: &str = "O(log(N))";
const ON: &str = "O(N)";

pub(super) fn hash_doc(cmd: HashCmd) -> Doc {
    use HashCmd::*;
    const FIELDS: &str = "O(N) where N is the number of fields being set.";
    const SIZE: &str = "O(N) where N is the size of the hash.";
    let (summary, since, complexity) = match cmd {
        HSet => (
            "Creates or modifies the value of a field in a hash.",
            "2.0.0",
            FIELDS,
        ),
        HSetNx => (
            "Sets the value of a field in a hash only when the field doesn't exist.",
            "2.0.0",
            O1,
        ),
        HMSet => ("Sets the values of multiple fields.", "2.0.0", FIELDS),
        HGet => ("Returns the value of a field in a hash.", "2.0.0", O1),
        HMGet => (
            "Returns the values of all fields in a hash.",
            "2.0.0",
            "O(N) where N is the number of fields being requested.",
        ),
        HDel => (
            "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.",
            "2.0.0",
            "O(N) where N is the number of fields to be removed.",
        ),
        HExists => ("Determines whether a field exists in a hash.", "2.0.0", O1),
        HLen => ("Returns the number of fields in a hash.", "2.0.0", O1),
        HStrlen => ("Returns the length of the value of a field.", "3.2.0", O1),
        HKeys => ("Returns all fields in a hash.", "2.0.0", SIZE),
        HVals => ("Returns all values in a hash.", "2.0.0", SIZE),
        HGetAll => ("Returns all fields and values in a hash.", "2.0.0", SIZE),
        HIncrBy => (
            "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist.",
            "2.0.0",
            O1,
        ),
        HIncrByFloat => (
            "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist.",
            "2.6.0",
            O1,
        ),
        HRandField => (
            "Returns one or more random fields from a hash.",
            "6.2.0",
            "O(N) where N is the number of fields returned",
        ),
        HScan => (
            "Iterates over fields and values of a hash.",
            "2.8.0",
            "O(1) for every call. O(N) for a complete iteration.",
        ),
    };
    (summary, "hash", since, complexity)
}

pub(super) fn list_doc(cmd: ListCmd) -> Doc {
    use ListCmd::*;
    const PUSH: &str = "O(1) for each element added.";
    let (summary, since, complexity) = match cmd {
        LPush => (
            "Prepends one or more elements to a list. Creates the key if it doesn't exist.",
            "1.0.0",
            PUSH,
        ),
        RPush => (
            "Appends one or more elements to a list. Creates the key if it doesn't exist.",
            "1.0.0",
            PUSH,
        ),
        LPushX => (
            "Prepends one or more elements to a list only when the list exists.",
            "2.2.0",
            PUSH,
        ),
        RPushX => (
            "Appends an element to a list only when the list exists.",
            "2.2.0",
            PUSH,
        ),
        LPop => (
            "Returns the first elements in a list after removing it. Deletes the list if the last element was popped.",
            "1.0.0",
            "O(N) where N is the number of elements returned",
        ),
        RPop => (
            "Returns and removes the last elements of a list. Deletes the list if the last element was popped.",
            "1.0.0",
            "O(N) where N is the number of elements returned",
        ),
        LLen => ("Returns the length of a list.", "1.0.0", O1),
        LIndex => ("Returns an element from a list by its index.", "1.0.0", ON),
        LSet => (
            "Sets the value of an element in a list by its index.",
            "1.0.0",
            ON,
        ),
        LRange => (
            "Returns a range of elements from a list.",
            "1.0.0",
            "O(S+N) where S is the distance of start offset from HEAD and N is the number of elements in the range.",
        ),
        LTrim => (
            "Removes elements from both ends a list. Deletes the list if all elements were trimmed.",
            "1.0.0",
            "O(N) where N is the number of elements to be removed by the operation.",
        ),
        LRem => (
            "Removes elements from a list. Deletes the list if the last element was removed.",
            "1.0.0",
            "O(N+M) where N is the length of the list and M is the number of elements removed.",
        ),
        LInsert => (
            "Inserts an element before or after another element in a list.",
            "2.2.0",
            ON,
        ),
        LPos => (
            "Returns the index of matching elements in a list.",
            "6.0.6",
            "O(N) where N is the number of elements in the list, for the average case.",
        ),
        LMove => (
            "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved.",
            "6.2.0",
            O1,
        ),
        RPopLPush => (
            "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped.",
            "1.2.0",
            O1,
        ),
        LMPop => (
            "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped.",
            "7.0.0",
            "O(N+M) where N is the number of provided keys and M is the number of elements returned.",
        ),
        BLPop => (
            "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.",
            "2.0.0",
            "O(N) where N is the number of provided keys.",
        ),
        BRPop => (
            "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.",
            "2.0.0",
            "O(N) where N is the number of provided keys.",
        ),
        BLMove => (
            "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved.",
            "6.2.0",
            O1,
        ),
        BRPopLPush => (
            "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped.",
            "2.2.0",
            O1,
        ),
        BLMPop => (
            "Pops the first element from one of multiple lists. Blocks until an element is available otherwise. Deletes the list if the last element was popped.",
            "7.0.0",
            "O(N+M) where N is the number of provided keys and M is the number of elements returned.",
        ),
    };
    (summary, "list", since, complexity)
}

pub(super) fn set_doc(cmd: SetCmd) -> Doc {
    use SetCmd::*;
    const ALL: &str = "O(N) where N is the total number of elements in all given sets.";
    const INTER: &str = "O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.";
    let (summary, since, complexity) = match cmd {
        SAdd => (
            "Adds one or more members to a set. Creates the key if it doesn't exist.",
            "1.0.0",
            "O(1) for each element added.",
        ),
        SRem => (
            "Removes one or more members from a set. Deletes the set if the last member was removed.",
            "1.0.0",
            "O(N) where N is the number of members to be removed.",
        ),
        SIsMember => ("Determines whether a member belongs to a set.", "1.0.0", O1),
        SMIsMember => (
            "Determines whether multiple members belong to a set.",
            "6.2.0",
            "O(N) where N is the number of elements being checked for membership",
        ),
        SMembers => (
            "Returns all members of a set.",
            "1.0.0",
            "O(N) where N is the set cardinality.",
        ),
        SCard => ("Returns the number of members in a set.", "1.0.0", O1),
        SPop => (
            "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped.",
            "1.0.0",
            "Without the count argument O(1), otherwise O(N) where N is the value of the passed count.",
        ),
        SRandMember => (
            "Get one or multiple random members from a set",
            "1.0.0",
            "Without the count argument O(1), otherwise O(N) where N is the absolute value of the passed count.",
        ),
        SMove => ("Moves a member from one set to another.", "1.0.0", O1),
        SInter => ("Returns the intersect of multiple sets.", "1.0.0", INTER),
        SInterCard => (
            "Returns the number of members of the intersect of multiple sets.",
            "7.0.0",
            INTER,
        ),
        SUnion => ("Returns the union of multiple sets.", "1.0.0", ALL),
        SDiff => ("Returns the difference of multiple sets.", "1.0.0", ALL),
        SInterStore => (
            "Stores the intersect of multiple sets in a key.",
            "1.0.0",
            INTER,
        ),
        SUnionStore => ("Stores the union of multiple sets in a key.", "1.0.0", ALL),
        SDiffStore => (
            "Stores the difference of multiple sets in a key.",
            "1.0.0",
            ALL,
        ),
        SScan => (
            "Iterates over members of a set.",
            "2.8.0",
            "O(1) for every call. O(N) for a complete iteration.",
        ),
    };
    (summary, "set", since, complexity)
}

pub(super) fn zset_doc(cmd: ZSetCmd) -> Doc {
    use ZSetCmd::*;
    const RANGE: &str = "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements returned.";
    const REMOVE: &str = "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.";
    const POP: &str = "O(log(N)*M) with N being the number of elements in the sorted set, and M being the number of elements popped.";
    const SETS: &str = "O(N)+O(M*log(M)) with N being the sum of the sizes of the input sorted sets, and M being the number of elements in the resulting sorted set.";
    let (summary, since, complexity) = match cmd {
        ZAdd => (
            "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist.",
            "1.2.0",
            "O(log(N)) for each item added, where N is the number of elements in the sorted set.",
        ),
        ZIncrBy => (
            "Increments the score of a member in a sorted set.",
            "1.2.0",
            LOGN,
        ),
        ZRem => (
            "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed.",
            "1.2.0",
            "O(M*log(N)) with N being the number of elements in the sorted set and M the number of elements to be removed.",
        ),
        ZCard => (
            "Returns the number of members in a sorted set.",
            "1.2.0",
            O1,
        ),
        ZCount => (
            "Returns the count of members in a sorted set that have scores within a range.",
            "2.0.0",
            LOGN,
        ),
        ZLexCount => (
            "Returns the number of members in a sorted set within a lexicographical range.",
            "2.8.9",
            LOGN,
        ),
        ZScore => (
            "Returns the score of a member in a sorted set.",
            "1.2.0",
            O1,
        ),
        ZMScore => (
            "Returns the score of one or more members in a sorted set.",
            "6.2.0",
            "O(N) where N is the number of members being requested.",
        ),
        ZRank => (
            "Returns the index of a member in a sorted set ordered by ascending scores.",
            "2.0.0",
            LOGN,
        ),
        ZRevRank => (
            "Returns the index of a member in a sorted set ordered by descending scores.",
            "2.0.0",
            LOGN,
        ),
        ZRange => (
            "Returns members in a sorted set within a range of indexes.",
            "1.2.0",
            RANGE,
        ),
        ZRevRange => (
            "Returns members in a sorted set within a range of indexes in reverse order.",
            "1.2.0",
            RANGE,
        ),
        ZRangeStore => (
            "Stores a range of members from sorted set in a key.",
            "6.2.0",
            RANGE,
        ),
        ZRangeByScore => (
            "Returns members in a sorted set within a range of scores.",
            "1.0.5",
            RANGE,
        ),
        ZRevRangeByScore => (
            "Returns members in a sorted set within a range of scores in reverse order.",
            "2.2.0",
            RANGE,
        ),
        ZRangeByLex => (
            "Returns members in a sorted set within a lexicographical range.",
            "2.8.9",
            RANGE,
        ),
        ZRevRangeByLex => (
            "Returns members in a sorted set within a lexicographical range in reverse order.",
            "2.8.9",
            RANGE,
        ),
        ZRemRangeByRank => (
            "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed.",
            "2.0.0",
            REMOVE,
        ),
        ZRemRangeByScore => (
            "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed.",
            "1.2.0",
            REMOVE,
        ),
        ZRemRangeByLex => (
            "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed.",
            "2.8.9",
            REMOVE,
        ),
        ZPopMin => (
            "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.",
            "5.0.0",
            POP,
        ),
        ZPopMax => (
            "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.",
            "5.0.0",
            POP,
        ),
        BZPopMin => (
            "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.",
            "5.0.0",
            LOGN,
        ),
        BZPopMax => (
            "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member available otherwise.  Deletes the sorted set if the last element was popped.",
            "5.0.0",
            LOGN,
        ),
        ZMPop => (
            "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped.",
            "7.0.0",
            "O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in the sorted set, and M being the number of elements popped.",
        ),
        BZMPop => (
            "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.",
            "7.0.0",
            "O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in the sorted set, and M being the number of elements popped.",
        ),
        ZRandMember => (
            "Returns one or more random members from a sorted set.",
            "6.2.0",
            "O(N) where N is the number of members returned",
        ),
        ZUnion => ("Returns the union of multiple sorted sets.", "6.2.0", SETS),
        ZInter => (
            "Returns the intersect of multiple sorted sets.",
            "6.2.0",
            SETS,
        ),
        ZDiff => (
            "Returns the difference between multiple sorted sets.",
            "6.2.0",
            SETS,
        ),
        ZUnionStore => (
            "Stores the union of multiple sorted sets in a key.",
            "2.0.0",
            SETS,
        ),
        ZInterStore => (
            "Stores the intersect of multiple sorted sets in a key.",
            "2.0.0",
            SETS,
        ),
        ZDiffStore => (
            "Stores the difference of multiple sorted sets in a key.",
            "6.2.0",
            SETS,
        ),
        ZInterCard => (
            "Returns the number of members of the intersect of multiple sorted sets.",
            "7.0.0",
            "O(N*K) worst case with N being the smallest input sorted set, K being the number of input sorted sets.",
        ),
        ZScan => (
            "Iterates over members and scores of a sorted set.",
            "2.8.0",
            "O(1) for every call. O(N) for a complete iteration.",
        ),
    };
    (summary, "sorted-set", since, complexity)
}
