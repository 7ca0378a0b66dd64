"""Hit ratios of eviction policies on phase-changing traces, through real servers and
against exact simulation (issue 20, "Measure"; docs/benchmarks.md, "Eviction policies
through an agent").

For every trace `dmc-bench study --traces DIR` wrote and every cache size (per cent of
the trace's footprint, the bytes of its distinct values), it replays the trace as a
look-aside client (`dmc-bench trace --speed 1`: GET, SET after a miss) through
  - a release compute agent (embedded pool) under each DMC policy, and
  - redis-server under allkeys-lru and allkeys-lfu,
every server with room for the same values: its `maxmemory` is set to its own
`used_memory` when empty plus the values' bytes at that size (each server's per-key
overhead is its own; a compute agent starts with `maxmemory` = the values' bytes plus
--overhead-mb, which sizes its table, then gets the same setting). It also simulates
the same trace exactly with libcachesim (`pip install libcachesim`) at the values'
bytes: LRU, LFU, ARC, LeCaR, S3-FIFO, W-TinyLFU and Belady's optimum. Writes
hit-ratios.csv, hit-ratios.md and one PNG per trace (through `dmc-bench curve`).

usage: policy-study.py TRACES_DIR OUT_DIR [--sizes 5,10,25] [--policies P,...]
                       [--overhead-mb 1] [--bin target/release]
  P: a maxmemory-policy, or adaptive-all (adaptive with experts lru,lfu,mru,size)
"""

import argparse
import csv
import json
import os
import socket
import subprocess
import sys
import time

SIMULATED = ["LRU", "LFU", "ARC", "LeCaR", "S3FIFO", "WTinyLFU", "Belady"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, deadline=20.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"server on {port} not ready")


def read_trace(path):
    keys, sizes = [], []
    with open(path) as f:
        for row in f:
            _, _, key, size = row.rstrip("\n").split(",")
            keys.append(key)
            sizes.append(int(size))
    return keys, sizes


def footprint(keys, sizes):
    seen = {}
    for k, s in zip(keys, sizes):
        seen.setdefault(k, s)
    return sum(seen.values())


def simulate(name, keys, sizes, cache_bytes):
    import libcachesim as lcs

    ids = {}
    obj = [ids.setdefault(k, len(ids)) for k in keys]
    nxt = [0] * len(obj)
    last = {}
    for i in range(len(obj) - 1, -1, -1):
        nxt[i] = last.get(obj[i], 1 << 62)
        last[obj[i]] = i
    cache = getattr(lcs, name)(cache_size=cache_bytes)
    hits = 0
    for i, (o, s) in enumerate(zip(obj, sizes)):
        r = lcs.Request()
        r.obj_id, r.obj_size, r.clock_time, r.next_access_vtime = o, s, i, nxt[i]
        hits += bool(cache.get(r))
    return hits / len(obj)


def replay(args, trace, port):
    out = os.path.join(args.out, "replay.json")
    subprocess.run(
        [os.path.join(args.bin, "dmc-bench"), "trace", trace, "-p", str(port),
         "--speed", "1", "-c", "4", "--json", out],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        report = json.load(f)
    if report["counts"]["errors"]:
        print(f"  {report['counts']['errors']} errors: {report['errors']}", file=sys.stderr)
    return report["hit_ratio"]


def command(port, *args):
    """One command over a fresh connection; the reply's first line or bulk body."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(("*%d\r\n" % len(args)
                   + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in args)).encode())
        data = b""
        while not data.endswith(b"\r\n") or (data.startswith(b"$") and data.count(b"\r\n") < 2):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.decode()


def run_server(cmd, port, values):
    """Starts a server and sets its maxmemory to its own memory when empty plus
    `values` bytes, so every cache has the same room for values (its per-key overhead
    is its own)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port)
        info = command(port, "INFO", "memory")
        base = int(next(line.split(":")[1] for line in info.split("\r\n")
                        if line.startswith("used_memory:")))
        reply = command(port, "CONFIG", "SET", "maxmemory", str(base + values))
        if not reply.startswith("+OK"):
            raise RuntimeError(f"CONFIG SET maxmemory: {reply}")
    except (RuntimeError, OSError, StopIteration):
        proc.kill()
        raise
    return proc


