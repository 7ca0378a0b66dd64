"""DMC against redis-server 7, command by command: bitmaps (on small and large strings),
HyperLogLog, geo, SORT, DUMP/RESTORE and streams.

Starts a redis-server of its own, then sends the same commands to it and to the DMC
agent(s) given, over RESP2 and RESP3 through redis-py, and requires the same reply (or the
same error text) from both, value for value. The cases are scripted sequences (every
command with its options, edge cases and errors) and seeded random workloads (bit
operations on strings that grow, PFADD sequences of different sizes, points all over the
globe and searches around them). With two agent ports the writes go through the first
and every read is asked of both.

    python3 differential_check.py PORT [PORT2] [--only FAMILY]

Prints "<family>: ok (N commands)" per family and exits non-zero at the first difference,
naming the command, both replies and the commands that led to it. Needs redis-server on
the PATH. Run by tests/tests/redis_py.rs.
"""
import random
import shutil
import socket
import subprocess
import sys
import time

import redis

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_redis():
    port = free_port()
    proc = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--save", "",
         "--appendonly", "no", "--bind", HOST],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            redis.Redis(host=HOST, port=port).ping()
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("redis-server did not start")


class Pair:
    """One redis-server connection and the agents' connections, one protocol."""

    def __init__(self, ref_port: int, ports, proto: int):
        def conn(p):
            c = redis.Redis(host=HOST, port=p, protocol=proto)
            # Raw replies: redis-py's per-command parsing would hide the differences
            # this compares (and cannot parse every form, e.g. XPENDING's extended one).
            c.response_callbacks = {}
            return c
        self.ref = conn(ref_port)
        self.dmc = [conn(p) for p in ports]
        self.proto = proto
        self.log = []
        self.count = 0

    def reply(self, client, args):
        try:
            return ("ok", client.execute_command(*args))
        except redis.ResponseError as e:
            return ("err", str(e))

    def run(self, *args, read=False):
        """Sends `args` to both; a read is asked of every agent."""
        self.log.append(" ".join(str(a) for a in args)[:200])
        self.log = self.log[-12:]
        self.count += 1
        want = self.reply(self.ref, args)
        agents = self.dmc if read else self.dmc[:1]
        for i, c in enumerate(agents):
            got = self.reply(c, args)
            if normalize(got) != normalize(want):
                history = "\n  ".join(self.log)
                raise AssertionError(
                    f"RESP{self.proto}, agent {i}: {repr(args)[:300]}\n  redis: {repr(want)[:2000]}\n"
                    f"  dmc:   {repr(got)[:2000]}\nafter:\n  {history}")
        return want

    def same(self, *args, shape=None):
        """Reads `args` from redis-server and from every agent and requires equal
        replies after `shape` (for orders that are each server's own: SMEMBERS, HGETALL)."""
        shape = shape or (lambda x: x)
        want = shape(self.reply(self.ref, args))
        for i, c in enumerate(self.dmc):
            got = shape(self.reply(c, args))
            assert got == want, f"RESP{self.proto}, agent {i}: {args!r}\n  redis: {want!r}\n  dmc:   {got!r}"
        self.count += 1

    def reset(self):
        self.ref.flushall()
        self.dmc[0].flushall()


def normalize(r):
    """Replies compare exactly, except that a set-like reply's order is Redis's own
    hash order (never compared by this script)."""
    return r


# --------------------------------------------------------------------------- bitmaps

def bitmap_cases(p: Pair, rng: random.Random):
    r = p.run
    # Keys of multi-key commands share a hash tag, so two agents of a cluster agree on
    # one owner. (No string of 512 MiB: a test pool is smaller than that.)
    r("SET", "{t}s", "foobar")
    for args in [(), (0, 0), (1, 1), (1, 1, "BYTE"), (5, 30, "BIT"), (-2, -1), (-1, -5),
                 (0, -100), (100, 200), (0, 0, "bit"), (3, 1), (0, "x"), (0,), (0, 1, "BOT"),
                 (-1, -5, "nope"), (0, 1, "BIT", "x")]:
        r("BITCOUNT", "{t}s", *args, read=True)
    r("BITCOUNT", "{t}missing", "{t}a", "{t}b", read=True)
    r("SET", "p", b"\xff\xf0\x00")
    r("SET", "q", b"\x00\xff\xf0")
    r("SET", "z", b"\x00\x00\x00")
    r("SET", "o", b"\xff\xff")
    r("SET", "e", "")
    for key in ["p", "q", "z", "o", "e", "{t}missing"]:
        for args in [(0,), (1,), (0, 0), (1, 2), (1, 2, -1), (0, 2, -1), (1, 7, 15, "BIT"),
                     (0, 7, 15, "bit"), (1, 0, -1, "BYTE"), (0, -1), (1, -100, 100), (0, 5, 2),
                     (2,), ("x",), (1, "x"), (1, 0, "y"), (1, 0, 1, "BAD"),
                     (1, 0, 1, "BIT", "extra"), (0, 1, 1, "BIT")]:
            r("BITPOS", key, *args, read=True)
    for args in [("k", 7, 1), ("k", 7, 0), ("k", 100, 1), ("k", 0, 2), ("k", -1, 1),
                 ("k", 4294967296, 1), ("k", "x", 1), ("k", 1, "y"),
                 ("{t}s", 2, 1), ("{t}s", 2, 1)]:
        r("SETBIT", *args)
    for off in [0, 7, 8, 100, 4294967295, -1, "x"]:
        r("GETBIT", "k", off, read=True)
    r("GET", "k", read=True)
    r("STRLEN", "k", read=True)
    r("LPUSH", "{t}list", "{t}a")
    r("SETBIT", "{t}list", 1, 1)
    r("GETBIT", "{t}list", 1, read=True)
    r("BITCOUNT", "{t}list", read=True)
    r("BITPOS", "{t}list", 1, read=True)
    r("BITFIELD", "{t}list", "GET", "u8", 0, read=True)
    r("BITOP", "AND", "{t}d", "{t}list", "{t}s")
    # BITOP
    r("SET", "{t}a", b"\x0f\xf0abc")
    r("SET", "{t}b", b"\xff\x00")
    for op in ["AND", "or", "XOR"]:
        r("BITOP", op, "{t}d", "{t}a", "{t}b", "{t}missing")
        r("GET", "{t}d", read=True)
    r("BITOP", "NOT", "{t}d", "{t}a")
    r("GET", "{t}d", read=True)
    r("BITOP", "NOT", "{t}d", "{t}a", "{t}b")
    r("BITOP", "NAND", "{t}d", "{t}a")
    r("BITOP", "AND", "{t}d", "{t}missing", "{t}missing2")
    r("EXISTS", "{t}d", read=True)
    r("SET", "{t}d", "x")
    r("EXPIRE", "{t}d", 100)
    r("BITOP", "OR", "{t}d", "{t}a")
    r("TTL", "{t}d", read=True)
    r("SADD", "{t}aset", "x")
    r("BITOP", "OR", "{t}aset", "{t}a")
    r("TYPE", "{t}aset", read=True)
    # BITFIELD
    for args in [("INCRBY", "i5", 100, 1, "GET", "u4", 0),
                 ("SET", "i8", 0, -1, "GET", "u8", 0, "GET", "i8", 0),
                 ("SET", "u8", "#1", 300, "GET", "u8", 8),
                 ("OVERFLOW", "SAT", "SET", "u8", 8, 300, "INCRBY", "i8", 0, -300),
                 ("OVERFLOW", "FAIL", "INCRBY", "u2", 102, 5, "GET", "u2", 102),
                 ("OVERFLOW", "WRAP", "INCRBY", "i64", 0, 9223372036854775807, "INCRBY", "i64", 0, 2),
                 ("INCRBY", "u63", 64, -1), ("GET", "u64", 0), ("GET", "i65", 0), ("GET", "x8", 0),
                 ("GET", "u8", -1), ("GET", "u8"), ("SET", "u8", 0, "v"), ("OVERFLOW", "bad"),
                 ("GET", "u8", "#536870912"), ("get", "i13", 27), ()]:
        r("BITFIELD", "f", *args)
    r("GET", "f", read=True)
    r("BITFIELD", "fresh", "GET", "u8", 0)
    r("EXISTS", "fresh", read=True)
    r("BITFIELD", "fresh2", "OVERFLOW", "FAIL", "SET", "u2", 0, 7)
    r("EXISTS", "fresh2", read=True)
    r("BITFIELD_RO", "f", "GET", "i8", 0, "GET", "u5", 3, read=True)
    r("BITFIELD_RO", "f", "SET", "i8", 0, 1)
    r("BITFIELD_RO", "f", "GET", "i8", 0, "INCRBY", "i8", 0, 1)
    r("BITFIELD_RO", "f", "GET", "i8", 0, "GET", "x", 0)

    # A random workload on strings that grow and shrink.
    keys = ["{t}r1", "{t}r2", "{t}r3"]
    for _ in range(600):
        k = rng.choice(keys)
        c = rng.random()
        if c < 0.3:
            r("SETBIT", k, rng.randrange(0, 600), rng.randrange(0, 2))
        elif c < 0.4:
            r("BITCOUNT", k, rng.randrange(-80, 80), rng.randrange(-80, 80),
              rng.choice(["BIT", "BYTE"]), read=True)
        elif c < 0.5:
            args = [rng.randrange(-100, 100) for _ in range(rng.randrange(0, 3))]
            if len(args) == 2 and rng.random() < 0.5:
                args.append(rng.choice(["BIT", "BYTE"]))
            r("BITPOS", k, rng.randrange(0, 2), *args, read=True)
        elif c < 0.6:
            r("BITOP", rng.choice(["AND", "OR", "XOR"]), rng.choice(keys), *rng.sample(keys, 2))
        elif c < 0.65:
            r("BITOP", "NOT", rng.choice(keys), rng.choice(keys))
        elif c < 0.85:
            t = rng.choice(["i", "u"]) + str(rng.randrange(1, 64))
            op = rng.choice(["GET", "SET", "INCRBY"])
            ow = rng.choice(["WRAP", "SAT", "FAIL"])
            args = ["OVERFLOW", ow, op, t, rng.randrange(0, 300)]
            if op != "GET":
                args.append(rng.randrange(-2**40, 2**40))
            r("BITFIELD", k, *args)
        elif c < 0.9:
            r("SETRANGE", k, rng.randrange(0, 60), "xy")
        elif c < 0.95:
            r("GET", k, read=True)
        else:
            r("DEL", k)


