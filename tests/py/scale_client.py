"""A redis-py client that writes and reads continuously through one agent while the
test rescales the cluster, then checks every acknowledged write.

usage: scale_client.py PORT KEYS READY_FILE STOP_FILE [--cluster] [--prefix P] [--host H]

Loads KEYS keys, touches READY_FILE, then loops until STOP_FILE exists: SET a key to a
new value, then GET a random key and compare it with the last value acknowledged for it
(read-your-writes through one connection). Every exception and every wrong value is an
error. At the end every key is read back once more. Prints one JSON line:
{"writes", "reads", "errors", "wrong", "missing", "first_errors", "per_second"}.
With --cluster the client is redis-py's RedisCluster (it follows MOVED). Keys are
P:0 .. P:KEYS-1 (P is "scale" unless --prefix says): clients running at once need
their own prefixes. The agent is on 127.0.0.1 unless --host says.
"""

import json
import os
import random
import sys
import time

import redis
from redis.cluster import RedisCluster


def main():
    port, keys, ready_file, stop_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    cluster = "--cluster" in sys.argv[5:]
    prefix = "scale"
    if "--prefix" in sys.argv[5:]:
        prefix = sys.argv[sys.argv.index("--prefix") + 1]
    host = "127.0.0.1"
    if "--host" in sys.argv[5:]:
        host = sys.argv[sys.argv.index("--host") + 1]
    if cluster:
        r = RedisCluster(host=host, port=port, socket_timeout=15,
                         socket_connect_timeout=5, lib_name=None, lib_version=None)
    else:
        r = redis.Redis(host=host, port=port, socket_timeout=15,
                        socket_connect_timeout=5, lib_name=None, lib_version=None)
    acked = {}
    for i in range(keys):
        k, v = f"{prefix}:{i}", f"v0-{i}"
        r.set(k, v)
        acked[k] = v.encode()
    with open(ready_file, "w") as f:
        f.write("ready")
    writes = reads = errors = wrong = 0
    first_errors = []
    per_second = {}
    n = 0
    start = time.monotonic()
    while not os.path.exists(stop_file):
        n += 1
        k = f"{prefix}:{random.randrange(keys)}"
        v = f"v{n}-{k}".encode()
        sec = int(time.monotonic() - start)
        try:
            r.set(k, v)
            acked[k] = v
            writes += 1
            q = f"{prefix}:{random.randrange(keys)}"
            got = r.get(q)
            reads += 1
            if got != acked[q]:
                wrong += 1
                if len(first_errors) < 5:
                    first_errors.append(f"GET {q}: {got!r}, acknowledged {acked[q]!r}")
        except Exception as e:  # every failure a client would see counts
            errors += 1
            if len(first_errors) < 5:
                first_errors.append(f"{type(e).__name__}: {e}")
        per_second[sec] = per_second.get(sec, 0) + 2
    missing = 0
    for k, v in acked.items():
        try:
            if r.get(k) != v:
                missing += 1
                if len(first_errors) < 5:
                    first_errors.append(f"final GET {k} != {v!r}")
        except Exception as e:
            errors += 1
            first_errors.append(f"final {type(e).__name__}: {e}")
            if errors > 20:
                break  # the agent is gone: report rather than try every key
    print(json.dumps({
        "writes": writes, "reads": reads, "errors": errors, "wrong": wrong,
        "missing": missing, "first_errors": first_errors,
        "per_second": [per_second.get(s, 0) for s in range(max(per_second, default=-1) + 1)],
    }))


if __name__ == "__main__":
    main()
