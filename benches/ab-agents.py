#!/usr/bin/env python3
"""Two compute-agent builds against redis-server in one run: is a change free?

Starts redis-server and one standalone agent per binary on free loopback ports, runs
every test once against each (so each has filled its key space and grown its memory
before anything is measured), then, for ROUNDS rounds, runs
`redis-benchmark -c 50 -n N -r 100000 -d 32 -t TEST -P P` for each test against each
server in a rotated order (so drift of this VM's speed spreads over all of them),
reading the server's CPU time (utime + stime from /proc) around each run.
Prints, per test and pipeline depth, the median requests/s and server CPU µs per
request of each server and each agent's ratio to redis-server, and writes the samples
to benches/results/ab-agents.csv.

With `--shm MEMORY_NODE_BIN`, each agent runs over two `shm` memory nodes of its own
with `r = 2` instead of its embedded pool (the nodes' CPU is not counted).

Usage: python3 benches/ab-agents.py BEFORE_BIN AFTER_BIN [--rounds 3] [-n 300000]
                                    [-P 16] [-P 1] [--tests get,set]
                                    [--shm MEMORY_NODE_BIN]
"""

import argparse
import csv
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")
TESTS = "get,set"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wait_ready(port, deadline=10.0):
    end = time.time() + deadline
    while time.time() < end:
        r = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True)
        if r.stdout.strip() == "PONG":
            return
        time.sleep(0.1)
    sys.exit(f"server on port {port} did not answer PING")


def wait_listening(port, deadline=10.0):
    end = time.time() + deadline
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"memory node on port {port} did not listen")


def bench(port, n, pipeline, test):
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", "50", "-n", str(n), "-r", "100000",
         "-d", "32", "-t", test, "-P", str(pipeline), "--csv"],
        capture_output=True, text=True, check=True).stdout
    rows = list(csv.reader(out.strip().splitlines()))
    return {r[0]: float(r[1]) for r in rows[1:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tests", default="get,set", help="redis-benchmark -t (default get,set)")
    ap.add_argument("-n", type=int, default=300000)
    ap.add_argument("-P", dest="pipelines", type=int, action="append")
    ap.add_argument("--shm", metavar="MEMORY_NODE_BIN",
                    help="run each agent over two shm memory nodes, r = 2")
    a = ap.parse_args()
    global TESTS
    TESTS = a.tests
    pipelines = a.pipelines or [16, 1]
    tmp = tempfile.mkdtemp()
    servers = {}
    procs = []
    rport = free_port()
    procs.append(subprocess.Popen(
        ["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL))
    servers["redis-server"] = (rport, procs[-1].pid)
    pool_args = {}
    if a.shm:
        os.environ.setdefault("DMC_CLUSTER_SECRET", "ab-agents-secret")
        for name in ("before", "after"):
            nodes = []
            for i in (1, 2):
                nport = free_port()
                procs.append(subprocess.Popen(
                    [a.shm, "--id", str(i), "--listen", f"127.0.0.1:{nport}", "--dir",
                     os.path.join(tmp, f"{name}-node{i}"), "--capacity", "2gb",
                     "--log", "warn"], stdout=subprocess.DEVNULL))
                nodes += ["--pool-node", f"127.0.0.1:{nport}"]
            pool_args[name] = ["--pool-backend", "shm", "--replicas", "2"] + nodes
        for arg in pool_args["before"] + pool_args["after"]:
            if arg.startswith("127.0.0.1:"):
                wait_listening(int(arg.rsplit(":", 1)[1]))
    for name, binary in (("before", a.before), ("after", a.after)):
        port = free_port()
        procs.append(subprocess.Popen(
            [binary, "--port", str(port), "--log", "warn"] + pool_args.get(name, []),
            stdout=subprocess.DEVNULL))
        servers[name] = (port, procs[-1].pid)
    try:
        for port, _ in servers.values():
            wait_ready(port)
        # Every server fills its key space and grows its memory once before the
        # measured rounds, so the first round does not pay for page faults alone.
        for port, _ in servers.values():
            for test in TESTS.split(","):
                bench(port, a.n, max(pipelines), test)
        samples = []  # (round, server, pipeline, test, rps, cpu_us_per_req)
        names = list(servers)
        for rnd in range(a.rounds):
            for p in pipelines:
                order = names[rnd % len(names):] + names[:rnd % len(names)]
                for name in order:
                    port, pid = servers[name]
                    rps = {}
                    # One run per test, so each test's CPU time is its own.
                    for test in TESTS.split(","):
                        c0 = cpu_seconds(pid)
                        for t, v in bench(port, a.n, p, test).items():
                            rps[t] = v
                            cpu = cpu_seconds(pid) - c0
                            samples.append((rnd, name, p, t, v, cpu / a.n * 1e6))
                    print(f"round {rnd + 1} P={p} {name:12} "
                          + " ".join(f"{t}={v:.0f}/s" for t, v in rps.items()), flush=True)
    finally:
        for pr in procs:
            pr.terminate()
        for pr in procs:
            pr.wait()
    os.makedirs("benches/results", exist_ok=True)
    with open("benches/results/ab-agents.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "server", "pipeline", "test", "rps", "cpu_us_per_request"])
        w.writerows(samples)
    med = lambda name, p, t, i: statistics.median(
        s[i] for s in samples if s[1] == name and s[2] == p and s[3] == t)
    print(f"\n{'test':4} {'P':>3} {'redis rps':>10} {'before':>10} {'after':>10} "
          f"{'before/redis':>12} {'after/redis':>11}   cpu µs/req redis / before / after")
    for p in pipelines:
        for t in [t for t in ("SET", "GET", "INCR") if any(x[3] == t for x in samples)]:
            r, b, af = (med(n, p, t, 4) for n in ("redis-server", "before", "after"))
            cr, cb, ca = (med(n, p, t, 5) for n in ("redis-server", "before", "after"))
            print(f"{t:4} {p:>3} {r:10.0f} {b:10.0f} {af:10.0f} {b / r:12.2f} {af / r:11.2f}"
                  f"   {cr:.2f} / {cb:.2f} / {ca:.2f}")


if __name__ == "__main__":
    main()