# ------------------------------------------------------------------ large strings

def large_string_cases(p: Pair, rng: random.Random):
    """Strings far past the size DMC stores chunked (16 KiB), edited in place at
    random offsets and read by range: every reply equal to redis-server's."""
    r = p.run
    keys = ["{big}a", "{big}b"]
    for i in range(500):
        k = rng.choice(keys)
        c = rng.random()
        if c < 0.15:
            r("SETBIT", k, rng.randrange(0, 3_000_000), rng.randrange(0, 2))
        elif c < 0.25:
            r("GETBIT", k, rng.randrange(0, 3_200_000), read=True)
        elif c < 0.35:
            r("SETRANGE", k, rng.randrange(0, 200_000), "v" * rng.randrange(1, 5000))
        elif c < 0.42:
            r("APPEND", k, "a" * rng.randrange(1, 9000))
        elif c < 0.52:
            a, b = rng.randrange(-300_000, 300_000), rng.randrange(-300_000, 300_000)
            r("GETRANGE", k, a, b, read=True)
        elif c < 0.6:
            unit = rng.choice(["BIT", "BYTE"])
            scale = 8 if unit == "BIT" else 1
            a = rng.randrange(-300_000 * scale, 300_000 * scale)
            b = rng.randrange(-300_000 * scale, 300_000 * scale)
            r("BITCOUNT", k, a, b, unit, read=True)
        elif c < 0.68:
            args = [rng.randrange(-300_000, 300_000) for _ in range(rng.randrange(0, 3))]
            if len(args) == 2 and rng.random() < 0.5:
                args.append(rng.choice(["BIT", "BYTE"]))
            r("BITPOS", k, rng.randrange(0, 2), *args, read=True)
        elif c < 0.78:
            t = rng.choice(["i", "u"]) + str(rng.randrange(1, 64))
            op = rng.choice(["GET", "SET", "INCRBY"])
            args = [op, t, rng.randrange(0, 3_000_000)]
            if op != "GET":
                args.append(rng.randrange(-2**40, 2**40))
            args += ["GET", "u8", rng.randrange(0, 3_000_000)]
            r("BITFIELD", k, *args)
        elif c < 0.82:
            r("BITFIELD_RO", k, "GET", "i17", rng.randrange(0, 3_000_000), read=True)
        elif c < 0.86:
            r("STRLEN", k, read=True)
        elif c < 0.89:
            r("INCR", k)
        elif c < 0.91:
            r("BITOP", rng.choice(["AND", "OR", "XOR"]), "{big}dest", *keys)
            r("GET", "{big}dest", read=True)
        elif c < 0.95:
            r("GET", k, read=True)
        elif c < 0.97:
            r("SET", k, "s" * rng.randrange(1, 100), "GET")
        else:
            r("DEL", k)
    for k in keys:
        r("GET", k, read=True)


# --------------------------------------------------------------------------- SORT

def sort_cases(p: Pair, rng: random.Random):
    r = p.run
    r("RPUSH", "{t}l", 3, 1, 2, 10, "1.5", -4, 2)
    r("RPUSH", "{t}words", "pear", "apple", "fig", "Banana", "apple2", "")
    r("SADD", "{t}s", 5, 3, 9, 1, 7)
    r("ZADD", "{t}z", 3, "c", 1, "a", 2, "b", 5, "e", 4, "d")
    r("RPUSH", "{t}bad", 1, "x", 2)
    for i, w in enumerate([5, 1, 4, 2, 3, 0, 6]):
        r("SET", f"{{t}}w_{i}", w)
        r("HSET", f"{{t}}h_{i}", "f", 10 - i, "name", f"n{i}")
    r("RPUSH", "{t}ids", 0, 1, 2, 3, 4, 5, 6, 7)
    for args in [("{t}l",), ("{t}l", "DESC"), ("{t}l", "LIMIT", 1, 3), ("{t}l", "LIMIT", -5, 2),
                 ("{t}l", "LIMIT", 100, 2), ("{t}l", "LIMIT", 0, 0), ("{t}l", "LIMIT", 2, -1),
                 ("{t}l", "limit", "x", 1), ("{t}l", "ALPHA"), ("{t}words", "ALPHA"),
                 ("{t}words", "ALPHA", "DESC", "LIMIT", 1, 2), ("{t}words",), ("{t}bad",),
                 ("{t}s",), ("{t}s", "DESC"), ("{t}z",), ("{t}z", "ALPHA", "DESC"),
                 ("{t}z", "BY", "nosort"), ("{t}z", "BY", "nosort", "DESC", "LIMIT", 1, 2),
                 ("{t}l", "BY", "nosort"), ("{t}l", "BY", "nosort", "DESC"),
                 ("{t}l", "BY", "nosort", "LIMIT", 2, 3),
                 ("{t}ids", "BY", "{t}w_*"), ("{t}ids", "BY", "{t}w_*", "DESC"),
                 ("{t}ids", "BY", "{t}h_*->f"), ("{t}ids", "BY", "{t}h_*->f", "LIMIT", 1, 3),
                 ("{t}ids", "BY", "{t}w_*", "GET", "#", "GET", "{t}h_*->name", "GET", "{t}w_*"),
                 ("{t}ids", "GET", "{t}nothing_*"), ("{t}ids", "GET", "{t}w_"),
                 ("{t}ids", "GET", "{t}h_*->"), ("{t}ids", "GET", "{t}h_*->nofield"),
                 ("{t}ids", "BY", "{t}h_*->name", "ALPHA", "DESC"),
                 ("{t}missing",), ("{t}missing", "STORE", "{t}out"),
                 ("{t}l", "ASC", "FOO"), ("{t}l", "GET"), ("{t}l", "STORE"),
                 ("{t}w_0",), ("{t}h_0",)]:
        r("SORT", *args, read=True)
        r("SORT_RO", *args, read=True)
    r("SORT", "{t}l", "STORE", "{t}out")
    r("LRANGE", "{t}out", 0, -1, read=True)
    r("TYPE", "{t}out", read=True)
    r("SORT", "{t}s", "STORE", "{t}out")
    r("LRANGE", "{t}out", 0, -1, read=True)
    r("SORT", "{t}s", "BY", "nosort", "STORE", "{t}out")
    r("LRANGE", "{t}out", 0, -1, read=True)
    r("SORT", "{t}ids", "BY", "{t}w_*", "GET", "{t}h_*->name", "GET", "{t}nope_*", "STORE", "{t}out")
    r("LRANGE", "{t}out", 0, -1, read=True)
    r("SET", "{t}str", "x")
    r("SORT", "{t}l", "STORE", "{t}str")
    r("TYPE", "{t}str", read=True)
    r("SORT", "{t}missing", "STORE", "{t}out")
    r("EXISTS", "{t}out", read=True)
    r("SORT_RO", "{t}l", "STORE", "{t}out")
    # Random numeric lists sorted every way.
    for n in range(40):
        key = f"{{t}}r{n}"
        vals = [rng.choice([str(rng.randrange(-50, 50)), f"{rng.uniform(-10, 10):.3f}",
                            str(rng.randrange(0, 5))]) for _ in range(rng.randrange(0, 30))]
        if vals:
            r("RPUSH", key, *vals)
        lim = ("LIMIT", rng.randrange(-2, 10), rng.randrange(-2, 10)) if rng.random() < 0.5 else ()
        order = (rng.choice(["ASC", "DESC"]),)
        r("SORT", key, *order, *lim, read=True)
        r("SORT", key, "ALPHA", *order, *lim, read=True)
    # A list larger than one chunk.
    r("RPUSH", "{t}big", *[rng.randrange(0, 10**6) for _ in range(3000)])
    r("SORT", "{t}big", "LIMIT", 100, 20, read=True)
    r("SORT", "{t}big", "DESC", "STORE", "{t}bigout")
    r("LRANGE", "{t}bigout", 0, 30, read=True)
    r("LLEN", "{t}bigout", read=True)


