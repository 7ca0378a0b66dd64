"""Writes a look-aside GET trace for `dmc-bench trace`: REQUESTS GETs of KEYS keys drawn
from a Zipf distribution (exponent 0.99, ranks shuffled), SIZE-byte values, 100 a
millisecond (docs/benchmarks.md, "A small instance").

usage: lookaside-trace.py OUT [REQUESTS] [KEYS] [SIZE] [SEED]
"""

import bisect
import itertools
import random
import sys


def main():
    out = sys.argv[1]
    requests = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    keys = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    random.seed(int(sys.argv[5]) if len(sys.argv) > 5 else 1)
    cum = list(itertools.accumulate(1 / (i + 1) ** 0.99 for i in range(keys)))
    ranks = list(range(keys))
    random.shuffle(ranks)
    with open(out, "w") as f:
        for t in range(requests):
            k = ranks[bisect.bisect_left(cum, random.random() * cum[-1])]
            f.write(f"{t // 100},get,key:{k},{size}\n")


if __name__ == "__main__":
    main()
