"""A client that measures what a failure costs: it writes probe:N = N (N = 1, 2, ...)
one request at a time through one connection (or through Redis Sentinel's current
master), until STOP_FILE exists, then reads every acknowledged write back.

usage: probe.py OUT_JSON STOP_FILE EVENT_FILE (--port P | --sentinel PORT --master NAME)

EVENT_FILE holds the wall-clock time (seconds since the epoch) of the failure; the
report measures from it. Prints and writes a JSON report:
  writes, errors, lost (acknowledged, then not read back), outage_ms (the longest
  time without a successful write from the failure on), first_ok_after_ms (the first
  write that started after the failure and succeeded, counted from the failure).
"""

import json
import os
import sys
import time

import redis
from redis.sentinel import Sentinel


def connect(args):
    if "--sentinel" in args:
        port = int(args[args.index("--sentinel") + 1])
        name = args[args.index("--master") + 1]
        s = Sentinel([("127.0.0.1", port)], socket_timeout=0.5)
        return s.master_for(name, socket_timeout=0.5, socket_connect_timeout=0.5)
    port = int(args[args.index("--port") + 1])
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=15, socket_connect_timeout=2)


def main():
    out, stop, event_file = sys.argv[1:4]
    r = connect(sys.argv[4:])
    acked = []
    done = []  # (start, end) wall-clock times of successful writes
    errors = 0
    first_errors = []
    n = 0
    while not os.path.exists(stop):
        n += 1
        t0 = time.time()
        try:
            r.set(f"probe:{n}", n)
            done.append((t0, time.time()))
            acked.append(n)
        except Exception as e:  # every failure a client would see counts
            errors += 1
            if len(first_errors) < 3:
                first_errors.append(f"{type(e).__name__}: {e}")
            time.sleep(0.001)
    lost = 0
    for k in acked:
        for attempt in range(50):
            try:
                if r.get(f"probe:{k}") != str(k).encode():
                    lost += 1
                break
            except Exception:
                time.sleep(0.1)
    event = float(open(event_file).read()) if os.path.exists(event_file) else None
    report = {"writes": len(acked), "errors": errors, "lost": lost, "first_errors": first_errors}
    if event is not None:
        ends = [e for (_, e) in done if e >= event]
        prev = max([e for (_, e) in done if e < event], default=event)
        gaps = [b - a for a, b in zip([prev] + ends, ends)]
        report["outage_ms"] = round(1000 * max(gaps, default=0.0), 1)
        after = [e for (s, e) in done if s >= event]
        report["first_ok_after_ms"] = round(1000 * (min(after) - event), 1) if after else None
    text = json.dumps(report)
    open(out, "w").write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