# --------------------------------------------------------------------------- HyperLogLog

def hll_cases(p: Pair, rng: random.Random):
    r = p.run
    # Across agents only the key's owner stores PFCOUNT's cached cardinality: the
    # registers are compared exactly, the 8 cache bytes only on one agent.
    exact = len(p.dmc) == 1

    def raw(key):
        if exact:
            r("GET", key, read=True)
        else:
            p.same("GET", key, shape=lambda rep: (rep[0], rep[1][:8] + rep[1][16:])
                   if rep[0] == "ok" and isinstance(rep[1], bytes) else rep)

    r("PFADD", "{h}a")
    raw("{h}a")
    r("PFADD", "{h}a", "x", "y", "z")
    r("PFADD", "{h}a", "x")
    raw("{h}a")
    r("PFCOUNT", "{h}a", read=True)
    raw("{h}a")
    n = 0
    for size in [10, 100, 1000, 5000]:
        while n < size:
            batch = [f"e{i}" for i in range(n, min(size, n + 400))]
            r("PFADD", "{h}b", *batch)
            n += len(batch)
        r("PFCOUNT", "{h}b", read=True)
        raw("{h}b")
        r("PFDEBUG", "ENCODING", "{h}b")
    for i in range(0, 30000, 1000):
        r("PFADD", "{h}c", *[rng.randbytes(rng.randrange(0, 12)) for _ in range(1000)])
    r("PFCOUNT", "{h}c", read=True)
    raw("{h}c")
    r("PFCOUNT", "{h}a", "{h}b", "{h}c", "{h}missing", read=True)
    r("PFCOUNT", "{h}missing", read=True)
    r("PFMERGE", "{h}m", "{h}a", "{h}b")
    raw("{h}m")
    r("PFMERGE", "{h}m", "{h}c")
    raw("{h}m")
    r("PFMERGE", "{h}m2")
    raw("{h}m2")
    r("PFMERGE", "{h}a")
    raw("{h}a")
    r("PFMERGE", "{h}m3", "{h}missing", "{h}a")
    raw("{h}m3")
    r("PFCOUNT", "{h}m", "{h}m3", read=True)
    # Redis's bytes SET into both, then used.
    r("PFADD", "{h}s", *[f"s{i}" for i in range(50)])
    payload = p.ref.get("{h}s")
    r("SET", "{h}copy", payload)
    r("PFADD", "{h}copy", "new")
    raw("{h}copy")
    r("PFCOUNT", "{h}copy", read=True)
    # Errors.
    r("SET", "{h}str", "not an hll")
    r("PFADD", "{h}str", "a")
    r("PFCOUNT", "{h}str", read=True)
    r("PFCOUNT", "{h}a", "{h}str", read=True)
    r("PFMERGE", "{h}a", "{h}str")
    r("RPUSH", "{h}list", "x")
    r("PFADD", "{h}list", "a")
    r("PFCOUNT", "{h}list", read=True)
    r("SET", "{h}bad", b"HYLL\x01\x00\x00\x00" + b"\x00" * 8 + b"\x7f")
    r("PFCOUNT", "{h}bad", read=True)
    # Redis's PFADD may still succeed on a malformed sparse value (it checks only what
    # it touches); DMC refuses any malformed one.
    for c in p.dmc:
        try:
            c.pfadd("{h}bad", "q")
            raise AssertionError("PFADD on a malformed HLL succeeded")
        except redis.ResponseError as e:
            assert str(e).startswith("INVALIDOBJ"), e
    r("SET", "{h}bad2", b"HYLL\x02\x00\x00\x00" + b"\x00" * 8)
    r("PFCOUNT", "{h}bad2", read=True)
    for sub in ["ENCODING", "DECODE", "GETREG", "TODENSE", "ENCODING", "DECODE", "NOPE"]:
        r("PFDEBUG", sub, "{h}s")
    r("PFDEBUG", "ENCODING", "{h}missing")
    r("PFDEBUG", "TODENSE", "{h}str")
    # Random adds and counts.
    keys = ["{h}r1", "{h}r2", "{h}r3"]
    for _ in range(150):
        k = rng.choice(keys)
        c = rng.random()
        if c < 0.6:
            r("PFADD", k, *[str(rng.randrange(0, 3000)) for _ in range(rng.randrange(1, 40))])
        elif c < 0.8:
            r("PFCOUNT", *rng.sample(keys, rng.randrange(1, 4)), read=True)
        elif c < 0.9:
            r("PFMERGE", k, *rng.sample(keys, rng.randrange(0, 3)))
        else:
            raw(k)


# --------------------------------------------------------------------------- geo

