"""Keyspace notifications through redis-py, unmodified: `CONFIG SET
notify-keyspace-events KEA`, then a script of writes of every type (strings, keys,
hashes, lists, sets, sorted sets, expiry, MULTI/EXEC, a script) through one agent while
a pattern subscriber (RESP2 and RESP3) listens on `__keyevent@0__:*` and
`__keyspace@0__:*`, on the same agent or, with two ports, on the other agent of a
proxy-mode cluster. The events must be exactly redis-server 7.0's for the same script
(recorded below from it): in order overall on one agent, in order per key across
agents (keys of different owners are announced by different agents). With one port,
an `evicted` event under maxmemory too.

    python3 notify_check.py PORT [OTHER_PORT]

A PUBLISH inside MULTI/EXEC or a script reaches the other agent's subscriber too.

Prints "RESP2: ok", "RESP3: ok", "INSIDE: ok" (and "EVICTED: ok" with one port).
"""
import sys
import time

import redis

SCRIPT = [
    ("SET", "s", "1"), ("SET", "s", "2", "NX"), ("SET", "s", "3", "EX", "100"),
    ("SETEX", "s2", "100", "v"), ("MSET", "{m}1", "a", "{m}2", "b"), ("INCR", "n"),
    ("INCRBYFLOAT", "n", "1.5"), ("APPEND", "s", "x"), ("SETRANGE", "s", "0", "y"),
    ("GETDEL", "s2"), ("DEL", "{m}1", "{m}nope"), ("EXPIRE", "{m}2", "100"), ("PERSIST", "{m}2"),
    ("RENAME", "{m}2", "{m}3"), ("COPY", "{m}3", "{m}4"), ("EXPIRE", "{m}4", "-1"),
    ("GETEX", "s", "PERSIST"), ("GETEX", "s", "EX", "100"),
    ("HSET", "h", "f", "v", "g", "w"), ("HSETNX", "h", "f", "z"), ("HINCRBY", "h", "n", "2"),
    ("HDEL", "h", "f", "g", "n"),
    ("LPUSH", "{l}1", "a", "b", "c"), ("RPOP", "{l}1"), ("LMOVE", "{l}1", "{l}2", "LEFT", "RIGHT"),
    ("LSET", "{l}1", "0", "q"), ("LINSERT", "{l}1", "BEFORE", "q", "p"), ("LREM", "{l}1", "0", "p"),
    ("LTRIM", "{l}1", "5", "6"),
    ("SADD", "{s}1", "a", "b"), ("SADD", "{s}1", "a"), ("SREM", "{s}1", "a"),
    ("SMOVE", "{s}1", "{s}2", "b"), ("SADD", "{s}3", "x"), ("SINTERSTORE", "{s}4", "{s}2", "{s}3"),
    ("SUNIONSTORE", "{s}5", "{s}2", "{s}3"),
    ("ZADD", "z", "1", "a", "2", "b"), ("ZADD", "z", "3", "a"), ("ZINCRBY", "z", "1", "b"),
    ("ZREM", "z", "a"), ("ZPOPMIN", "z"), ("ZADD", "{z}2", "1", "x"),
    ("ZUNIONSTORE", "{z}3", "1", "{z}2"), ("ZRANGESTORE", "{z}4", "{z}2", "0", "-1"),
    ("ZREMRANGEBYSCORE", "{z}4", "0", "10"),
    ("RPUSH", "bl", "1"), ("BLPOP", "bl", "1"),
    ("SET", "e", "1", "PX", "50"),
]

# redis-server 7.0.15's events for SCRIPT and the steps after it, as (event, key).
# The keys of a multi-key command share a hash tag (a cluster refuses it otherwise).
WANT = [
    ("set", "s"), ("set", "s"), ("expire", "s"), ("set", "s2"), ("expire", "s2"),
    ("set", "{m}1"), ("set", "{m}2"), ("incrby", "n"), ("incrbyfloat", "n"), ("append", "s"),
    ("setrange", "s"), ("del", "s2"), ("del", "{m}1"), ("expire", "{m}2"), ("persist", "{m}2"),
    ("rename_from", "{m}2"), ("rename_to", "{m}3"), ("copy_to", "{m}4"), ("del", "{m}4"),
    ("persist", "s"), ("expire", "s"), ("hset", "h"), ("hincrby", "h"), ("hdel", "h"),
    ("del", "h"), ("lpush", "{l}1"), ("rpop", "{l}1"), ("rpush", "{l}2"), ("lpop", "{l}1"),
    ("lset", "{l}1"), ("linsert", "{l}1"), ("lrem", "{l}1"), ("ltrim", "{l}1"), ("del", "{l}1"),
    ("sadd", "{s}1"), ("srem", "{s}1"), ("srem", "{s}1"), ("del", "{s}1"), ("sadd", "{s}2"),
    ("sadd", "{s}3"), ("sunionstore", "{s}5"), ("zadd", "z"), ("zadd", "z"), ("zincr", "z"),
    ("zrem", "z"), ("zpopmin", "z"), ("del", "z"), ("zadd", "{z}2"), ("zunionstore", "{z}3"),
    ("zrangestore", "{z}4"), ("zremrangebyscore", "{z}4"), ("del", "{z}4"), ("rpush", "bl"),
    ("lpop", "bl"), ("del", "bl"), ("set", "e"), ("expire", "e"), ("expired", "e"),
    ("set", "{t}1"), ("incrby", "{t}2"), ("set", "sc"), ("del", "sc"),
]


