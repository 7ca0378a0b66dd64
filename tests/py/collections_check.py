"""redis-py against DMC's collection types: hashes, lists, sets and sorted sets, RESP2 and RESP3.

Every hash, list, set and sorted-set command with its interesting options, checked with
Redis 7 semantics (the expectations were taken from redis-server 7.0 through redis-py,
`decode_responses=True`, so each assert states what redis-py returns over that protocol):
replies, error texts, WRONGTYPE, TYPE / SCAN TYPE / DEL / UNLINK / EXPIRE / RENAME / COPY /
MEMORY USAGE / OBJECT ENCODING of collections, empty collections deleting their key, large
collections, blocking pops (timeouts, immediate answers, and a pop blocked on one connection
woken by a push on another).

    python3 collections_check.py PORT          all checks against one server
    python3 collections_check.py PORT PORT2    the same checks through PORT (blocked pops wait on
                                         PORT2), then collections written through one agent
                                         and read, changed and popped through the other

PORT and PORT2 are two agents of one cluster: they serve one keyspace and forward commands
between themselves. Only db 0 is used; keys of multi-key commands share a hash tag (`{t}`) so
they live in one shard, other keys are spread. Sets, hash fields and SCAN are compared
order-insensitively. Run by tests/tests/redis_py.rs with one agent's port, and with the ports of
two agents of one cluster; prints "RESP2: ok", "RESP3: ok" (and "CROSS: ok" with two ports), and
exits non-zero with the failing assertion (the traceback names the command, the message what
came back) otherwise.
"""
import sys
import threading
import time

import redis

HOST = "127.0.0.1"
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def connect(port: int, proto: int) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, protocol=proto, decode_responses=True)


def eq(got, want):
    assert got == want, f"got {got!r}, want {want!r}"
    return got


def err(prefix: str, fn, *args, **kwargs) -> None:
    """`fn(*args)` must fail with a server error whose text starts with `prefix`."""
    what = f"{getattr(fn, '__name__', fn)}{args}"
    try:
        got = fn(*args, **kwargs)
    except redis.ResponseError as e:
        assert str(e).startswith(prefix), f"{what}: error {str(e)!r}, want {prefix!r}"
        return
    raise AssertionError(f"{what}: returned {got!r}, want error {prefix!r}")


def scored(proto: int, items):
    """WITHSCORES pairs (ZRANGE, ZPOPMIN with a count, ZUNION...): tuples over RESP2, lists over RESP3."""
    return [tuple(p) if proto == 2 else list(p) for p in items]


def popped(proto: int, *item):
    """BLPOP / BZPOPMIN replies: a tuple over RESP2, a list over RESP3."""
    return tuple(item) if proto == 2 else list(item)


def as_pairs(proto: int, got):
    """HRANDFIELD WITHVALUES / ZRANDMEMBER WITHSCORES: flat over RESP2, nested pairs over RESP3."""
    if proto == 2:
        assert len(got) % 2 == 0 and all(isinstance(x, str) for x in got), got
        return list(zip(got[::2], got[1::2]))
    assert all(isinstance(p, list) and len(p) == 2 for p in got), got
    return [tuple(p) for p in got]


def scan_all(scan, key, **kwargs):
    """HSCAN / SSCAN / ZSCAN until cursor 0; every item seen (repeats allowed)."""
    cursor, seen = 0, []
    while True:
        cursor, batch = scan(key, cursor, **kwargs)
        seen += list(batch.items()) if isinstance(batch, dict) else batch
        if cursor == 0:
            return seen


def timed(fn, *args, **kwargs):
    start = time.monotonic()
    got = fn(*args, **kwargs)
    return got, time.monotonic() - start


def times_out(fn, *args, **kwargs) -> None:
    """A blocking call with a 0.1 s timeout on empty keys: None, after (about) the timeout."""
    got, took = timed(fn, *args, **kwargs)
    assert got is None and 0.09 <= took < 3, f"{fn.__name__}{args}: {got!r} after {took:.3f} s"


def immediate(fn, *args, **kwargs):
    """A blocking call (timeout 1 s) on a key holding something: answered before the timeout."""
    got, took = timed(fn, *args, **kwargs)
    assert took < 0.9, f"{fn.__name__}{args}: blocked {took:.3f} s for {got!r}"
    return got


def wakeup(pusher: redis.Redis, block_port: int, proto: int, key: str) -> None:
    """BLPOP on an empty list through `block_port`, woken by RPUSH through `pusher`."""
    blocker = connect(block_port, proto)
    box = {}

    def block():
        try:
            box["got"] = timed(blocker.blpop, [key], 5)
        except Exception as e:  # reported by the main thread
            box["got"] = e

    thread = threading.Thread(target=block)
    thread.start()
    time.sleep(0.2)
    eq(pusher.rpush(key, "woken"), 1)
    thread.join(10)
    assert not thread.is_alive(), "BLPOP still blocked after RPUSH"
    if isinstance(box["got"], Exception):
        raise AssertionError(f"BLPOP failed: {box['got']!r}")
    got, took = box["got"]
    assert got == popped(proto, key, "woken") and took < 4, f"BLPOP: {got!r} after {took:.3f} s"
    eq(pusher.exists(key), 0)
    blocker.close()