def geo_cases(p: Pair, rng: random.Random):
    r = p.run
    r("GEOADD", "{g}sicily", 13.361389, 38.115556, "Palermo", 15.087269, 37.502669, "Catania")
    r("GEOADD", "{g}sicily", "NX", 13.361389, 38.115556, "Palermo", 13.583333, 37.316667, "Agrigento")
    r("GEOADD", "{g}sicily", "XX", "CH", 13.4, 38.1, "Palermo", 1, 1, "nowhere")
    for args in [(200, 10, "m"), (10, 86, "m"), ("x", 1, "m"), (1, 2), ("NX", "XX", 1, 1, "m"),
                 ("GT", 1, 1, "m"), (1, 1, "m", 2), ("CH", "NX", 2, 2, "n"), (-180, -85.05112878, "edge"),
                 (180, 85.05112878, "edge2"), ("inf", 1, "m"), ("nan", 1, "m")]:
        r("GEOADD", "{g}sicily", *args)
    r("ZRANGE", "{g}sicily", 0, -1, "WITHSCORES", read=True)
    r("GEOPOS", "{g}sicily", "Palermo", "Catania", "nope", "edge", "edge2", read=True)
    r("GEOPOS", "{g}missing", "a", read=True)
    r("GEOHASH", "{g}sicily", "Palermo", "Catania", "nope", "edge", "edge2", read=True)
    r("GEOHASH", "{g}missing", "a", read=True)
    for args in [("Palermo", "Catania"), ("Palermo", "Catania", "km"), ("Palermo", "Catania", "MI"),
                 ("Palermo", "Catania", "ft"), ("Palermo", "nope"), ("Palermo", "Catania", "parsec"),
                 ("Palermo", "Catania", "km", "x"), ("Palermo", "Palermo")]:
        r("GEODIST", "{g}sicily", *args, read=True)
    r("GEODIST", "{g}missing", "a", "b", read=True)
    r("SET", "{g}str", "x")
    r("GEOADD", "{g}str", 1, 1, "m")
    r("GEOPOS", "{g}str", "m", read=True)
    r("GEOSEARCH", "{g}str", "FROMLONLAT", 1, 1, "BYRADIUS", 1, "km", read=True)
    # Points all over the globe, searched every way.
    pts = []
    for i in range(400):
        lon = rng.uniform(-180, 180)
        lat = rng.uniform(-85, 85) if i % 3 else rng.uniform(30, 50)
        if i % 3 != 0 and i % 7 == 0:
            lon = rng.uniform(10, 20)
        pts += [f"{lon:.6f}", f"{lat:.6f}", f"p{i}"]
    r("GEOADD", "{g}w", *pts)
    searches = [
        ("FROMLONLAT", 15, 37, "BYRADIUS", 200, "km"),
        ("FROMLONLAT", 15, 37, "BYRADIUS", 2000, "km", "ASC"),
        ("FROMLONLAT", 15, 37, "BYRADIUS", 2000, "km", "DESC", "COUNT", 5),
        ("FROMLONLAT", 15, 37, "BYRADIUS", 5000, "km", "COUNT", 3, "ANY"),
        ("FROMLONLAT", 15, 37, "BYRADIUS", 5000, "km", "COUNT", 3, "ANY", "ASC"),
        ("FROMLONLAT", 15, 37, "BYBOX", 3000, 2000, "km", "ASC", "WITHDIST", "WITHCOORD", "WITHHASH"),
        ("FROMLONLAT", -170, 80, "BYRADIUS", 1500, "km", "WITHDIST"),
        ("FROMLONLAT", 179.9, 0, "BYBOX", 4000, 4000, "mi", "WITHCOORD"),
        ("FROMLONLAT", 0, 0, "BYRADIUS", 20000, "km", "COUNT", 10),
        ("FROMLONLAT", 0, 0, "BYRADIUS", 0, "m"),
        ("FROMMEMBER", "p7", "BYRADIUS", 3000, "km", "WITHDIST", "ASC"),
        ("FROMMEMBER", "nope", "BYRADIUS", 3000, "km"),
        ("FROMLONLAT", 15, 37, "FROMMEMBER", "p7", "BYRADIUS", 1, "km"),
        ("FROMLONLAT", 15, 37, "BYRADIUS", 1, "km", "BYBOX", 1, 1, "km"),
        ("FROMLONLAT", 15, 37),
        ("BYRADIUS", 1, "km"),
        ("FROMLONLAT", 15, 37, "BYRADIUS", -1, "km"),
        ("FROMLONLAT", 15, 37, "BYRADIUS", "x", "km"),
        ("FROMLONLAT", 15, 37, "BYBOX", -1, 1, "km"),
        ("FROMLONLAT", 15, 37, "BYRADIUS", 1, "parsec"),
        ("FROMLONLAT", 15, 37, "BYRADIUS", 1, "km", "COUNT", 0),
        ("FROMLONLAT", 15, 37, "BYRADIUS", 1, "km", "ANY"),
        ("FROMLONLAT", 15, 37, "BYRADIUS", 1, "km", "STORE", "x"),
        ("FROMLONLAT", 200, 37, "BYRADIUS", 1, "km"),
    ]
    for args in searches:
        r("GEOSEARCH", "{g}w", *args, read=True)
    r("GEOSEARCH", "{g}missing", "FROMLONLAT", 1, 1, "BYRADIUS", 1, "km", read=True)
    r("GEOSEARCH", "{g}missing", "FROMMEMBER", "x", "BYRADIUS", 1, "km", read=True)
    for args in [(15, 37, 2000, "km", "WITHDIST", "ASC"), (15, 37, 2000, "km", "COUNT", 4),
                 (15, 37, 2000, "km", "STORE", "{g}out"), (15, 37, 2000, "km", "STOREDIST", "{g}out2", "DESC"),
                 (15, 37, 2000, "km", "STORE", "{g}out", "WITHDIST"), (15, 37, "x", "km"),
                 (15, 37, 1, "km", "STORE", "{g}out3"), (15, 37, 2000, "km", "COUNT", 2, "ANY")]:
        r("GEORADIUS", "{g}w", *args)
        r("GEORADIUS_RO", "{g}w", *args, read=True)
    r("ZRANGE", "{g}out", 0, -1, "WITHSCORES", read=True)
    p.same("ZRANGE", "{g}out2", 0, -1, "WITHSCORES", shape=scores)
    r("EXISTS", "{g}out3", read=True)
    for args in [("p7", 3000, "km", "WITHDIST", "ASC"), ("nope", 1, "km"), ("p7", 3000, "km", "STORE", "{g}o4"),
                 ("p7", -1, "km")]:
        r("GEORADIUSBYMEMBER", "{g}w", *args)
        r("GEORADIUSBYMEMBER_RO", "{g}w", *args, read=True)
    r("GEORADIUSBYMEMBER", "{g}missing", "x", "y", "z", "STORE", "{g}o4")
    r("EXISTS", "{g}o4", read=True)
    for args in [("{g}d", "{g}w", "FROMLONLAT", 15, 37, "BYRADIUS", 2000, "km"),
                 ("{g}d", "{g}w", "FROMLONLAT", 15, 37, "BYRADIUS", 2000, "km", "STOREDIST", "COUNT", 3),
                 ("{g}d", "{g}w", "FROMLONLAT", 15, 37, "BYRADIUS", 2000, "km", "WITHDIST"),
                 ("{g}d", "{g}missing", "FROMLONLAT", 15, 37, "BYRADIUS", 2000, "km")]:
        r("GEOSEARCHSTORE", *args)
        p.same("ZRANGE", "{g}d", 0, -1, "WITHSCORES", shape=scores)
    # Random searches around random points.
    for _ in range(60):
        lon, lat = rng.uniform(-180, 180), rng.uniform(-85, 85)
        if rng.random() < 0.5:
            shape = ("BYRADIUS", rng.choice([10, 500, 3000, 9000]), rng.choice(["km", "mi"]))
        else:
            shape = ("BYBOX", rng.choice([100, 2000, 8000]), rng.choice([100, 3000]), "km")
        r("GEOSEARCH", "{g}w", "FROMLONLAT", f"{lon:.5f}", f"{lat:.5f}", *shape, "WITHDIST", read=True)


# --------------------------------------------------------------------------- streams

TIME_FIELDS = {b"seen-time", b"idle", b"radix-tree-keys", b"radix-tree-nodes"}


REDIS_72_FIELDS = {b"inactive", b"active-time"}


def without_72_fields(x):
    """Drops the consumer fields Redis 7.2 added (DMC reports them; the reference
    redis-server is 7.0)."""
    if isinstance(x, dict):
        return {k: without_72_fields(v) for k, v in x.items() if k not in REDIS_72_FIELDS}
    if isinstance(x, list):
        out, i = [], 0
        while i < len(x):
            if isinstance(x[i], bytes) and x[i] in REDIS_72_FIELDS and i % 2 == 0 and i + 1 < len(x):
                i += 2
                continue
            out.append(without_72_fields(x[i]))
            i += 1
        return out
    return x


def timeless(r):
    """A reply with its clock readings (idle times, delivery times, seen times) and
    Redis's radix-tree sizes blanked: they differ between any two servers."""
    kind, v = r
    if kind != "ok":
        return r
    v = without_72_fields(v)

    def walk(x, parent=None):
        if isinstance(x, dict):
            return {k: ("*" if k in TIME_FIELDS else walk(val, k)) for k, val in x.items()}
        if isinstance(x, list):
            # RESP2 maps are flat lists of name, value.
            out = []
            skip = False
            for i, item in enumerate(x):
                if skip:
                    out.append("*")
                    skip = False
                    continue
                if isinstance(item, bytes) and item in TIME_FIELDS and i % 2 == 0:
                    skip = True
                out.append(walk(item, parent))
            return out
        return x

    return ("ok", walk(v))


def pending_rows(r):
    """XPENDING's extended rows and XINFO's pending rows: idle and delivery times blanked."""
    kind, v = r
    if kind != "ok" or not isinstance(v, list):
        return r
    return ("ok", [[row[0], row[1], "*", row[3]] if isinstance(row, list) and len(row) == 4
                   else row for row in v])


