"""Memory per element: N small hashes (user:<12 digits>, the key names redis-benchmark's
__rand_int__ makes) of 10 fields (8-byte values) loaded into
redis-server and into a standalone compute agent, side by side; prints used_memory
before and after and the bytes per hash and per field, and writes
benches/results/collections-memory.csv.

    python3 benches/collections-memory.py REDIS_PORT AGENT_PORT [N]

(`bash benches/collections-memory.sh [N]` starts both servers and runs this.)
"""
import csv
import sys

import redis


def used(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def load(r: redis.Redis, n: int) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.hset(f"user:{i:012d}", mapping={f"f{j}": f"{i:08d}" for j in range(10)})
        if i % 1000 == 999:
            pipe.execute()
            if i % 50000 == 49999:
                print(f"  {i + 1} hashes", file=sys.stderr)
    pipe.execute()


def main() -> None:
    rport, aport = int(sys.argv[1]), int(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200_000
    rows = []
    for name, port in (("redis-server", rport), ("dmc-agent", aport)):
        r = redis.Redis(port=port)
        r.flushall()
        before = used(r)
        load(r, n)
        after = used(r)
        assert r.dbsize() == n and r.hlen(f"user:{n - 1:012d}") == 10
        per_hash = (after - before) / n
        rows.append((name, n, before, after, round(per_hash, 1), round(per_hash / 10, 1)))
        print(f"{name:13} {n} hashes: {after - before} bytes, {per_hash:.1f} per hash, {per_hash / 10:.1f} per field")
    with open("benches/results/collections-memory.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["server", "hashes", "used_before", "used_after", "bytes_per_hash", "bytes_per_field"])
        w.writerows(rows)
    print(f"ratio dmc / redis: {rows[1][4] / rows[0][4]:.2f}")


if __name__ == "__main__":
    main()