def check_hashes(r: redis.Redis, proto: int) -> None:
    h = "hash"
    eq(r.hset(h, "f1", "v1"), 1)
    eq(r.hset(h, mapping={"f1": "v1b", "f2": "v2", "n": "10"}), 2)  # f1 updated: not counted
    eq(r.hset(h, "f3", "v3", mapping={"f4": "v4"}), 2)
    eq(r.hsetnx(h, "f1", "x"), 0)
    eq(r.hsetnx(h, "f5", "v5"), 1)
    eq(r.hget(h, "f1"), "v1b")
    eq(r.hget(h, "nope"), None)
    eq(r.hget("no-hash", "f1"), None)
    eq(r.hmget(h, ["f1", "nope", "f2"]), ["v1b", None, "v2"])
    eq(r.hmget("no-hash", ["f1", "f2"]), [None, None])
    eq(r.execute_command("HMSET", h, "f6", "v6", "f7", "v7"), True)
    eq(r.hlen(h), 8)
    eq(r.hexists(h, "f6"), True)
    eq(r.hexists(h, "nope"), False)
    eq(r.hstrlen(h, "f1"), 3)
    eq(r.hstrlen(h, "nope"), 0)
    eq(r.hdel(h, "f6", "f7", "nope"), 2)
    want = {"f1": "v1b", "f2": "v2", "n": "10", "f3": "v3", "f4": "v4", "f5": "v5"}
    eq(r.hgetall(h), want)  # a dict over RESP2 and RESP3 (a map there)
    eq(set(r.hkeys(h)), set(want))
    eq(sorted(r.hvals(h)), sorted(want.values()))
    eq(r.hgetall("no-hash"), {})
    eq(r.hkeys("no-hash"), [])
    eq(r.hvals("no-hash"), [])
    eq(r.hlen("no-hash"), 0)
    eq(r.object("encoding", h) in ("listpack", "ziplist"), True)

    # Counters.
    eq(r.hincrby(h, "n", 5), 15)
    eq(r.hincrby(h, "n", -20), -5)
    eq(r.hincrby(h, "new", 3), 3)
    eq(r.hincrbyfloat(h, "n", 0.5), -4.5)
    eq(r.hincrbyfloat(h, "fl", 10.5), 10.5)
    eq(r.hincrbyfloat(h, "fl", 0.1), 10.6)
    eq(r.hget(h, "fl"), "10.6")
    # Redis adds in long double and prints 17 digits: "5010.60000000000000009" on x86.
    assert abs(r.hincrbyfloat(h, "fl", "5.0e3") - 5010.6) < 1e-9
    assert abs(float(r.hget(h, "fl")) - 5010.6) < 1e-9
    err("hash value is not an integer", r.hincrby, h, "f1", 1)
    err("hash value is not an integer", r.hincrby, h, "fl", 1)
    err("hash value is not a float", r.hincrbyfloat, h, "f1", 1)
    err("wrong number of arguments for 'hset' command", r.execute_command, "HSET", h, "a", "1", "b")
    eq(r.hlen(h), 8)

    # HRANDFIELD: distinct fields for a positive count (at most all), |count| with repeats
    # for a negative one.
    small = {"a": "1", "b": "2", "c": "3"}
    hr = "hash-rand"
    eq(r.hset(hr, mapping=small), 3)
    assert r.hrandfield(hr) in small
    got = r.hrandfield(hr, 2)
    assert len(got) == 2 and len(set(got)) == 2 and set(got) <= set(small), got
    eq(sorted(r.hrandfield(hr, 5)), sorted(small))
    got = r.hrandfield(hr, -5)
    assert len(got) == 5 and set(got) <= set(small), got
    got = as_pairs(proto, r.hrandfield(hr, 2, withvalues=True))
    assert len(got) == 2 and len(dict(got)) == 2 and all(small[f] == v for f, v in got), got
    got = as_pairs(proto, r.hrandfield(hr, -4, withvalues=True))
    assert len(got) == 4 and all(small[f] == v for f, v in got), got
    eq(r.hrandfield("no-hash"), None)
    eq(r.hrandfield("no-hash", 2), [])

    # HSCAN with MATCH and COUNT.
    hs = "hash-scan"
    eq(r.hset(hs, mapping={f"f{i}": str(i) for i in range(20)} | {"g": "x"}), 21)
    got = dict(scan_all(r.hscan, hs, match="f1*", count=5))
    eq(got, {"f1": "1"} | {f"f{i}": str(i) for i in range(10, 20)})
    eq(dict(scan_all(r.hscan, hs)), r.hgetall(hs))
    eq(scan_all(r.hscan, "no-hash"), [])

    # A value over 64 bytes leaves the packed encoding; the last field deleted deletes the key.
    eq(r.hset(hr, "long", "x" * 65), 1)
    eq(r.object("encoding", hr), "hashtable")
    eq(r.hget(hr, "long"), "x" * 65)
    eq(r.hdel(hr, "a", "b", "c", "long"), 4)
    eq(r.exists(hr), 0)