def full_info(r):
    """XINFO STREAM FULL with every time blanked (its pending rows carry delivery times)."""
    kind, v = timeless(r)
    if kind != "ok":
        return (kind, v)
    text = repr(v)
    import re
    return ("ok", re.sub(r"\b1[6-9]\d{11}\b", "T", text))


def stream_cases(p: Pair, rng: random.Random):
    r = p.run
    for args in [("1-1", "f", "v"), ("1-2", "a", "b", "c", "d"), ("2", "x", "1"), ("2-*", "y", "2"),
                 ("3-*", "z", "3"), ("1-5", "no", "no"), ("0-0", "no", "no"), ("0", "no", "no"),
                 ("bad", "f", "v"), ("5-1", "odd"), ("5-1",), ("+", "f", "v"), ("5-x", "f", "v"),
                 ("NOMKSTREAM", "9-9", "f", "v"), ("MAXLEN", "5", "10-1", "f", "v"),
                 ("MAXLEN", "=", "3", "11-1", "f", "v"), ("MINID", "11", "12-1", "f", "v"),
                 ("MAXLEN", "-1", "13-1", "f", "v"), ("MAXLEN", "2", "MINID", "1", "13-1", "f", "v"),
                 ("LIMIT", "5", "13-1", "f", "v"), ("MAXLEN", "2", "LIMIT", "5", "13-1", "f", "v"),
                 ("MAXLEN", "~", "2", "LIMIT", "-1", "13-1", "f", "v")]:
        r("XADD", "{s}a", *args)
    r("XADD", "{s}nomk", "NOMKSTREAM", "1-1", "f", "v")
    r("EXISTS", "{s}nomk", read=True)
    r("TYPE", "{s}a", read=True)
    r("OBJECT", "ENCODING", "{s}a", read=True)
    for i in range(3, 60):
        r("XADD", "{s}b", f"{i}-0", "n", i, "sq", i * i)
    r("XADD", "{s}b", "60-*", "n", 60)
    r("XADD", "{s}b", "60-*", "n", 61)
    for args in [("-", "+"), ("+", "-"), ("-", "+", "COUNT", 3), ("10", "20"), ("10-0", "(12-0"),
                 ("(10", "+", "COUNT", 2), ("(", "+"), ("-", "+", "COUNT", 0), ("-", "+", "COUNT", -5),
                 ("-", "+", "COUNT"), ("-", "+", "LIMIT", 1), ("x", "+"), ("-", "(-"), ("(+", "+"),
                 ("(18446744073709551615-18446744073709551615", "+"), ("-", "(0-0"), ("60", "60")]:
        r("XRANGE", "{s}b", *args, read=True)
        r("XREVRANGE", "{s}b", *args[::-1][:2] + args[2:] if len(args) >= 2 else args, read=True)
    r("XRANGE", "{s}missing", "-", "+", read=True)
    r("XLEN", "{s}b", read=True)
    r("XLEN", "{s}missing", read=True)
    r("XDEL", "{s}b", "5-0", "6-0", "999-0", "7")
    r("XDEL", "{s}b", "bad")
    r("XDEL", "{s}missing", "1-1")
    r("XLEN", "{s}b", read=True)
    r("XTRIM", "{s}b", "MAXLEN", 50)
    r("XTRIM", "{s}b", "MINID", "20")
    r("XTRIM", "{s}b", "MINID", "=", "21")
    r("XTRIM", "{s}b")
    r("XTRIM", "{s}b", "MAXLEN")
    r("XTRIM", "{s}b", "LIMIT", 10)
    r("XTRIM", "{s}missing", "MAXLEN", 1)
    r("XRANGE", "{s}b", "-", "+", "COUNT", 3, read=True)
    # Approximate trimming removes whole nodes of 100 entries, as Redis's do.
    r("XADD", "{s}small", "1-1", "f", "v")
    r("XADD", "{s}small", "1-2", "f", "v")
    r("XTRIM", "{s}small", "MAXLEN", "~", 0)
    r("XLEN", "{s}small", read=True)
    for i in range(1, 351):
        r("XADD", "{s}t", f"{i}-0", "f", "v")
    r("XDEL", "{s}t", *[f"{i}-0" for i in range(150, 160)])
    for args in [("MAXLEN", "~", 300), ("MAXLEN", "~", 120), ("MAXLEN", "~", 0, "LIMIT", 50),
                 ("MAXLEN", "~", 0, "LIMIT", 100), ("MINID", "~", "280"), ("MINID", "~", "310-0"),
                 ("MAXLEN", "=", 45), ("MAXLEN", "~", 0, "LIMIT", 0)]:
        r("XTRIM", "{s}t", *args)
        r("XLEN", "{s}t", read=True)
        r("XRANGE", "{s}t", "-", "+", "COUNT", 2, read=True)
    for i in range(400, 700):
        r("XADD", "{s}t", "MAXLEN", "~", 150, f"{i}-0", "f", "v")
    r("XLEN", "{s}t", read=True)
    r("XRANGE", "{s}t", "-", "+", "COUNT", 1, read=True)
    for args in [("99-0",), ("0-1",), ("61-0",), ("99-0", "ENTRIESADDED", 1), ("99-0", "ENTRIESADDED", 100),
                 ("99-0", "MAXDELETEDID", "100-0"), ("99-0", "MAXDELETEDID", "50-0", "ENTRIESADDED", 500),
                 ("99-0", "BOGUS", 1), ("x",), ("99-0", "ENTRIESADDED", -1)]:
        r("XSETID", "{s}b", *args)
    r("XSETID", "{s}missing", "1-1")
    r("XADD", "{s}b", "99-0", "f", "v")
    r("XADD", "{s}b", "99-*", "f", "v")
    p.same("XINFO", "STREAM", "{s}b", shape=timeless)
    p.same("XINFO", "STREAM", "{s}missing")
    # XREAD without groups.
    for args in [("STREAMS", "{s}a", "{s}b", "0", "0"), ("COUNT", 2, "STREAMS", "{s}a", "{s}b", "1-1", "50"),
                 ("STREAMS", "{s}a", "$"), ("STREAMS", "{s}missing", "0"), ("STREAMS", "{s}a"),
                 ("STREAMS", "{s}a", "{s}b", "0"), ("STREAMS", "{s}a", ">"), ("STREAMS", "{s}a", "x"),
                 ("COUNT", "x", "STREAMS", "{s}a", "0"), ("GROUP", "g", "c", "STREAMS", "{s}a", "0"),
                 ("NOACK", "STREAMS", "{s}a", "0"), ("BOGUS", "STREAMS", "{s}a", "0"), ("COUNT", 1),
                 ("BLOCK", 10, "STREAMS", "{s}a", "$"), ("BLOCK", -1, "STREAMS", "{s}a", "0"),
                 ("BLOCK", 10, "STREAMS", "{s}a", "0")]:
        r("XREAD", *args, read=True)
    r("SET", "{s}str", "x")
    r("XADD", "{s}str", "1-1", "f", "v")
    r("XRANGE", "{s}str", "-", "+", read=True)
    r("XREAD", "STREAMS", "{s}a", "{s}str", "0", "0", read=True)
    r("XLEN", "{s}str", read=True)
    # Groups.
    r("DEL", "{s}q")
    for i in range(1, 11):
        r("XADD", "{s}q", f"{i}-0", "job", i)
    for args in [("CREATE", "{s}q", "g1", "0"), ("CREATE", "{s}q", "g1", "0"), ("CREATE", "{s}q", "g2", "$"),
                 ("CREATE", "{s}q", "g3", "5-0", "ENTRIESREAD", 5), ("CREATE", "{s}missing", "g", "0"),
                 ("CREATE", "{s}new", "g", "$", "MKSTREAM"), ("CREATE", "{s}q", "g4", "x"),
                 ("CREATE", "{s}q", "g5", "0", "BOGUS"), ("CREATE", "{s}q", "g5", "0", "ENTRIESREAD", -2),
                 ("SETID", "{s}q", "nog", "0"), ("CREATECONSUMER", "{s}q", "g1", "alice"),
                 ("CREATECONSUMER", "{s}q", "g1", "alice"), ("DELCONSUMER", "{s}q", "g1", "nobody"),
                 ("DESTROY", "{s}q", "nog"), ("BOGUS", "{s}q"), ("CREATE", "{s}q"), ("HELP",),
                 ("SETID", "{s}q", "g1", "0", "extra"), ("CREATE", "{s}str", "g", "0")]:
        r("XGROUP", *args)
    r("TYPE", "{s}new", read=True)
    p.same("XINFO", "GROUPS", "{s}q")
    p.same("XINFO", "CONSUMERS", "{s}q", "g1", shape=timeless)
    for args in [("GROUP", "g1", "alice", "COUNT", 3, "STREAMS", "{s}q", ">"),
                 ("GROUP", "g1", "bob", "COUNT", 2, "STREAMS", "{s}q", ">"),
                 ("GROUP", "g1", "alice", "STREAMS", "{s}q", "0"),
                 ("GROUP", "g1", "alice", "COUNT", 1, "STREAMS", "{s}q", "1-0"),
                 ("GROUP", "g1", "carol", "NOACK", "COUNT", 1, "STREAMS", "{s}q", ">"),
                 ("GROUP", "nog", "alice", "STREAMS", "{s}q", ">"),
                 ("GROUP", "g1", "alice", "STREAMS", "{s}q", "$"),
                 ("GROUP", "g1", "alice", "STREAMS", "{s}missing", ">"),
                 ("STREAMS", "{s}q", ">"),
                 ("GROUP", "g2", "dave", "STREAMS", "{s}q", ">"),
                 ("GROUP", "g3", "erin", "STREAMS", "{s}q", ">"),
                 ("GROUP", "g2", "dave", "BLOCK", 10, "STREAMS", "{s}q", ">")]:
        r("XREADGROUP", *args)
    p.same("XPENDING", "{s}q", "g1")
    p.same("XPENDING", "{s}q", "g1", "-", "+", 10, shape=pending_rows)
    p.same("XPENDING", "{s}q", "g1", "-", "+", 10, "alice", shape=pending_rows)
    p.same("XPENDING", "{s}q", "g1", "(1-0", "+", 2, shape=pending_rows)
    p.same("XPENDING", "{s}q", "g1", "IDLE", 0, "-", "+", 10, shape=pending_rows)
    p.same("XPENDING", "{s}q", "g1", "-", "+", 10, "nobody")
    p.same("XPENDING", "{s}q", "nog")
    p.same("XPENDING", "{s}q", "g1", "-", "+")
    p.same("XPENDING", "{s}q", "g2")
    r("XDEL", "{s}q", "2-0")
    r("XREADGROUP", "GROUP", "g1", "bob", "STREAMS", "{s}q", "0")
    r("XACK", "{s}q", "g1", "1-0", "1-0", "99-0")
    r("XACK", "{s}q", "g1", "bad")
    r("XACK", "{s}q", "nog", "1-0")
    r("XACK", "{s}missing", "g1", "1-0")
    p.same("XPENDING", "{s}q", "g1")
    for args in [("g1", "zed", 0, "3-0", "4-0"), ("g1", "zed", 0, "3-0", "JUSTID"),
                 ("g1", "zed", 0, "5-0", "RETRYCOUNT", 7), ("g1", "zed", 0, "2-0"),
                 ("g1", "zed", 0, "9-0", "FORCE", "JUSTID"), ("g1", "zed", 0, "10-0"),
                 ("g1", "zed", 0, "3-0", "LASTID", "9-0", "JUSTID"), ("g1", "zed", "x", "3-0"),
                 ("g1", "zed", 0, "3-0", "IDLE", "x"), ("g1", "zed", 0, "3-0", "BOGUS"),
                 ("g1", "zed", 1000000, "3-0"), ("nog", "zed", 0, "3-0")]:
        r("XCLAIM", "{s}q", *args)
    p.same("XPENDING", "{s}q", "g1", "-", "+", 10, shape=pending_rows)
    for args in [("g1", "amy", 0, "0-0", "COUNT", 2), ("g1", "amy", 0, "0", "JUSTID"),
                 ("g1", "amy", 0, "(3-0"), ("g1", "amy", 0, "0", "COUNT", 0),
                 ("g1", "amy", "x", "0"), ("g1", "amy", 0, "0", "BOGUS"), ("nog", "amy", 0, "0"),
                 ("g1", "amy", 99999999, "0")]:
        r("XAUTOCLAIM", "{s}q", *args)
    r("XDEL", "{s}q", "4-0")
    r("XAUTOCLAIM", "{s}q", "g1", "ben", 0, "0")
    p.same("XINFO", "GROUPS", "{s}q")
    p.same("XINFO", "CONSUMERS", "{s}q", "g1", shape=timeless)
    p.same("XINFO", "CONSUMERS", "{s}q", "nog")
    p.same("XINFO", "STREAM", "{s}q", shape=timeless)
    p.same("XINFO", "STREAM", "{s}q", "FULL", shape=full_info)
    p.same("XINFO", "STREAM", "{s}q", "FULL", "COUNT", 2, shape=full_info)
    p.same("XINFO", "STREAM", "{s}q", "BOGUS")
    p.same("XINFO", "HELP")
    p.same("XINFO", "BOGUS", "{s}q")
    p.same("XINFO", "GROUPS")
    r("XGROUP", "SETID", "{s}q", "g1", "$", "ENTRIESREAD", 3)
    p.same("XINFO", "GROUPS", "{s}q")
    r("XGROUP", "DELCONSUMER", "{s}q", "g1", "zed")
    r("XGROUP", "DESTROY", "{s}q", "g2")
    p.same("XINFO", "GROUPS", "{s}q")
    # A random workload.
    r("DEL", "{s}r")
    r("XGROUP", "CREATE", "{s}r", "g", "$", "MKSTREAM")
    nid = 1
    for _ in range(300):
        c = rng.random()
        if c < 0.35:
            r("XADD", "{s}r", f"{nid}-0", "k", rng.randrange(1000))
            nid += rng.randrange(1, 3)
        elif c < 0.45:
            r("XREADGROUP", "GROUP", "g", rng.choice(["c1", "c2", "c3"]), "COUNT", rng.randrange(1, 4),
              "STREAMS", "{s}r", ">")
        elif c < 0.55:
            r("XACK", "{s}r", "g", *[f"{rng.randrange(1, nid + 1)}-0" for _ in range(3)])
        elif c < 0.6:
            r("XDEL", "{s}r", f"{rng.randrange(1, nid + 1)}-0")
        elif c < 0.65:
            r("XTRIM", "{s}r", "MAXLEN", rng.randrange(5, 40))
        elif c < 0.75:
            r("XCLAIM", "{s}r", "g", rng.choice(["c1", "c2"]), 0, *[f"{rng.randrange(1, nid + 1)}-0" for _ in range(2)],
              "JUSTID")
        elif c < 0.8:
            r("XAUTOCLAIM", "{s}r", "g", "c3", 0, "0", "COUNT", rng.randrange(1, 5), "JUSTID")
        elif c < 0.9:
            p.same("XPENDING", "{s}r", "g", "-", "+", 100, shape=pending_rows)
        else:
            p.same("XINFO", "GROUPS", "{s}r")
            r("XRANGE", "{s}r", "-", "+", read=True)
    big_stream_cases(p, rng)
    stream_blocking(p)


