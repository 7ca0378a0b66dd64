//! The collection rows of the command table: hashes, lists, sets and sorted sets, with
//! Redis 7's arity, flags and key positions (a count of keys where Redis's keys are
//! movable), and the per-family command enums their handlers match on.

use super::{Cmd, Spec};

/// The hash commands ([`crate::hashes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashCmd {
    HSet,
    HSetNx,
    HMSet,
    HGet,
    HMGet,
    HDel,
    HExists,
    HLen,
    HStrlen,
    HKeys,
    HVals,
    HGetAll,
    HIncrBy,
    HIncrByFloat,
    HRandField,
    HScan,
}

/// The list commands ([`crate::lists`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListCmd {
    LPush,
    RPush,
    LPushX,
    RPushX,
    LPop,
    RPop,
    LLen,
    LIndex,
    LSet,
    LRange,
    LTrim,
    LRem,
    LInsert,
    LPos,
    LMove,
    RPopLPush,
    LMPop,
    BLPop,
    BRPop,
    BLMove,
    BRPopLPush,
    BLMPop,
}

/// The set commands ([`crate::sets`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetCmd {
    SAdd,
    SRem,
    SIsMember,
    SMIsMember,
    SMembers,
    SCard,
    SPop,
    SRandMember,
    SMove,
    SInter,
    SInterCard,
    SUnion,
    SDiff,
    SInterStore,
    SUnionStore,
    SDiffStore,
    SScan,
}

/// The sorted set commands ([`crate::zsets`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZSetCmd {
    ZAdd,
    ZIncrBy,
    ZRem,
    ZCard,
    ZCount,
    ZLexCount,
    ZScore,
    ZMScore,
    ZRank,
    ZRevRank,
    ZRange,
    ZRevRange,
    ZRangeStore,
    ZRangeByScore,
    ZRevRangeByScore,
    ZRangeByLex,
    ZRevRangeByLex,
    ZRemRangeByRank,
    ZRemRangeByScore,
    ZRemRangeByLex,
    ZPopMin,
    ZPopMax,
    BZPopMin,
    BZPopMax,
    ZMPop,
    BZMPop,
    ZRandMember,
    ZUnion,
    ZInter,
    ZDiff,
    ZUnionStore,
    ZInterStore,
    ZDiffStore,
    ZInterCard,
    ZScan,
}

const WDF: &[&str] = &["write", "denyoom", "fast"];
const WD: &[&str] = &["write", "denyoom"];
const WF: &[&str] = &["write", "fast"];
const W: &[&str] = &["write"];
const RF: &[&str] = &["readonly", "fast"];
const R: &[&str] = &["readonly"];
const BLOCKING: &[&str] = &["write", "noscript", "blocking"];
const BLOCKING_D: &[&str] = &["write", "denyoom", "noscript", "blocking"];
const MOVABLE_R: &[&str] = &["readonly", "movablekeys"];
const MOVABLE_W: &[&str] = &["write", "movablekeys"];
const MOVABLE_WD: &[&str] = &["write", "denyoom", "movablekeys"];
const MOVABLE_B: &[&str] = &["write", "blocking", "movablekeys"];

