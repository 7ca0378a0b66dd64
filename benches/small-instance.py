"""SETs of 200-byte values into one server in blocks of 10 000 (pipelined by 100),
printing after each block the keys held, used_memory and the block's seconds: how many
keys a small `maxmemory` keeps while it evicts (docs/benchmarks.md, "A small instance").

usage: small-instance.py PORT [BLOCKS]
"""

import sys
import time

import redis


def main():
    port = int(sys.argv[1])
    blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    r = redis.Redis(port=port)
    value = b"x" * 200
    for block in range(blocks):
        t0 = time.time()
        p = r.pipeline(transaction=False)
        for i in range(block * 10000, (block + 1) * 10000):
            p.set(f"key:{i}", value)
            if i % 100 == 99:
                p.execute()
        p.execute()
        used = r.info("memory").get("used_memory")
        print(f"{(block + 1) * 10000} SETs: {r.dbsize()} keys, used_memory {used}, "
              f"{time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