def big_stream_cases(p: Pair, rng: random.Random):
    """Streams far past the size DMC stores chunked (its entries in a tree): node-exact
    trims, holes, ranges from both ends, groups, claims, all equal to redis-server."""
    r = p.run
    # Short values: Redis also closes a node at 4 KiB (stream-node-max-bytes), which DMC
    # does not model, so 100 entries of a node must stay under it.
    pad = "x" * 8
    for i in range(1, 1501):
        r("XADD", "{s}big", f"{i}-0", "f", f"{pad}{i}")
    r("XDEL", "{s}big", *[f"{i}-0" for i in (1, 100, 101, 199, 200, 201, 650, 651)])
    for args in [("-", "+", "COUNT", 5), ("(99", "205", "COUNT", 8), ("640", "660"), ("1400", "+"),
                 ("1499-0", "+", "COUNT", 10), ("0", "1"), ("700", "650")]:
        r("XRANGE", "{s}big", *args, read=True)
        r("XREVRANGE", "{s}big", args[1], args[0], *args[2:], read=True)
    r("XLEN", "{s}big", read=True)
    r("XREAD", "COUNT", 3, "STREAMS", "{s}big", "1497-0", read=True)
    r("XREAD", "COUNT", 3, "STREAMS", "{s}big", "1500-0", read=True)
    for args in [("MAXLEN", "~", 1390), ("MINID", "~", "250"), ("MAXLEN", "=", 1205),
                 ("MINID", "=", "333-0"), ("MAXLEN", "~", 1000, "LIMIT", 150), ("MINID", "~", "651")]:
        r("XTRIM", "{s}big", *args)
        r("XLEN", "{s}big", read=True)
        r("XRANGE", "{s}big", "-", "+", "COUNT", 2, read=True)
    r("XGROUP", "CREATE", "{s}big", "g", "0")
    r("XGROUP", "CREATE", "{s}big", "h", "900-0")
    nid = 1501
    for _ in range(400):
        c = rng.random()
        if c < 0.3:
            trim = rng.choice([(), (), ("MAXLEN", "~", 900), ("MAXLEN", "=", 1100), ("MINID", "~", nid - 1000)])
            r("XADD", "{s}big", *trim, f"{nid}-0", "f", f"{pad}{nid}")
            nid += rng.randrange(1, 3)
        elif c < 0.4:
            r("XREADGROUP", "GROUP", rng.choice(["g", "h"]), rng.choice(["c1", "c2"]), "COUNT",
              rng.randrange(1, 30), "STREAMS", "{s}big", ">")
        elif c < 0.47:
            r("XACK", "{s}big", "g", *[f"{rng.randrange(1, nid)}-0" for _ in range(5)])
        elif c < 0.52:
            r("XDEL", "{s}big", *[f"{rng.randrange(1, nid)}-0" for _ in range(3)])
        elif c < 0.6:
            a, b = sorted(rng.randrange(0, nid + 10) for _ in range(2))
            r("XRANGE", "{s}big", a, b, "COUNT", rng.randrange(1, 50), read=True)
        elif c < 0.68:
            a, b = sorted(rng.randrange(0, nid + 10) for _ in range(2))
            r("XREVRANGE", "{s}big", b, a, "COUNT", rng.randrange(1, 50), read=True)
        elif c < 0.73:
            r("XREAD", "COUNT", rng.randrange(1, 20), "STREAMS", "{s}big", f"{rng.randrange(0, nid)}-0", read=True)
        elif c < 0.78:
            r("XCLAIM", "{s}big", "g", "c3", 0, *[f"{rng.randrange(1, nid)}-0" for _ in range(3)], "JUSTID")
        elif c < 0.82:
            r("XAUTOCLAIM", "{s}big", "g", "c1", 0, "0", "COUNT", rng.randrange(1, 10), "JUSTID")
        elif c < 0.9:
            r("XLEN", "{s}big", read=True)
            p.same("XPENDING", "{s}big", "g")
        else:
            p.same("XINFO", "STREAM", "{s}big", shape=timeless)
            p.same("XINFO", "GROUPS", "{s}big")
    p.same("XINFO", "STREAM", "{s}big", "FULL", "COUNT", 5, shape=full_info)
    r("XRANGE", "{s}big", "-", "+", read=True)
    r("XTRIM", "{s}big", "MAXLEN", 0)
    r("XLEN", "{s}big", read=True)
    r("EXISTS", "{s}big", read=True)
    r("XADD", "{s}big", "99999-0", "f", "again")
    r("XLEN", "{s}big", read=True)