def check_lists(r: redis.Redis, proto: int) -> None:
    ls = "list"
    eq(r.rpush(ls, "b", "c"), 2)
    eq(r.lpush(ls, "a", "z"), 4)  # pushed one by one: z a b c
    eq(r.lrange(ls, 0, -1), ["z", "a", "b", "c"])
    eq(r.lpushx("no-list", "x"), 0)
    eq(r.rpushx("no-list", "x"), 0)
    eq(r.exists("no-list"), 0)
    eq(r.lpushx(ls, "y"), 5)
    eq(r.rpushx(ls, "d", "e"), 7)  # y z a b c d e
    eq(r.llen(ls), 7)
    eq(r.llen("no-list"), 0)
    eq([r.lindex(ls, i) for i in (0, 3, -1, -2, 7, -8)], ["y", "b", "e", "d", None, None])
    eq(r.lindex("no-list", 0), None)
    for (start, stop), want in {(-3, -1): ["c", "d", "e"], (5, 100): ["d", "e"],
                                (-100, 1): ["y", "z"], (3, 2): [], (10, 20): [],
                                (-100, -50): [], (0, -100): []}.items():
        eq(r.lrange(ls, start, stop), want)
    eq(r.lrange("no-list", 0, -1), [])
    eq(r.lset(ls, 1, "Z"), True)
    eq(r.lset(ls, -1, "E"), True)
    err("index out of range", r.lset, ls, 7, "x")
    err("index out of range", r.lset, ls, -8, "x")
    err("no such key", r.lset, "no-list", 0, "x")
    eq(r.lrange(ls, 0, -1), ["y", "Z", "a", "b", "c", "d", "E"])

    # Pops, with and without a count; the last element popped deletes the key.
    eq(r.lpop(ls), "y")
    eq(r.rpop(ls), "E")
    eq(r.lpop(ls, 2), ["Z", "a"])
    eq(r.rpop(ls, 1), ["d"])
    eq(r.lpop(ls, 0), [])
    eq(r.rpop(ls, 10), ["c", "b"])
    eq(r.exists(ls), 0)
    eq([r.lpop(ls), r.rpop(ls), r.lpop(ls, 2), r.rpop(ls, 2)], [None, None, None, None])

    # LTRIM, LREM, LINSERT, LPOS.
    eq(r.rpush(ls, *range(10)), 10)
    eq(r.ltrim(ls, 2, -3), True)
    eq(r.lrange(ls, 0, -1), [str(i) for i in range(2, 8)])
    eq(r.ltrim(ls, 5, 1), True)
    eq(r.exists(ls), 0)
    eq(r.rpush(ls, *"abacaba"), 7)
    eq(r.lrem(ls, 2, "a"), 2)
    eq(r.lrange(ls, 0, -1), list("bcaba"))
    eq(r.lrem(ls, -1, "a"), 1)
    eq(r.lrange(ls, 0, -1), list("bcab"))
    eq(r.lrem(ls, 0, "b"), 2)
    eq(r.lrem(ls, 0, "zz"), 0)
    eq(r.lrem("no-list", 0, "a"), 0)
    eq(r.lrange(ls, 0, -1), ["c", "a"])
    eq(r.linsert(ls, "BEFORE", "c", "b"), 3)
    eq(r.linsert(ls, "AFTER", "a", "d"), 4)
    eq(r.linsert(ls, "AFTER", "zz", "x"), -1)
    eq(r.linsert("no-list", "BEFORE", "a", "x"), 0)
    eq(r.lrange(ls, 0, -1), ["b", "c", "a", "d"])
    eq(r.delete(ls), 1)
    eq(r.rpush(ls, *"abc123cc"), 8)
    eq(r.lpos(ls, "c"), 2)
    eq(r.lpos(ls, "c", rank=2), 6)
    eq(r.lpos(ls, "c", rank=-1), 7)
    eq(r.lpos(ls, "c", rank=-3), 2)
    eq(r.lpos(ls, "c", count=2), [2, 6])
    eq(r.lpos(ls, "c", count=0), [2, 6, 7])
    eq(r.lpos(ls, "c", rank=-1, count=2), [7, 6])
    eq(r.lpos(ls, "c", maxlen=2), None)
    eq(r.lpos(ls, "c", count=0, maxlen=7), [2, 6])
    eq(r.lpos(ls, "zz"), None)
    eq(r.lpos(ls, "zz", count=0), [])
    eq(r.lpos("no-list", "a"), None)
    err("RANK can't be zero", r.lpos, ls, "c", rank=0)

    # LMOVE in all four directions, a rotation, RPOPLPUSH, LMPOP.
    src, dst, rot, empty = "{t}src", "{t}dst", "{t}rot", "{t}empty"
    eq(r.rpush(src, 1, 2, 3), 3)
    eq(r.lmove(src, dst, "LEFT", "RIGHT"), "1")
    eq(r.lmove(src, dst, "RIGHT", "LEFT"), "3")
    eq(r.lmove(src, dst, "LEFT", "LEFT"), "2")
    eq(r.exists(src), 0)
    eq(r.lmove(dst, src, "RIGHT", "RIGHT"), "1")
    eq([r.lrange(src, 0, -1), r.lrange(dst, 0, -1)], [["1"], ["2", "3"]])
    eq(r.lmove(empty, dst), None)
    eq(r.rpush(rot, *"abc"), 3)
    eq(r.lmove(rot, rot, "LEFT", "RIGHT"), "a")
    eq(r.lrange(rot, 0, -1), list("bca"))
    eq(r.lmove(rot, rot, "RIGHT", "LEFT"), "a")
    eq(r.lrange(rot, 0, -1), list("abc"))
    eq(r.rpoplpush(dst, src), "3")
    eq(r.rpoplpush(empty, src), None)
    eq([r.lrange(src, 0, -1), r.lrange(dst, 0, -1)], [["3", "1"], ["2"]])
    eq(r.lmpop(3, empty, src, dst, direction="LEFT", count=5), [src, ["3", "1"]])
    eq(r.lmpop(2, empty, dst, direction="RIGHT"), [dst, ["2"]])
    eq(r.lmpop(2, empty, dst, direction="LEFT"), None)
    eq(r.rpush(src, *"abcd"), 4)
    eq(r.lmpop(1, src, direction="RIGHT", count=2), [src, ["d", "c"]])
    err("syntax error", r.execute_command, "LMPOP", 1, src, "UP")

    # Blocking forms: immediate when something is there, None after the timeout otherwise.
    times_out(r.blpop, [empty], 0.1)
    times_out(r.brpop, [empty, "{t}empty2"], 0.1)
    eq(immediate(r.blpop, [empty, src], 1), popped(proto, src, "a"))
    eq(immediate(r.brpop, [src], 1), popped(proto, src, "b"))
    eq(r.exists(src), 0)
    eq(r.rpush(src, *"xyz"), 3)
    eq(immediate(r.blmove, src, dst, 1, "RIGHT", "LEFT"), "z")
    times_out(r.blmove, empty, dst, 0.1, "LEFT", "RIGHT")
    eq(immediate(r.brpoplpush, src, dst, 1), "y")
    times_out(r.brpoplpush, empty, dst, 0.1)
    eq(r.lrange(dst, 0, -1), ["y", "z"])
    eq(immediate(r.blmpop, 1, 2, empty, dst, direction="LEFT", count=5), [dst, ["y", "z"]])
    eq(immediate(r.blmpop, 1, 2, empty, src, direction="RIGHT"), [src, ["x"]])
    times_out(r.blmpop, 0.1, 2, empty, src, direction="LEFT")
    err("timeout is negative", r.blpop, [empty], -1)


