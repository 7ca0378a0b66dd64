#!/usr/bin/env bash
# redis-benchmark against redis-server and a standalone compute agent, in the same run,
# on loopback: -c 50 -n N -r 100000 -d 32 -t set,get with -P 1 and -P 16.
# Prints requests/s, p50 and p99 (ms) per server and the DMC / redis-server ratio, and
# writes benches/results/redis-benchmark.csv.
# Usage: bash benches/redis-benchmark.sh [REQUESTS]   (default 1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
command -v redis-benchmark >/dev/null || { echo "needs redis-tools and redis-server"; exit 1; }
cargo build --release -q -p compute-agent
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port); aport=$(free_port)
dir=$(mktemp -d)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null &
rpid=$!
./target/release/compute-agent --port "$aport" --log warn >/dev/null &
apid=$!
trap 'kill $rpid $apid 2>/dev/null; rm -rf "$dir"' EXIT
for p in $rport $aport; do for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done; done

mkdir -p benches/results
csv=benches/results/redis-benchmark.csv
echo "server,pipeline,test,rps,p50_ms,p99_ms" > "$csv"
run() { # server port pipeline
  redis-benchmark -p "$2" -c 50 -n "$N" -r 100000 -d 32 -t set,get -P "$3" --csv 2>/dev/null \
    | tail -n +2 | tr -d '"' | while IFS=, read -r test rps avg min p50 p95 p99 max; do
        echo "$1,$3,$test,$rps,$p50,$p99" >> "$csv"
      done
}
for P in 1 16; do
  run redis-server "$rport" "$P"
  run dmc-agent "$aport" "$P"
done
python3 - "$csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
get = lambda s, p, t: next(r for r in rows if r["server"] == s and r["pipeline"] == p and r["test"] == t)
print(f"{'test':6} {'P':>3} {'redis rps':>12} {'dmc rps':>12} {'ratio':>6}  {'redis p50/p99':>14} {'dmc p50/p99':>14}")
for p in ("1", "16"):
    for t in ("SET", "GET"):
        r, d = get("redis-server", p, t), get("dmc-agent", p, t)
        print(f"{t:6} {p:>3} {float(r['rps']):12.0f} {float(d['rps']):12.0f} {float(d['rps'])/float(r['rps']):6.2f}  "
              f"{r['p50_ms']:>6}/{r['p99_ms']:<7} {d['p50_ms']:>6}/{d['p99_ms']:<7}")
PY