def stream_blocking(p: Pair):
    """XREAD and XREADGROUP blocked on the last agent are woken by an XADD through the
    first (with two agents: across agents), as on redis-server; a timeout is a nil."""
    import threading
    for reader, writer, name in [(p.ref, p.ref, "redis")] + [(p.dmc[-1], p.dmc[0], "dmc")]:
        reader_port = reader.connection_pool.connection_kwargs["port"]
        blocked = redis.Redis(host=HOST, port=reader_port, protocol=p.proto)
        blocked.response_callbacks = {}
        writer.execute_command("DEL", "{s}blk")
        writer.execute_command("XGROUP", "CREATE", "{s}blk", "g", "$", "MKSTREAM")
        got = {}

        def wait(what, *args):
            c = redis.Redis(host=HOST, port=reader_port, protocol=p.proto)
            c.response_callbacks = {}
            got[what] = c.execute_command(*args)

        threads = [
            threading.Thread(target=wait, args=("xread", "XREAD", "BLOCK", 10000, "STREAMS", "{s}blk", "$")),
            threading.Thread(target=wait, args=("group", "XREADGROUP", "GROUP", "g", "w", "BLOCK", 0,
                                                "STREAMS", "{s}blk", ">")),
        ]
        for t in threads:
            t.start()
        # Both must be blocked before the write: the key's owner counts them (through
        # a cluster the agent the readers use forwards them there).
        servers = [p.ref] if name == "redis" else p.dmc
        deadline = time.time() + 10
        while time.time() < deadline:
            blocked_now = 0
            for srv in servers:
                info = srv.execute_command("INFO", "clients")
                info = info.decode() if isinstance(info, bytes) else str(info)
                for line in info.splitlines():
                    if line.startswith("blocked_clients:"):
                        blocked_now += int(line.split(":")[1])
            if blocked_now >= 2:
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"{name}: the readers did not block")
        writer.execute_command("XADD", "{s}blk", "7-1", "job", "x")
        for t in threads:
            t.join(10)
            assert not t.is_alive(), f"{name}: a blocked reader was not woken"
        entry = [b"7-1", [b"job", b"x"]]
        for what in ["xread", "group"]:
            v = got[what]
            items = list(v.items()) if isinstance(v, dict) else [tuple(x) for x in v]
            assert items == [(b"{s}blk", [entry])], f"{name} {what}: {v!r}"
        pend = writer.execute_command("XPENDING", "{s}blk", "g")
        assert pend[0] == 1 and pend[3] == [[b"w", b"1"]], f"{name}: {pend!r}"
        t0 = time.time()
        assert blocked.execute_command("XREAD", "BLOCK", 50, "STREAMS", "{s}blk", "$") is None
        assert time.time() - t0 >= 0.04
        p.count += 4


# --------------------------------------------------------------------------- DUMP / RESTORE

def unordered(r):
    """A reply whose order is the server's own (a set, a hash): compared as a multiset."""
    kind, v = r
    if kind != "ok":
        return r
    if isinstance(v, dict):
        return ("ok", sorted(v.items()))
    return ("ok", sorted(v) if isinstance(v, (list, set)) else v)


def pairs(r):
    """HGETALL over RESP2 is a flat list: pairs, sorted."""
    kind, v = r
    if kind == "ok" and isinstance(v, list):
        return ("ok", sorted(zip(v[::2], v[1::2])))
    return unordered(r)


def scores(r):
    """WITHSCORES replies with the scores as numbers: redis-server 7.0 prints them with
    %.17g, DMC as Redis 7.2 does (the shortest text that reads back the same double)."""
    kind, v = r
    if kind != "ok" or not isinstance(v, list):
        return r
    if v and isinstance(v[0], list):
        return ("ok", [(m, float(s)) for m, s in v])
    return ("ok", [(m, float(s)) for m, s in zip(v[::2], v[1::2])])