def check_sets(r: redis.Redis, proto: int) -> None:
    s = "set"
    eq(r.sadd(s, "a", "b", "c", "a"), 3)
    eq(r.sadd(s, "c", "d"), 1)
    eq(r.srem(s, "d", "nope"), 1)
    eq(r.srem("no-set", "a"), 0)
    eq([r.sismember(s, "a"), r.sismember(s, "nope"), r.sismember("no-set", "a")], [1, 0, 0])
    eq(r.smismember(s, ["a", "nope", "c"]), [1, 0, 1])
    eq(r.smismember("no-set", ["a"]), [0])
    eq(r.smembers(s), {"a", "b", "c"})
    eq(r.scard(s), 3)
    eq(r.smembers("no-set"), set())
    eq(r.scard("no-set"), 0)
    one = r.spop(s)
    assert one in {"a", "b", "c"} and r.scard(s) == 2, one
    rest = r.spop(s, 5)
    eq(sorted(rest + [one]), ["a", "b", "c"])
    eq(r.exists(s), 0)
    eq(r.spop(s), None)
    eq(r.spop(s, 2), [])

    # SRANDMEMBER; a small set of integers is an intset.
    sr = "set-rand"
    eq(r.sadd(sr, *range(1, 6)), 5)
    eq(r.object("encoding", sr), "intset")
    members = {str(i) for i in range(1, 6)}
    assert r.srandmember(sr) in members
    got = r.srandmember(sr, 3)
    assert len(got) == 3 and len(set(got)) == 3 and set(got) <= members, got
    eq(set(r.srandmember(sr, 10)), members)
    eq(len(r.srandmember(sr, 10)), 5)
    got = r.srandmember(sr, -10)
    assert len(got) == 10 and set(got) <= members, got
    eq(r.scard(sr), 5)
    eq(r.srandmember("no-set"), None)
    eq(r.srandmember("no-set", 3), [])

    # SMOVE and the set algebra, in one hash tag.
    s1, s2 = "{t}s1", "{t}s2"
    eq(r.sadd(s1, "a", "b"), 2)
    eq(r.sadd(s2, "c"), 1)
    eq(r.smove(s1, s2, "a"), True)
    eq(r.smove(s1, s2, "nope"), False)
    eq(r.smove(s1, s2, "b"), True)
    eq(r.exists(s1), 0)
    eq(r.smembers(s2), {"a", "b", "c"})
    x, y, z, d, none = "{t}x", "{t}y", "{t}z", "{t}sdst", "{t}none"
    eq(r.sadd(x, *"abcd"), 4)
    eq(r.sadd(y, *"cde"), 3)
    eq(r.sadd(z, *"df"), 2)
    eq(set(r.sinter([x, y])), {"c", "d"})
    eq(set(r.sinter([x, y, z])), {"d"})
    eq(set(r.sinter([x, none])), set())
    eq(r.sintercard(2, [x, y]), 2)
    eq(r.sintercard(2, [x, y], limit=1), 1)
    eq(r.sintercard(3, [x, y, z], limit=0), 1)
    eq(r.sintercard(2, [x, none]), 0)
    eq(set(r.sunion([x, z])), set("abcdf"))
    eq(set(r.sunion([none, z])), set("df"))
    eq(set(r.sdiff([x, y])), {"a", "b"})
    eq(set(r.sdiff([x, y, z])), {"a", "b"})
    eq(set(r.sdiff([none, x])), set())
    eq(r.sinterstore(d, [x, y]), 2)
    eq(r.smembers(d), {"c", "d"})
    eq(r.sunionstore(d, [x, y, z]), 6)
    eq(r.smembers(d), set("abcdef"))
    eq(r.sdiffstore(d, [x, y]), 2)
    eq(r.smembers(d), {"a", "b"})
    eq(r.sinterstore(d, [x, none]), 0)  # an empty result deletes the destination
    eq(r.exists(d), 0)
    err("numkeys should be greater than 0", r.execute_command, "SINTERCARD", 0, x)

    # SSCAN with MATCH.
    ss = "set-scan"
    eq(r.sadd(ss, *[f"m{i}" for i in range(50)], "other"), 51)
    eq(set(scan_all(r.sscan, ss, match="m1*")), {"m1"} | {f"m{i}" for i in range(10, 20)})
    eq(set(scan_all(r.sscan, ss, count=7)), r.smembers(ss))
    eq(scan_all(r.sscan, "no-set"), [])