def main():
    p = argparse.ArgumentParser()
    p.add_argument("traces")
    p.add_argument("out")
    p.add_argument("--sizes", default="5,10,25")
    p.add_argument("--policies", default="allkeys-lru,allkeys-lfu,adaptive,adaptive-all")
    p.add_argument("--overhead-mb", type=float, default=1.0)
    p.add_argument("--bin", default="target/release")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sizes = [float(s) for s in args.sizes.split(",")]
    rows = []
    for name in sorted(os.listdir(args.traces)):
        if not name.endswith(".csv"):
            continue
        workload = name[:-4]
        trace = os.path.join(args.traces, name)
        keys, tsizes = read_trace(trace)
        fp = footprint(keys, tsizes)
        print(f"{workload}: {len(keys)} requests, footprint {fp} bytes", flush=True)
        for pct in sizes:
            values = int(fp * pct / 100)
            maxmemory = values + int(args.overhead_mb * (1 << 20))
            servers = []
            for policy in args.policies.split(","):
                # `adaptive-all`: the adaptive policy with every expert DMC has.
                flags = (["--maxmemory-policy", "adaptive",
                          "--adaptive-experts", "lru,lfu,mru,size"]
                         if policy == "adaptive-all" else ["--maxmemory-policy", policy])
                servers.append(("dmc " + policy, lambda port, flags=flags: [
                    os.path.join(args.bin, "compute-agent"), "--port", str(port),
                    "--maxmemory", str(maxmemory)] + flags))
            for policy in ["allkeys-lru", "allkeys-lfu"]:
                servers.append(("redis " + policy, lambda port, policy=policy: [
                    "redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                    "--maxmemory", str(maxmemory), "--maxmemory-policy", policy]))
            for name, cmd in servers:
                port = free_port()
                proc = run_server(cmd(port), port, values)
                try:
                    hr = replay(args, trace, port)
                finally:
                    proc.terminate()
                    proc.wait()
                rows.append((workload, pct, name, hr))
                print(f"  {pct}% {name}: {hr:.4f}", flush=True)
            for alg in SIMULATED:
                hr = simulate(alg, keys, tsizes, values)
                rows.append((workload, pct, "sim " + alg, hr))
                print(f"  {pct}% libcachesim {alg}: {hr:.4f}", flush=True)
    path = os.path.join(args.out, "hit-ratios.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "cache_pct", "cache", "hit_pct"])
        for wl, pct, cache, hr in rows:
            w.writerow([wl, pct, cache, f"{hr * 100:.2f}"])
    caches = list(dict.fromkeys(r[2] for r in rows))
    with open(os.path.join(args.out, "hit-ratios.md"), "w") as f:
        f.write("| workload | size | " + " | ".join(caches) + " |\n")
        f.write("|---|---|" + "---|" * len(caches) + "\n")
        for wl in dict.fromkeys(r[0] for r in rows):
            for pct in sizes:
                got = {r[2]: r[3] for r in rows if r[0] == wl and r[1] == pct}
                f.write(f"| {wl} | {pct:g} % | "
                        + " | ".join(f"{got.get(c, 0) * 100:.1f}" for c in caches) + " |\n")
    for wl in dict.fromkeys(r[0] for r in rows):
        subprocess.run(
            [os.path.join(args.bin, "dmc-bench"), "curve", path, "--out",
             os.path.join(args.out, f"{wl}.png"), "--title", f"{wl}: hit ratio by cache size",
             "--x", "cache_pct", "--y", "hit_pct", "--by", "cache", "--where", f"workload={wl}"],
            check=True)
    os.remove(os.path.join(args.out, "replay.json"))


if __name__ == "__main__":
    main()