def build_values(p: Pair, rng: random.Random, prefix: str):
    """One key of every type and encoding on redis-server; their names and readers."""
    ref = p.ref
    keys = {}
    def add(name, read):
        keys[prefix + name] = read
    ref.set(prefix + "str", "hello")
    add("str", ("GET",))
    ref.set(prefix + "int", 12345)
    add("int", ("GET",))
    ref.set(prefix + "neg", -7)
    add("neg", ("GET",))
    ref.set(prefix + "big", "abc" * 5000)  # LZF-compressed in the payload
    add("big", ("GET",))
    ref.set(prefix + "bin", bytes(range(256)))
    add("bin", ("GET",))
    ref.set(prefix + "empty", "")
    add("empty", ("GET",))
    ref.rpush(prefix + "lp", "a", 1, -300, 70000, -2**40, "x" * 100)
    add("lp", ("LRANGE", 0, -1))
    ref.rpush(prefix + "ql", *[rng.choice(["v", 7, "w" * 70]) for _ in range(2000)])
    add("ql", ("LRANGE", 0, -1))
    ref.sadd(prefix + "intset", 1, 2, -3, 2**40)
    add("intset", ("SMEMBERS",))
    ref.sadd(prefix + "set", "a", "b", 3)
    add("set", ("SMEMBERS",))
    ref.sadd(prefix + "bigset", *[f"m{i}" for i in range(600)])
    add("bigset", ("SMEMBERS",))
    ref.hset(prefix + "hlp", mapping={"f": "v", "n": 5, "e": ""})
    add("hlp", ("HGETALL",))
    ref.hset(prefix + "hbig", mapping={f"f{i}": "v" * (i % 80) for i in range(300)})
    add("hbig", ("HGETALL",))
    ref.zadd(prefix + "zlp", {"a": 1.5, "b": -2, "c": 1e300, "d": float("inf")})
    add("zlp", ("ZRANGE", 0, -1, "WITHSCORES"))
    ref.zadd(prefix + "zbig", {f"m{i}": rng.uniform(-1e6, 1e6) for i in range(400)})
    add("zbig", ("ZRANGE", 0, -1, "WITHSCORES"))
    return keys


def read_as(p: Pair, key: str, read):
    cmd, *rest = read
    shape = {"HGETALL": pairs, "SMEMBERS": unordered, "ZRANGE": scores}.get(cmd)
    p.same(cmd, key, *rest, shape=shape)
    p.same("TYPE", key)


def dump_cases(p: Pair, rng: random.Random):
    r = p.run
    keys = build_values(p, rng, "src:")
    for key, read in keys.items():
        payload = p.ref.execute_command("DUMP", key)
        # Redis's payload restored on both: the agent reads every encoding Redis writes.
        r("RESTORE", "fromredis:" + key, 0, payload)
        read_as(p, "fromredis:" + key, read)
        # The agent's own payload, restored on both: Redis reads what the agent writes.
        mine = p.dmc[0].execute_command("DUMP", "fromredis:" + key)
        r("RESTORE", "fromdmc:" + key, 0, mine)
        read_as(p, "fromdmc:" + key, read)
        # And it is the same value Redis started with.
        want = p.reply(p.ref, (read[0], key, *read[1:]))
        back = p.reply(p.ref, (read[0], "fromdmc:" + key, *read[1:]))
        shape = {"HGETALL": pairs, "ZRANGE": scores}.get(read[0], unordered)
        assert shape(back) == shape(want), f"{key}: {back!r} != {want!r}"
    # Streams: entries over several nodes, deletions, groups with pending entries.
    ref = p.ref
    for i in range(1, 260):
        fields = ["f", i, "g", "x"] if i % 5 else ["other", i]
        ref.execute_command("XADD", "src:stream", f"{i}-{i % 3}", *fields)
    ref.execute_command("XDEL", "src:stream", "7-1", "150-0", "151-1")
    ref.execute_command("XGROUP", "CREATE", "src:stream", "g1", "0")
    ref.execute_command("XGROUP", "CREATE", "src:stream", "g2", "$")
    ref.execute_command("XREADGROUP", "GROUP", "g1", "alice", "COUNT", 5, "STREAMS", "src:stream", ">")
    ref.execute_command("XREADGROUP", "GROUP", "g1", "bob", "COUNT", 3, "STREAMS", "src:stream", ">")
    ref.execute_command("XGROUP", "CREATECONSUMER", "src:stream", "g2", "carol")
    ref.execute_command("XADD", "src:empty-stream", "1-1", "f", "v")
    ref.execute_command("XDEL", "src:empty-stream", "1-1")
    ref.execute_command("XGROUP", "CREATE", "src:empty-stream", "g", "$")
    for key in ["src:stream", "src:empty-stream"]:
        payload = ref.execute_command("DUMP", key)
        r("RESTORE", "fromredis:" + key, 0, payload)
        mine = p.dmc[0].execute_command("DUMP", "fromredis:" + key)
        r("RESTORE", "fromdmc:" + key, 0, mine)
        # What the agent dumped is what Redis holds, groups and all.
        a = full_info(p.reply(ref, ("XINFO", "STREAM", key, "FULL")))
        b = full_info(p.reply(ref, ("XINFO", "STREAM", "fromdmc:" + key, "FULL")))
        assert a == b, f"{key}: {a} != {b}"
        want = p.reply(ref, ("XRANGE", key, "-", "+"))
        for k in ["fromredis:" + key, "fromdmc:" + key]:
            for c in [ref] + p.dmc:
                assert p.reply(c, ("XRANGE", k, "-", "+")) == want, k
        for k in ["fromredis:" + key, "fromdmc:" + key]:
            p.same("XINFO", "STREAM", k, "FULL", shape=full_info)
            p.same("XPENDING", k, "g1")
            p.same("XINFO", "GROUPS", k)
            r("XADD", k, "1000-0", "new", "entry")
            r("XREADGROUP", "GROUP", "g1", "dave", "COUNT", 2, "STREAMS", k, ">")
    payload = p.ref.execute_command("DUMP", "src:str")
    r("DUMP", "nosuchkey", read=True)
    r("RESTORE", "fromredis:src:str", 0, payload)  # BUSYKEY
    r("RESTORE", "fromredis:src:str", 0, payload, "REPLACE")
    r("RESTORE", "t1", -1, payload)
    r("RESTORE", "t1", "x", payload)
    r("RESTORE", "t1", 0, payload[:-1])
    r("RESTORE", "t1", 0, payload[:3] + bytes([payload[3] ^ 1]) + payload[4:])
    r("RESTORE", "t1", 0, b"")
    r("RESTORE", "t1", 0, payload, "IDLETIME", -1)
    r("RESTORE", "t1", 0, payload, "FREQ", 256)
    r("RESTORE", "t1", 0, payload, "FREQ", 5, "IDLETIME", 5)
    r("RESTORE", "t1", 0, payload, "IDLETIME", "x")
    r("RESTORE", "t1", 0, payload, "BOGUS")
    r("RESTORE", "t1", 0, payload, "FREQ", 10)
    r("GET", "t1", read=True)
    r("RESTORE", "t2", 100000, payload, "IDLETIME", 100)
    r("TTL", "t2", read=True)
    r("RESTORE", "t3", 1, payload, "ABSTTL")
    r("EXISTS", "t3", read=True)
    r("RESTORE", "t2", 1, payload, "ABSTTL", "REPLACE")
    r("EXISTS", "t2", read=True)
    r("RESTORE", "t4", int(time.time() * 1000) + 86_400_000, payload, "ABSTTL")
    want = p.ref.ttl("t4")
    for c in p.dmc:
        assert abs(c.ttl("t4") - want) <= 2, (c.ttl("t4"), want)
    # A payload of a newer RDB version, and of an unknown type, are refused.
    body = payload[:-10]
    for bad in [body[:0] + bytes([6]) + body[1:], bytes([15]) + body[1:]]:
        r("RESTORE", "t5", 0, redis_footer(bad))
    r("RESTORE", "t5", 0, body + b"\x0b\x00" + payload[-8:])


def redis_footer(body: bytes) -> bytes:
    """`body` with a version-10 footer and its CRC-64 (Redis's Jones polynomial)."""
    data = body + b"\x0a\x00"
    return data + crc64(data).to_bytes(8, "little")


def crc64(data: bytes) -> int:
    poly, crc = 0x95AC9329AC4BC9B5, 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
    return crc


# --------------------------------------------------------------------------- runner

FAMILIES = {
    "bitmaps": bitmap_cases,
    "large-strings": large_string_cases,
    "sort": sort_cases,
    "dump": dump_cases,
    "hyperloglog": hll_cases,
    "streams": stream_cases,
    "geo": geo_cases,
}


def main():
    args = sys.argv[1:]
    only = None
    if "--only" in args:
        i = args.index("--only")
        only = args[i + 1]
        del args[i:i + 2]
    ports = [int(a) for a in args]
    proc, ref_port = start_redis()
    try:
        for name, cases in FAMILIES.items():
            if only and name != only:
                continue
            total = 0
            for proto in (2, 3):
                p = Pair(ref_port, ports, proto)
                p.reset()
                cases(p, random.Random(f"{name}-{proto}"))
                total += p.count
                p.reset()
            print(f"{name}: ok ({total} commands)", flush=True)
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
