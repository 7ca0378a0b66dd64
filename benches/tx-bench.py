#!/usr/bin/env python3
"""MULTI/SET/EXEC, EVALSHA and FCALL against redis-server and an agent in one run.

Starts redis-server and one standalone agent (AGENT_BIN) on free loopback ports, then
for ROUNDS rounds (server order rotated) has CONNS connections each send DEPTH
pipelined units at a time for SECONDS, where a unit is `MULTI; SET k v; EXEC`,
`EVALSHA <get script> 1 k` or `FCALL get 1 k` (keys random among 100 000), and reads
every reply. Prints units per second and server CPU microseconds per unit (utime +
stime from /proc) with the agent/redis ratios, and writes the samples to
benches/results/tx-bench.csv.

Usage: python3 benches/tx-bench.py AGENT_BIN [--rounds 3] [--seconds 5] [--conns 50]
                                   [--depth 1] [--depth 16]
"""

import argparse
import csv
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from importlib import import_module  # noqa: E402

ab = import_module("ab-agents")

GET_SCRIPT = "return redis.call('get', KEYS[1])"
LIBRARY = "#!lua name=bench\nredis.register_function{function_name='get', " \
          "callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}}"


def command(*args):
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        out.append(f"${len(b)}\r\n".encode() + b + b"\r\n")
    return b"".join(out)


def unit(kind, key, sha):
    if kind == "multi":
        return command("MULTI") + command("SET", key, "v" * 32) + command("EXEC"), 3
    if kind == "evalsha":
        return command("EVALSHA", sha, "1", key), 1
    return command("FCALL", "get", "1", key), 1


def count_replies(buf):
    """Complete top-level replies at the start of `buf`, and the bytes they take."""
    n, i = 0, 0
    while True:
        end = skip(buf, i)
        if end is None:
            return n, i
        n, i = n + 1, end


def skip(buf, i):
    if i >= len(buf):
        return None
    line_end = buf.find(b"\r\n", i)
    if line_end < 0:
        return None
    t, head = buf[i:i + 1], buf[i + 1:line_end]
    if t in (b"+", b"-", b":"):
        return line_end + 2
    if t == b"$":
        size = int(head)
        if size < 0:
            return line_end + 2
        end = line_end + 2 + size + 2
        return end if end <= len(buf) else None
    if t == b"*":
        size = int(head)
        j = line_end + 2
        for _ in range(max(size, 0)):
            j = skip(buf, j)
            if j is None:
                return None
        return j
    raise ValueError(f"unexpected reply {buf[i:i + 20]!r}")


def worker(port, kind, sha, depth, stop, done):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    units = 0
    buf = b""
    while not stop.is_set():
        batch, replies = [], 0
        for _ in range(depth):
            data, r = unit(kind, f"k:{random.randrange(100000)}", sha)
            batch.append(data)
            replies += r
        s.sendall(b"".join(batch))
        got = 0
        while got < replies:
            chunk = s.recv(1 << 16)
            if not chunk:
                raise RuntimeError("the server closed the connection")
            buf += chunk
            n, used = count_replies(buf)
            got += n
            buf = buf[used:]
        units += depth
    s.close()
    done.append(units)


def run(port, pid, kind, sha, conns, depth, seconds):
    stop, done = threading.Event(), []
    threads = [threading.Thread(target=worker, args=(port, kind, sha, depth, stop, done))
               for _ in range(conns)]
    c0 = ab.cpu_seconds(pid)
    t0 = time.time()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    cpu = ab.cpu_seconds(pid) - c0
    units = sum(done)
    return units / elapsed, cpu / max(units, 1) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("agent")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--depth", type=int, action="append")
    ap.add_argument("--kinds", default="multi,evalsha,fcall")
    a = ap.parse_args()
    depths = a.depth or [1, 16]
    kinds = a.kinds.split(",")
    tmp = tempfile.mkdtemp()
    procs, servers = [], {}
    rport = ab.free_port()
    procs.append(subprocess.Popen(
        ["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL))
    servers["redis-server"] = (rport, procs[-1].pid)
    aport = ab.free_port()
    procs.append(subprocess.Popen([a.agent, "--port", str(aport), "--log", "warn"],
                                  stdout=subprocess.DEVNULL))
    servers["agent"] = (aport, procs[-1].pid)
    samples = []
    try:
        shas = {}
        for name, (port, _) in servers.items():
            ab.wait_ready(port)
            shas[name] = subprocess.run(["redis-cli", "-p", str(port), "SCRIPT", "LOAD", GET_SCRIPT],
                                        capture_output=True, text=True, check=True).stdout.strip()
            subprocess.run(["redis-cli", "-p", str(port), "FUNCTION", "LOAD", "REPLACE", LIBRARY],
                           capture_output=True, check=True)
        names = list(servers)
        for rnd in range(a.rounds):
            for depth in depths:
                for kind in kinds:
                    order = names[rnd % 2:] + names[:rnd % 2]
                    for name in order:
                        port, pid = servers[name]
                        rate, cpu = run(port, pid, kind, shas[name], a.conns, depth, a.seconds)
                        samples.append((rnd, name, depth, kind, rate, cpu))
                        print(f"round {rnd + 1} depth {depth} {kind:8} {name:12} "
                              f"{rate:9.0f}/s {cpu:7.2f} µs CPU/unit", flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
    os.makedirs("benches/results", exist_ok=True)
    with open("benches/results/tx-bench.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "server", "depth", "kind", "units_per_s", "cpu_us_per_unit"])
        w.writerows(samples)
    med = lambda name, d, k, i: statistics.median(
        s[i] for s in samples if s[1] == name and s[2] == d and s[3] == k)
    print(f"\n{'unit':8} {'depth':>5} {'redis/s':>9} {'agent/s':>9} {'ratio':>6}  "
          f"cpu µs/unit redis / agent")
    for d in depths:
        for k in kinds:
            r, g = med("redis-server", d, k, 4), med("agent", d, k, 4)
            print(f"{k:8} {d:5} {r:9.0f} {g:9.0f} {g / r:6.2f}  "
                  f"{med('redis-server', d, k, 5):.2f} / {med('agent', d, k, 5):.2f}")


if __name__ == "__main__":
    main()