def check_zsets(r: redis.Redis, proto: int) -> None:
    z = "zset"
    eq(r.zadd(z, {"a": 1, "b": 2.5, "c": -1, "d": 2.5}), 4)
    eq(r.zadd(z, {"a": 10, "e": 5}, nx=True), 1)  # e added, a kept
    eq(r.zscore(z, "a"), 1.0)
    eq(r.zadd(z, {"a": 3, "f": 1}, xx=True), 0)  # a updated, f not added
    eq([r.zscore(z, "a"), r.zscore(z, "f")], [3.0, None])
    eq(r.zadd(z, {"a": 2, "b": 4}, gt=True, ch=True), 1)  # only b may rise
    eq(r.zadd(z, {"a": 2, "b": 5}, lt=True, ch=True), 1)  # only a may fall
    eq(r.zadd(z, {"g": 7}, gt=True), 1)  # GT still adds new members
    eq(r.zadd(z, {"a": 2, "b": 4.5}, ch=True), 1)
    eq(r.zadd(z, {"a": 1.5}, incr=True), 3.5)
    eq(r.zadd(z, {"a": 1}, incr=True, nx=True), None)
    eq(r.zadd(z, {"zz": 1}, incr=True, xx=True), None)
    eq(r.zadd(z, {"a": -1}, incr=True, gt=True), None)
    eq(r.zincrby(z, 0.5, "a"), 4.0)
    eq(r.zincrby(z, -2, "new"), -2.0)
    eq(r.zrem(z, "new", "nope"), 1)
    eq(r.zrange(z, 0, -1, withscores=True),
       scored(proto, [("c", -1.0), ("d", 2.5), ("a", 4.0), ("b", 4.5), ("e", 5.0), ("g", 7.0)]))
    score = r.zscore(z, "b")
    assert isinstance(score, float) and score == 4.5, score
    eq(r.zmscore(z, ["a", "nope", "c"]), [4.0, None, -1.0])
    eq(r.zcard(z), 6)
    eq(r.zcard("no-zset"), 0)
    eq(r.zscore("no-zset", "a"), None)
    eq(r.zadd(z, {"inf": float("inf"), "-inf": float("-inf")}), 2)
    eq([r.zscore(z, "inf"), r.zscore(z, "-inf")], [float("inf"), float("-inf")])
    eq(r.zrem(z, "inf", "-inf"), 2)
    eq(r.zincrby(z, 0.2, "x"), 0.2)
    eq(r.zincrby(z, 0.1, "x"), 0.30000000000000004)  # doubles, as Redis adds them
    eq(r.zrem(z, "x"), 1)
    err("XX and NX options at the same time are not compatible",
        r.execute_command, "ZADD", z, "NX", "XX", 1, "a")  # redis-py's zadd() refuses it itself
    err("INCR option supports a single increment-element pair",
        r.execute_command, "ZADD", z, "INCR", 1, "a", 2, "b")
    err("GT, LT, and/or NX options at the same time are not compatible",
        r.execute_command, "ZADD", z, "GT", "LT", 1, "a")
    err("value is not a valid float", r.zadd, z, {"a": "one"})

    # Ranges over a float, a negative score and equal scores (ordered by member).
    zr = "zset-range"
    eq(r.zadd(zr, {"f": 10, "e": 2.5, "d": 2.5, "b": 2.5, "a": 1, "c": -1}), 6)
    eq(r.zrange(zr, 0, -1), list("cabdef"))
    eq(r.zcount(zr, "-inf", "+inf"), 6)
    eq(r.zcount(zr, "(1", 2.5), 3)
    eq(r.zcount(zr, "(1", "(2.5"), 0)
    eq(r.zcount(zr, -1, 1), 2)
    eq(r.zcount("no-zset", "-inf", "+inf"), 0)
    eq([r.zrank(zr, m) for m in "cabdef"], list(range(6)))
    eq([r.zrevrank(zr, "f"), r.zrevrank(zr, "c")], [0, 5])
    eq([r.zrank(zr, "nope"), r.zrevrank(zr, "nope"), r.zrank("no-zset", "a")], [None] * 3)
    eq(r.zrange(zr, 0, 1), ["c", "a"])
    eq(r.zrange(zr, -2, -1), ["e", "f"])
    eq(r.zrange(zr, 4, 100), ["e", "f"])
    eq(r.zrange(zr, 3, 2), [])
    eq(r.zrange(zr, 0, -1, desc=True), list("fedbac"))
    eq(r.zrange(zr, 0, 2, withscores=True), scored(proto, [("c", -1.0), ("a", 1.0), ("b", 2.5)]))
    eq(r.zrange(zr, 0, 1, desc=True, withscores=True), scored(proto, [("f", 10.0), ("e", 2.5)]))
    eq(r.zrange(zr, "(1", "+inf", byscore=True), list("bdef"))
    eq(r.zrange(zr, "(1", "+inf", byscore=True, offset=1, num=2), ["d", "e"])
    eq(r.zrange(zr, "+inf", "(1", byscore=True, desc=True, offset=0, num=2), ["f", "e"])
    eq(r.zrange(zr, "-inf", 1, byscore=True, withscores=True), scored(proto, [("c", -1.0), ("a", 1.0)]))
    eq(r.zrange("no-zset", 0, -1), [])
    err("syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        r.execute_command, "ZRANGE", zr, 0, 1, "LIMIT", 0, 1)
    eq(r.zrangebyscore(zr, 1, 2.5), list("abde"))
    eq(r.zrangebyscore(zr, 1, 2.5, start=1, num=2), ["b", "d"])
    eq(r.zrangebyscore(zr, "(2.5", "+inf", withscores=True), scored(proto, [("f", 10.0)]))
    eq(r.zrevrangebyscore(zr, "+inf", 2.5), list("fedb"))
    eq(r.zrevrangebyscore(zr, 2.5, "-inf", start=1, num=2, withscores=True),
       scored(proto, [("d", 2.5), ("b", 2.5)]))
    err("min or max is not a float", r.zrangebyscore, zr, "x", 1)

    # Lexicographic ranges (all scores equal).
    zl = "zset-lex"
    eq(r.zadd(zl, {m: 0 for m in "gfedcba"}), 7)
    eq(r.zrange(zl, "[b", "(e", bylex=True), list("bcd"))
    eq(r.zrange(zl, "+", "[e", bylex=True, desc=True, offset=1, num=5), ["f", "e"])
    eq(r.zrangebylex(zl, "-", "+"), list("abcdefg"))
    eq(r.zrangebylex(zl, "(a", "[c"), ["b", "c"])
    eq(r.zrangebylex(zl, "-", "+", start=2, num=2), ["c", "d"])
    eq(r.zrevrangebylex(zl, "+", "[e"), ["g", "f", "e"])
    eq(r.zrevrangebylex(zl, "(e", "-", start=1, num=2), ["c", "b"])
    eq(r.zlexcount(zl, "[b", "(e"), 3)
    eq(r.zlexcount(zl, "-", "+"), 7)
    eq(r.zremrangebylex(zl, "[a", "[b"), 2)
    eq(r.zremrangebylex(zl, "(f", "+"), 1)
    eq(r.zrange(zl, 0, -1), list("cdef"))
    err("min or max not valid string range item", r.zrangebylex, zl, "a", "b")

    # Removals by rank and score; an emptied zset disappears.
    zx = "zset-rm"
    eq(r.zadd(zx, {f"m{i}": i for i in range(10)}), 10)
    eq(r.zremrangebyrank(zx, 0, 1), 2)
    eq(r.zremrangebyrank(zx, -2, -1), 2)
    eq(r.zremrangebyscore(zx, "(2", 4), 2)
    eq(r.zrange(zx, 0, -1), ["m2", "m5", "m6", "m7"])
    eq(r.zremrangebyscore(zx, "-inf", "+inf"), 4)
    eq(r.exists(zx), 0)
    eq(r.zadd(zx, {"a": 1, "b": 2}), 2)
    eq(r.zrem(zx, "a", "b", "c"), 2)
    eq(r.exists(zx), 0)

    # Pops. Without a count, ZPOPMIN answers one flat pair over RESP3 (as Redis 7.0 does).
    zp, ze = "{t}zp", "{t}ze"
    eq(r.zadd(zp, {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5.5}), 5)
    eq(r.zpopmin(zp), [("a", 1.0)] if proto == 2 else ["a", 1.0])
    eq(r.zpopmax(zp, 2), scored(proto, [("e", 5.5), ("d", 4.0)]))
    eq(r.zpopmin(ze), [])
    eq(r.zpopmax(ze, 2), [])
    eq(immediate(r.bzpopmin, [ze, zp], 1), popped(proto, zp, "b", 2.0))
    eq(immediate(r.bzpopmax, [zp], 1), popped(proto, zp, "c", 3.0))
    eq(r.exists(zp), 0)
    times_out(r.bzpopmin, [ze], 0.1)
    times_out(r.bzpopmax, [ze, zp], 0.1)
    eq(r.zadd(zp, {"a": 1, "b": 2.5, "c": -1, "d": 4}), 4)
    eq(r.zmpop(2, [ze, zp], min=True, count=2),
       [zp, [["c", "-1"], ["a", "1"]] if proto == 2 else [["c", -1.0], ["a", 1.0]]])
    eq(r.zmpop(1, [zp], max=True), [zp, [["d", "4"]] if proto == 2 else [["d", 4.0]]])
    eq(r.zmpop(1, [ze], max=True), None)
    eq(immediate(r.bzmpop, 1, 2, [ze, zp], max=True, count=5),
       [zp, [["b", "2.5"]] if proto == 2 else [["b", 2.5]]])
    times_out(r.bzmpop, 0.1, 2, [ze, zp], min=True)

    # ZRANDMEMBER.
    members = {m: s for m, s in zip("cabdef", (-1, 1, 2.5, 2.5, 2.5, 10))}
    assert r.zrandmember(zr) in members
    got = r.zrandmember(zr, 3)
    assert len(got) == 3 and len(set(got)) == 3 and set(got) <= set(members), got
    eq(sorted(r.zrandmember(zr, 10)), sorted(members))
    got = r.zrandmember(zr, -8)
    assert len(got) == 8 and set(got) <= set(members), got
    for count, n in ((4, 4), (-8, 8)):
        got = as_pairs(proto, r.zrandmember(zr, count, withscores=True))
        assert len(got) == n and all(members[m] == float(s) for m, s in got), got
    eq(r.zrandmember("no-zset"), None)
    eq(r.zrandmember("no-zset", 2), [])

    # Set algebra over sorted sets (and a plain set, whose members score 1).
    za, zb, zs, zd, zn = "{t}za", "{t}zb", "{t}zs", "{t}zd", "{t}zn"
    eq(r.zadd(za, {"a": 1, "b": 2, "c": 3}), 3)
    eq(r.zadd(zb, {"b": 10, "c": 20, "d": 30}), 3)
    eq(r.sadd(zs, "a", "x"), 2)
    eq(r.zunion([za, zb]), list("abcd"))
    eq(r.zunion([za, zb], withscores=True),
       scored(proto, [("a", 1.0), ("b", 12.0), ("c", 23.0), ("d", 30.0)]))
    eq(r.zunion({za: 2, zb: 1}, withscores=True),
       scored(proto, [("a", 2.0), ("b", 14.0), ("c", 26.0), ("d", 30.0)]))
    eq(r.zunion([za, zb], aggregate="MIN", withscores=True),
       scored(proto, [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 30.0)]))
    eq(r.zunion([za, zb], aggregate="MAX", withscores=True),
       scored(proto, [("a", 1.0), ("b", 10.0), ("c", 20.0), ("d", 30.0)]))
    eq(r.zunion([za, zs, zn], withscores=True),
       scored(proto, [("x", 1.0), ("a", 2.0), ("b", 2.0), ("c", 3.0)]))
    eq(r.zinter([za, zb]), ["b", "c"])
    eq(r.zinter([za, zb], withscores=True), scored(proto, [("b", 12.0), ("c", 23.0)]))
    eq(r.zinter([za, zb], aggregate="MIN", withscores=True), scored(proto, [("b", 2.0), ("c", 3.0)]))
    eq(r.zinter({za: 1, zb: 0.5}, aggregate="MAX", withscores=True),
       scored(proto, [("b", 5.0), ("c", 10.0)]))
    eq(r.zinter([za, zn]), [])
    eq(r.zdiff([za, zb]), ["a"])
    eq(r.zdiff([za, zn, zs], withscores=True), ["b", "2", "c", "3"] if proto == 2
       else [["b", 2.0], ["c", 3.0]])  # redis-py leaves ZDIFF WITHSCORES flat over RESP2
    eq(r.zdiff([zn, za]), [])
    eq(r.zunionstore(zd, [za, zb]), 4)
    eq(r.zrange(zd, 0, -1, withscores=True),
       scored(proto, [("a", 1.0), ("b", 12.0), ("c", 23.0), ("d", 30.0)]))
    eq(r.zunionstore(zd, {za: -1, zb: 1}, aggregate="MIN"), 4)
    eq(r.zrange(zd, 0, 1, withscores=True), scored(proto, [("c", -3.0), ("b", -2.0)]))
    eq(r.zinterstore(zd, {za: 2, zb: 1}, aggregate="SUM"), 2)
    eq(r.zrange(zd, 0, -1, withscores=True), scored(proto, [("b", 14.0), ("c", 26.0)]))
    eq(r.zinterstore(zd, [za, zb], aggregate="MAX"), 2)
    eq(r.zrange(zd, 0, -1, withscores=True), scored(proto, [("b", 10.0), ("c", 20.0)]))
    eq(r.zdiffstore(zd, [zb, za]), 1)
    eq(r.zrange(zd, 0, -1, withscores=True), scored(proto, [("d", 30.0)]))
    eq(r.zinterstore(zd, [za, zn]), 0)  # an empty result deletes the destination
    eq(r.exists(zd), 0)
    eq(r.zintercard(2, [za, zb]), 2)
    eq(r.zintercard(2, [za, zb], limit=1), 1)
    eq(r.zintercard(2, [za, zn]), 0)
    eq(r.zrangestore(zd, za, 1, 2), 2)
    eq(r.zrange(zd, 0, -1, withscores=True), scored(proto, [("b", 2.0), ("c", 3.0)]))
    eq(r.zrangestore(zd, zb, "+inf", "(10", byscore=True, desc=True, offset=0, num=1), 1)
    eq(r.zrange(zd, 0, -1, withscores=True), scored(proto, [("d", 30.0)]))
    eq(r.zrangestore(zd, za, 5, 10), 0)
    eq(r.exists(zd), 0)
    err("syntax error", r.execute_command, "ZUNIONSTORE", zd, 1, za, "AGGREGATE", "AVG")

    # ZSCAN.
    zsc = "zset-scan"
    eq(r.zadd(zsc, {f"m{i}": i for i in range(30)} | {"other": -1}), 31)
    eq(set(scan_all(r.zscan, zsc, match="m2*")), {("m2", 2.0)} | {(f"m{i}", float(i)) for i in range(20, 30)})
    eq(len(set(scan_all(r.zscan, zsc, count=4))), 31)
    eq(scan_all(r.zscan, "no-zset"), [])


