#!/usr/bin/env bash
# Memory-node CPU per SET: a standalone agent over two `shm` memory nodes (r = 2), then
# redis-server, each under `redis-benchmark -c 50 -n N -r 100000 -d 32 -t set` at -P 16
# and -P 1, alternated ROUNDS times. CPU is utime + stime from /proc (10 ms ticks)
# around each run: the two memory nodes summed, the agent, redis-server.
# Prints a table and writes benches/results/node-cpu.csv.
# Usage: bash benches/node-cpu.sh [REQUESTS] [ROUNDS]   (defaults 200000, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
ROUNDS=${2:-3}
command -v redis-benchmark >/dev/null || { echo "needs redis-tools and redis-server"; exit 1; }
cargo build --release -q -p compute-agent -p memory-node
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work=$(mktemp -d)
secret="node-cpu-bench-secret"
export DMC_CLUSTER_SECRET=$secret
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
nodes=()
for id in 1 2; do
  port=$(free_port)
  ./target/release/memory-node --id "$id" --listen "127.0.0.1:$port" --dir "$work/node$id" \
    --capacity 2gb --log warn >/dev/null 2>&1 &
  pids+=($!)
  nodes+=("$port:$!")
done
sleep 0.5
aport=$(free_port)
./target/release/compute-agent --port "$aport" --pool-backend shm --replicas 2 \
  --pool-node "127.0.0.1:${nodes[0]%%:*}" --pool-node "127.0.0.1:${nodes[1]%%:*}" --log warn >/dev/null 2>&1 &
apid=$!
pids+=($apid)
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >/dev/null &
rpid=$!
pids+=($rpid)
for p in $rport $aport; do
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
mkdir -p benches/results
csv=benches/results/node-cpu.csv
echo "round,server,pipeline,rps,node_us_per_set,agent_us_per_set,redis_us_per_set" > "$csv"
bench() { # port pipeline -> rps
  redis-benchmark -p "$1" -c 50 -n "$N" -r 100000 -d 32 -t set -P "$2" --csv 2>/dev/null \
    | tail -n +2 | tr -d '"' | cut -d, -f2
}
us() { python3 -c "print(f'{($1) * 1e6 / $hz / $N:.2f}')"; }
for r in $(seq "$ROUNDS"); do
  for P in 16 1; do
    n1=${nodes[0]##*:}; n2=${nodes[1]##*:}
    b1=$(( $(ticks "$n1") + $(ticks "$n2") )); ba=$(ticks "$apid")
    rps=$(bench "$aport" "$P")
    a1=$(( $(ticks "$n1") + $(ticks "$n2") )); aa=$(ticks "$apid")
    echo "$r,dmc,$P,$rps,$(us "$a1 - $b1"),$(us "$aa - $ba")," >> "$csv"
    br=$(ticks "$rpid")
    rps=$(bench "$rport" "$P")
    ar=$(ticks "$rpid")
    echo "$r,redis,$P,$rps,,,$(us "$ar - $br")" >> "$csv"
    echo "round $r P $P done" >&2
  done
done
python3 - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def med(server, p, col):
    return statistics.median(float(r[col]) for r in rows if r["server"] == server and r["pipeline"] == p)
print("| P | DMC SET/s | redis SET/s | ratio | memory-node CPU µs/SET | agent CPU µs/SET | redis-server CPU µs/SET |")
print("|---|---|---|---|---|---|---|")
for p in ("16", "1"):
    d, r = med("dmc", p, "rps"), med("redis", p, "rps")
    print(f"| {p} | {d:,.0f} | {r:,.0f} | {d / r:.2f} | {med('dmc', p, 'node_us_per_set'):.2f} | "
          f"{med('dmc', p, 'agent_us_per_set'):.2f} | {med('redis', p, 'redis_us_per_set'):.2f} |")
PY
