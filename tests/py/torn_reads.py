"""Readers on one agent never see a half-applied update of a collection the owner rewrites.

    python3 torn_reads.py WRITER_PORT READER_PORT KEY SECONDS

A writer (through WRITER_PORT, the key's owner) rewrites, round after round, a hash of
FIELDS fields and a sorted set of as many members, each round giving every field the
same new value and every member the same new score, in one command each (HSET with all
fields, ZADD with all members): an update of one key, large enough to span several pool
blocks. A reader (through READER_PORT, another agent, which reads the pool itself)
reads both whole all the while and checks that each read shows one round: all fields
equal, all scores equal, nothing missing. Prints "reads=N rounds=M distinct=D" and
exits non-zero at the first torn read.
"""
import sys
import threading
import time

import redis

FIELDS = 600
VALUE = 100  # bytes per field: ~66 KB per hash, more than one pool block


def main() -> None:
    writer_port, reader_port, key, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    w = redis.Redis(port=int(writer_port), decode_responses=True)
    r = redis.Redis(port=int(reader_port), decode_responses=True)
    hkey, zkey = f"{{{key}}}h", f"{{{key}}}z"
    w.delete(hkey, zkey)
    stop = threading.Event()
    rounds = [0]

    def write() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            w.hset(hkey, mapping={f"f{i}": f"{n:0{VALUE}d}" for i in range(FIELDS)})
            w.zadd(zkey, {f"m{i}": n for i in range(FIELDS)})
            rounds[0] = n

    t = threading.Thread(target=write)
    t.start()
    deadline = time.time() + seconds
    reads, seen = 0, set()
    try:
        while time.time() < deadline:
            h = r.hgetall(hkey)
            if h:
                values = set(h.values())
                assert len(h) == FIELDS and len(values) == 1, f"torn hash: {len(h)} fields, {len(values)} values"
                seen.add(values.pop())
            z = r.zrange(zkey, 0, -1, withscores=True)
            if z:
                scores = {s for _, s in z}
                assert len(z) == FIELDS and len(scores) == 1, f"torn zset: {len(z)} members, {len(scores)} scores"
            reads += 1
    finally:
        stop.set()
        t.join()
    assert rounds[0] >= 2 and len(seen) >= 2, f"too few rounds to test: {rounds[0]} written, {len(seen)} seen"
    print(f"reads={reads} rounds={rounds[0]} distinct={len(seen)}")


if __name__ == "__main__":
    main()