def check_keyspace(r: redis.Redis, proto: int) -> None:
    """TYPE, SCAN TYPE, WRONGTYPE, DEL/UNLINK, TTLs, RENAME, COPY, MEMORY USAGE on collections."""
    r.flushall()
    keys = {"hash": ["kh1", "kh2"], "list": ["kl1", "kl2"], "set": ["ks1", "ks2"], "zset": ["kz1", "kz2"]}
    for k in keys["hash"]:
        eq(r.hset(k, "f", "v"), 1)
    for k in keys["list"]:
        eq(r.rpush(k, "a", "b"), 2)
    for k in keys["set"]:
        eq(r.sadd(k, "a", "b"), 2)
    for k in keys["zset"]:
        eq(r.zadd(k, {"a": 1, "b": 2}), 2)
    eq(r.set("kstr", "x"), True)
    for kind, names in keys.items():
        for k in names:
            eq(r.type(k), kind)
            usage = r.memory_usage(k)
            assert isinstance(usage, int) and usage > 0, f"MEMORY USAGE {k}: {usage!r}"
        eq(set(r.scan_iter(_type=kind, count=3)), set(names))
        eq(set(r.scan_iter(match="k?1", _type=kind)), {names[0]})
    eq(set(r.scan_iter(_type="string")), {"kstr"})
    eq(r.dbsize(), 9)

    # WRONGTYPE: every type against a string, a string command against a hash, and across types.
    for name, *args in (("hget", "kstr", "f"), ("hset", "kstr", "f", "v"), ("lpush", "kstr", "a"),
                        ("lrange", "kstr", 0, -1), ("sadd", "kstr", "a"), ("smembers", "kstr"),
                        ("zadd", "kstr", {"a": 1}), ("zrange", "kstr", 0, -1), ("get", "kh1"),
                        ("incr", "kl1"), ("append", "ks1", "x"), ("lpush", "kh1", "a"),
                        ("sadd", "kz1", "a"), ("zscore", "ks1", "a"), ("hlen", "kz1"),
                        ("llen", "ks1"), ("scard", "kl1"), ("zcard", "kh1")):
        err(WRONGTYPE, getattr(r, name), *args)
    eq(r.set("{t}w2", "x"), True)
    err(WRONGTYPE, r.sunion, ["{t}w1", "{t}w2"])
    err(WRONGTYPE, r.zunionstore, "{t}w1", ["{t}w2"])
    eq(r.delete("{t}w2"), 1)
    eq(r.type("kstr"), "string")  # WRONGTYPE changed nothing

    # DEL and UNLINK; TTLs on collections, which also go with the last element.
    eq([r.delete("kh2"), r.delete("kl2"), r.delete("nope")], [1, 1, 0])
    eq([r.unlink("ks2"), r.unlink("kz2"), r.unlink("nope")], [1, 1, 0])
    eq([r.exists(k) for k in ("kh2", "kl2", "ks2", "kz2")], [0, 0, 0, 0])
    for k in ("kh1", "kl1", "ks1", "kz1"):
        eq(r.expire(k, 100), True)
        assert 98 <= r.ttl(k) <= 100, (k, r.ttl(k))
    eq(r.persist("kz1"), True)
    eq(r.ttl("kz1"), -1)
    eq(r.hset("kh1", "g", "w"), 1)
    assert 98 <= r.ttl("kh1") <= 100, r.ttl("kh1")  # writes keep the TTL
    eq(r.pexpire("kl1", 150), True)
    time.sleep(0.3)
    eq(r.exists("kl1"), 0)
    eq(r.type("kl1"), "none")
    eq(r.lrange("kl1", 0, -1), [])
    eq(r.srem("ks1", "a", "b"), 2)  # emptied: the key and its TTL are gone
    eq([r.exists("ks1"), r.ttl("ks1")], [0, -2])
    eq(r.sadd("ks1", "c"), 1)
    eq(r.ttl("ks1"), -1)

    # RENAME (TTL goes along) and COPY (a deep copy) of a hash and a zset; the new names
    # share the old ones' hash slot, so that a cluster serves the rename in one place.
    eq(r.rename("kh1", "{kh1}r"), True)
    eq([r.exists("kh1"), r.hgetall("{kh1}r")], [0, {"f": "v", "g": "w"}])
    assert 98 <= r.ttl("{kh1}r") <= 100, r.ttl("{kh1}r")
    eq(r.rename("kz1", "{kz1}r"), True)
    eq(r.zrange("{kz1}r", 0, -1, withscores=True), scored(proto, [("a", 1.0), ("b", 2.0)]))
    eq(r.type("{kz1}r"), "zset")
    ch, cz = "{c}hash", "{c}zset"
    eq(r.hset(ch, mapping={"f": "1", "g": "2"}), 2)
    eq(r.zadd(cz, {"a": 1.5, "b": -2}), 2)
    eq(r.expire(cz, 100), True)
    eq(r.copy(ch, "{c}hash2"), True)
    eq(r.copy(ch, "{c}hash2"), False)
    eq(r.hincrby("{c}hash2", "f", 10), 11)
    eq([r.hget(ch, "f"), r.hget("{c}hash2", "f")], ["1", "11"])
    eq(r.copy(cz, "{c}zset2"), True)
    assert 98 <= r.ttl("{c}zset2") <= 100, r.ttl("{c}zset2")
    eq(r.zadd("{c}zset2", {"c": 3}), 1)
    eq([r.zcard(cz), r.zcard("{c}zset2")], [2, 3])
    eq(r.copy(cz, "{c}hash2", replace=True), True)
    eq(r.type("{c}hash2"), "zset")
    eq(r.zrange("{c}hash2", 0, -1, withscores=True), scored(proto, [("b", -2.0), ("a", 1.5)]))
    eq(r.delete(ch, cz, "{c}hash2", "{c}nope"), 3)  # several keys: one hash tag
    eq(r.unlink("{c}zset2", "{c}nope"), 1)
    eq(r.exists(ch, cz, "{c}hash2", "{c}zset2"), 0)