def eq(got, want):
    assert got == want, f"got {got!r}, want {want!r}"


def by_key(events):
    keys = {}
    for event, key in events:
        keys.setdefault(key, []).append(event)
    return keys


def collect(p, want_n, timeout=10.0):
    """(channel kind, event, key) of every pmessage until `want_n` arrived and a quiet
    half second passed."""
    got = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = p.get_message(timeout=0.5)
        if m is None:
            if len(got) >= want_n:
                break
            continue
        if m["type"] != "pmessage":
            continue
        kind, rest = m["channel"].split("@0__:", 1)
        if kind == "__keyevent":
            got.append(("event", rest, m["data"]))
        else:
            got.append(("space", m["data"], rest))
    return got


def check(port: int, other: int, proto: int) -> None:
    r = redis.Redis(port=port, protocol=proto, decode_responses=True)
    r.flushall()
    eq(r.config_set("notify-keyspace-events", "KEA"), True)
    eq(r.config_get("notify-keyspace-events"), {"notify-keyspace-events": "AKE"})
    sub = redis.Redis(port=other, protocol=proto, decode_responses=True).pubsub()
    sub.psubscribe("__keyevent@0__:*", "__keyspace@0__:*")
    for _ in range(2):
        eq(sub.get_message(timeout=5)["type"], "psubscribe")
    for c in SCRIPT:
        try:
            r.execute_command(*c)
        except redis.ResponseError:
            pass
    time.sleep(0.2)
    eq(r.get("e"), None)
    pipe = r.pipeline(transaction=True)
    # One hash tag: a proxy-mode cluster runs a transaction where its keys are owned.
    pipe.set("{t}1", "1")
    pipe.incr("{t}2")
    pipe.execute()
    r.eval("redis.call('SET', KEYS[1], 'v'); redis.call('DEL', KEYS[1])", 1, "sc")
    got = collect(sub, 2 * len(WANT))
    events = [(e, k) for kind, e, k in got if kind == "event"]
    spaces = [(e, k) for kind, e, k in got if kind == "space"]
    if port == other:
        # One agent: Redis's order exactly, on both channel kinds.
        eq(events, WANT)
        eq(spaces, WANT)
    else:
        # Keys of different owners are announced by different agents.
        eq(by_key(events), by_key(WANT))
        eq(by_key(spaces), by_key(WANT))
    # Off again: nothing more is published.
    r.config_set("notify-keyspace-events", "")
    r.set("quiet", "1")
    eq(collect(sub, 0, timeout=1.0), [])
    sub.close()
    print(f"RESP{proto}: ok", flush=True)


def evicted(port: int) -> None:
    r = redis.Redis(port=port, decode_responses=True)
    r.flushall()
    r.config_set("notify-keyspace-events", "Ee")
    sub = redis.Redis(port=port, decode_responses=True).pubsub()
    sub.subscribe("__keyevent@0__:evicted")
    eq(sub.get_message(timeout=5)["type"], "subscribe")
    r.config_set("maxmemory-policy", "allkeys-lru")
    r.config_set("maxmemory", str(r.info("memory")["used_memory"] + (4 << 20)))
    value = "x" * 1000
    try:
        for i in range(10000):
            r.set(f"ev:{i}", value)
    finally:
        r.config_set("maxmemory", "0")
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("notify-keyspace-events", "")
    m = sub.get_message(timeout=5)
    while m is not None and m["type"] != "message":
        m = sub.get_message(timeout=5)
    assert m is not None, "no evicted event"
    assert m["data"].startswith("ev:"), m
    r.flushall()
    print("EVICTED: ok", flush=True)


def published_inside(port: int, other: int) -> None:
    """A PUBLISH inside MULTI/EXEC and inside a script reaches a subscriber on the
    other agent too (the relay), in order."""
    r = redis.Redis(port=port, decode_responses=True)
    sub = redis.Redis(port=other, decode_responses=True).pubsub()
    sub.subscribe("inside")
    eq(sub.get_message(timeout=5)["type"], "subscribe")
    pipe = r.pipeline(transaction=True)
    pipe.publish("inside", "from exec")
    pipe.execute()
    r.eval("redis.call('PUBLISH', 'inside', 'from a script')", 0)
    got = []
    end = time.time() + 10
    while len(got) < 2 and time.time() < end:
        m = sub.get_message(timeout=0.5)
        if m is not None and m["type"] == "message":
            got.append(m["data"])
    eq(got, ["from exec", "from a script"])
    sub.close()
    print("INSIDE: ok", flush=True)


def main() -> None:
    port = int(sys.argv[1])
    other = int(sys.argv[2]) if len(sys.argv) > 2 else port
    for proto in (2, 3):
        check(port, other, proto)
    published_inside(port, other)
    if port == other:
        evicted(port)


if __name__ == "__main__":
    main()