pub(super) const ROWS: &[Spec] = &[
    row!("hset", -4, WDF, 1, 1, 1, 0, Hash(HSet)),
    row!("hsetnx", 4, WDF, 1, 1, 1, 0, Hash(HSetNx)),
    row!("hmset", -4, WDF, 1, 1, 1, 0, Hash(HMSet)),
    row!("hget", 3, RF, 1, 1, 1, 0, Hash(HGet)),
    row!("hmget", -3, RF, 1, 1, 1, 0, Hash(HMGet)),
    row!("hdel", -3, WF, 1, 1, 1, 0, Hash(HDel)),
    row!("hexists", 3, RF, 1, 1, 1, 0, Hash(HExists)),
    row!("hlen", 2, RF, 1, 1, 1, 0, Hash(HLen)),
    row!("hstrlen", 3, RF, 1, 1, 1, 0, Hash(HStrlen)),
    row!("hkeys", 2, R, 1, 1, 1, 0, Hash(HKeys)),
    row!("hvals", 2, R, 1, 1, 1, 0, Hash(HVals)),
    row!("hgetall", 2, R, 1, 1, 1, 0, Hash(HGetAll)),
    row!("hincrby", 4, WDF, 1, 1, 1, 0, Hash(HIncrBy)),
    row!("hincrbyfloat", 4, WDF, 1, 1, 1, 0, Hash(HIncrByFloat)),
    row!("hrandfield", -2, R, 1, 1, 1, 0, Hash(HRandField)),
    row!("hscan", -3, R, 1, 1, 1, 0, Hash(HScan)),
    row!("lpush", -3, WDF, 1, 1, 1, 0, List(LPush)),
    row!("rpush", -3, WDF, 1, 1, 1, 0, List(RPush)),
    row!("lpushx", -3, WDF, 1, 1, 1, 0, List(LPushX)),
    row!("rpushx", -3, WDF, 1, 1, 1, 0, List(RPushX)),
    row!("lpop", -2, WF, 1, 1, 1, 0, List(LPop)),
    row!("rpop", -2, WF, 1, 1, 1, 0, List(RPop)),
    row!("llen", 2, RF, 1, 1, 1, 0, List(LLen)),
    row!("lindex", 3, R, 1, 1, 1, 0, List(LIndex)),
    row!("lset", 4, WD, 1, 1, 1, 0, List(LSet)),
    row!("lrange", 4, R, 1, 1, 1, 0, List(LRange)),
    row!("ltrim", 4, W, 1, 1, 1, 0, List(LTrim)),
    row!("lrem", 4, W, 1, 1, 1, 0, List(LRem)),
    row!("linsert", 5, WD, 1, 1, 1, 0, List(LInsert)),
    row!("lpos", -3, R, 1, 1, 1, 0, List(LPos)),
    row!("lmove", 5, WD, 1, 2, 1, 0, List(LMove)),
    row!("rpoplpush", 3, WD, 1, 2, 1, 0, List(RPopLPush)),
    row!("lmpop", -4, MOVABLE_W, 0, 0, 0, 1, List(LMPop)),
    row!("blpop", -3, BLOCKING, 1, -2, 1, 0, List(BLPop)),
    row!("brpop", -3, BLOCKING, 1, -2, 1, 0, List(BRPop)),
    row!("blmove", 6, BLOCKING_D, 1, 2, 1, 0, List(BLMove)),
    row!("brpoplpush", 4, BLOCKING_D, 1, 2, 1, 0, List(BRPopLPush)),
    row!("blmpop", -5, MOVABLE_B, 0, 0, 0, 2, List(BLMPop)),
    row!("sadd", -3, WDF, 1, 1, 1, 0, Sets(SAdd)),
    row!("srem", -3, WF, 1, 1, 1, 0, Sets(SRem)),
    row!("sismember", 3, RF, 1, 1, 1, 0, Sets(SIsMember)),
    row!("smismember", -3, RF, 1, 1, 1, 0, Sets(SMIsMember)),
    row!("smembers", 2, R, 1, 1, 1, 0, Sets(SMembers)),
    row!("scard", 2, RF, 1, 1, 1, 0, Sets(SCard)),
    row!("spop", -2, WF, 1, 1, 1, 0, Sets(SPop)),
    row!("srandmember", -2, R, 1, 1, 1, 0, Sets(SRandMember)),
    row!("smove", 4, WF, 1, 2, 1, 0, Sets(SMove)),
    row!("sinter", -2, R, 1, -1, 1, 0, Sets(SInter)),
    row!("sintercard", -3, MOVABLE_R, 0, 0, 0, 1, Sets(SInterCard)),
    row!("sunion", -2, R, 1, -1, 1, 0, Sets(SUnion)),
    row!("sdiff", -2, R, 1, -1, 1, 0, Sets(SDiff)),
    row!("sinterstore", -3, WD, 1, -1, 1, 0, Sets(SInterStore)),
    row!("sunionstore", -3, WD, 1, -1, 1, 0, Sets(SUnionStore)),
    row!("sdiffstore", -3, WD, 1, -1, 1, 0, Sets(SDiffStore)),
    row!("sscan", -3, R, 1, 1, 1, 0, Sets(SScan)),
    row!("zadd", -4, WDF, 1, 1, 1, 0, ZSet(ZAdd)),
    row!("zincrby", 4, WDF, 1, 1, 1, 0, ZSet(ZIncrBy)),
    row!("zrem", -3, WF, 1, 1, 1, 0, ZSet(ZRem)),
    row!("zcard", 2, RF, 1, 1, 1, 0, ZSet(ZCard)),
    row!("zcount", 4, RF, 1, 1, 1, 0, ZSet(ZCount)),
    row!("zlexcount", 4, RF, 1, 1, 1, 0, ZSet(ZLexCount)),
    row!("zscore", 3, RF, 1, 1, 1, 0, ZSet(ZScore)),
    row!("zmscore", -3, RF, 1, 1, 1, 0, ZSet(ZMScore)),
    row!("zrank", 3, RF, 1, 1, 1, 0, ZSet(ZRank)),
    row!("zrevrank", 3, RF, 1, 1, 1, 0, ZSet(ZRevRank)),
    row!("zrange", -4, R, 1, 1, 1, 0, ZSet(ZRange)),
    row!("zrevrange", -4, R, 1, 1, 1, 0, ZSet(ZRevRange)),
    row!("zrangestore", -5, WD, 1, 2, 1, 0, ZSet(ZRangeStore)),
    row!("zrangebyscore", -4, R, 1, 1, 1, 0, ZSet(ZRangeByScore)),
    row!(
        "zrevrangebyscore",
        -4,
        R,
        1,
        1,
        1,
        0,
        ZSet(ZRevRangeByScore)
    ),
    row!("zrangebylex", -4, R, 1, 1, 1, 0, ZSet(ZRangeByLex)),
    row!("zrevrangebylex", -4, R, 1, 1, 1, 0, ZSet(ZRevRangeByLex)),
    row!("zremrangebyrank", 4, W, 1, 1, 1, 0, ZSet(ZRemRangeByRank)),
    row!("zremrangebyscore", 4, W, 1, 1, 1, 0, ZSet(ZRemRangeByScore)),
    row!("zremrangebylex", 4, W, 1, 1, 1, 0, ZSet(ZRemRangeByLex)),
    row!("zpopmin", -2, WF, 1, 1, 1, 0, ZSet(ZPopMin)),
    row!("zpopmax", -2, WF, 1, 1, 1, 0, ZSet(ZPopMax)),
    row!("bzpopmin", -3, BLOCKING, 1, -2, 1, 0, ZSet(BZPopMin)),
    row!("bzpopmax", -3, BLOCKING, 1, -2, 1, 0, ZSet(BZPopMax)),
    row!("zmpop", -4, MOVABLE_W, 0, 0, 0, 1, ZSet(ZMPop)),
    row!("bzmpop", -5, MOVABLE_B, 0, 0, 0, 2, ZSet(BZMPop)),
    row!("zrandmember", -2, R, 1, 1, 1, 0, ZSet(ZRandMember)),
    row!("zunion", -3, MOVABLE_R, 0, 0, 0, 1, ZSet(ZUnion)),
    row!("zinter", -3, MOVABLE_R, 0, 0, 0, 1, ZSet(ZInter)),
    row!("zdiff", -3, MOVABLE_R, 0, 0, 0, 1, ZSet(ZDiff)),
    row!("zunionstore", -4, MOVABLE_WD, 1, 1, 1, 2, ZSet(ZUnionStore)),
    row!("zinterstore", -4, MOVABLE_WD, 1, 1, 1, 2, ZSet(ZInterStore)),
    row!("zdiffstore", -4, MOVABLE_WD, 1, 1, 1, 2, ZSet(ZDiffStore)),
    row!("zintercard", -3, MOVABLE_R, 0, 0, 0, 1, ZSet(ZInterCard)),
    row!("zscan", -3, R, 1, 1, 1, 0, ZSet(ZScan)),
];

#[cfg(test)]
mod tests {
    use crate::table::keys_of_line as keys;

    #[test]
    fn counted_keys_are_found_where_the_count_says() {
        assert_eq!(keys("lmpop 2 a b LEFT"), vec![2, 3]);
        assert_eq!(keys("blmpop 0 2 a b LEFT"), vec![3, 4]);
        assert_eq!(keys("zunionstore d 2 a b"), vec![1, 3, 4]);
        assert_eq!(keys("blpop a b 0"), vec![1, 2]);
        // A count past the arguments names only what is there; a bad count none.
        assert_eq!(keys("lmpop 5 a LEFT"), vec![2, 3]);
        assert!(keys("lmpop x a LEFT").is_empty());
        assert!(keys("lmpop -1 a LEFT").is_empty());
    }
}