def check_large(r: redis.Redis, proto: int) -> None:
    fields = {f"field:{i}": f"value:{i * 7}" for i in range(300)}
    eq(r.hset("big-hash", mapping=fields), 300)
    eq(r.hlen("big-hash"), 300)
    eq(r.hgetall("big-hash"), fields)
    eq(r.hmget("big-hash", ["field:0", "field:150", "field:299"]), ["value:0", "value:1050", "value:2093"])
    eq(dict(scan_all(r.hscan, "big-hash", count=50)), fields)

    eq(r.rpush("big-list", *range(1000)), 1000)
    eq(r.llen("big-list"), 1000)
    eq(r.lrange("big-list", 0, -1), [str(i) for i in range(1000)])
    eq(r.lrange("big-list", 100, 199), [str(i) for i in range(100, 200)])
    eq(r.lrange("big-list", -10, -1), [str(i) for i in range(990, 1000)])
    eq(r.lrange("big-list", 995, 2000), [str(i) for i in range(995, 1000)])
    eq([r.lindex("big-list", i) for i in (500, 501, -500)], ["500", "501", "500"])
    eq(r.lset("big-list", 500, "mid"), True)
    eq(r.lpos("big-list", "mid"), 500)
    eq(r.linsert("big-list", "BEFORE", "mid", "before-mid"), 1001)
    eq(r.lrange("big-list", 499, 502), ["499", "before-mid", "mid", "501"])

    members = {f"member:{i}" for i in range(600)}
    eq(r.sadd("big-set", *members), 600)
    eq(r.scard("big-set"), 600)
    eq(r.smembers("big-set"), members)
    eq(set(scan_all(r.sscan, "big-set", count=100)), members)
    eq(r.smismember("big-set", ["member:0", "member:599", "member:600"]), [1, 1, 0])

    eq(r.zadd("big-zset", {f"m{i:04d}": i / 2 for i in range(1000)}), 1000)
    eq(r.zcard("big-zset"), 1000)
    eq(r.object("encoding", "big-zset"), "skiplist")
    eq([r.zrank("big-zset", "m0500"), r.zrevrank("big-zset", "m0500")], [500, 499])
    eq(r.zscore("big-zset", "m0777"), 388.5)
    eq(r.zrange("big-zset", 0, -1), [f"m{i:04d}" for i in range(1000)])
    eq(r.zrangebyscore("big-zset", 100, "+inf", start=10, num=5), [f"m{i:04d}" for i in range(210, 215)])
    eq(r.zrangebyscore("big-zset", "(100", 102, withscores=True),
       scored(proto, [(f"m{i:04d}", i / 2) for i in range(201, 205)]))
    eq(r.zcount("big-zset", 250, "(300"), 100)
    eq(len(set(scan_all(r.zscan, "big-zset", count=100))), 1000)


def check(r: redis.Redis, proto: int, block_port: int) -> None:
    r.flushall()
    for part in (check_hashes, check_lists, check_sets, check_zsets, check_keyspace, check_large):
        part(r, proto)
    wakeup(r, block_port, proto, "wake-list")
    eq(r.flushall(), True)
    eq(r.dbsize(), 0)
    print(f"RESP{proto}: ok")


def cross(a: redis.Redis, b: redis.Redis, a_port: int, b_port: int, proto: int) -> None:
    """Collections written through one agent, read and changed through the other."""
    a.flushall()
    for w, rd in ((a, b), (b, a)):
        eq(w.hset("x-hash", mapping={"f": "1", "g": "2"}), 2)
        eq(rd.hgetall("x-hash"), {"f": "1", "g": "2"})
        eq(rd.hincrby("x-hash", "f", 5), 6)
        eq(w.hget("x-hash", "f"), "6")
        eq(w.rpush("x-list", *"abc"), 3)
        eq(rd.lrange("x-list", 0, -1), list("abc"))
        eq(rd.lpush("x-list", "z"), 4)
        eq(w.lpop("x-list", 2), ["z", "a"])
        eq(w.sadd("x-set", "a", "b"), 2)
        eq(rd.smembers("x-set"), {"a", "b"})
        eq(rd.srem("x-set", "a"), 1)
        eq(w.smembers("x-set"), {"b"})
        eq(w.zadd("x-zset", {"a": 1.5, "b": -1}), 2)
        eq(rd.zrange("x-zset", 0, -1, withscores=True), scored(proto, [("b", -1.0), ("a", 1.5)]))
        eq(rd.zincrby("x-zset", 1, "b"), 0.0)
        eq(w.zscore("x-zset", "b"), 0.0)
        eq([rd.type(k) for k in ("x-hash", "x-list", "x-set", "x-zset")], ["hash", "list", "set", "zset"])
        eq(set(rd.scan_iter(_type="zset")), {"x-zset"})
        # Multi-key commands through the agent that did not write the keys.
        eq(w.sadd("{x}s1", *"abc"), 3)
        eq(w.sadd("{x}s2", *"bcd"), 3)
        eq(rd.sinterstore("{x}s3", ["{x}s1", "{x}s2"]), 2)
        eq(w.smembers("{x}s3"), {"b", "c"})
        eq(w.rpush("{x}l1", 1, 2), 2)
        eq(rd.lmove("{x}l1", "{x}l2", "LEFT", "RIGHT"), "1")
        eq([w.lrange("{x}l1", 0, -1), w.lrange("{x}l2", 0, -1)], [["2"], ["1"]])
        eq(w.zadd("{x}z1", {"a": 1, "b": 2}), 2)
        eq(rd.zunionstore("{x}z2", ["{x}z1", "{x}z1"]), 2)
        eq(w.zrange("{x}z2", 0, -1, withscores=True), scored(proto, [("a", 2.0), ("b", 4.0)]))
        eq([rd.delete(k) for k in ("x-hash", "x-list", "x-set", "x-zset")], [1, 1, 1, 1])
        eq([w.exists(k) for k in ("x-hash", "x-list", "x-set", "x-zset")], [0, 0, 0, 0])
        eq(w.flushall(), True)
    wakeup(a, b_port, proto, "x-wake")  # blocked on the second agent, pushed on the first
    wakeup(b, a_port, proto, "x-wake")


def main() -> None:
    ports = [int(p) for p in sys.argv[1:3]]
    if not ports:
        sys.exit("usage: collections.py PORT [PORT2]")
    for proto in (2, 3):
        r = connect(ports[0], proto)
        check(r, proto, ports[-1])
        r.close()
    if len(ports) == 2:
        for proto in (2, 3):
            a, b = connect(ports[0], proto), connect(ports[1], proto)
            cross(a, b, ports[0], ports[1], proto)
            a.close()
            b.close()
        print("CROSS: ok")


if __name__ == "__main__":
    main()
