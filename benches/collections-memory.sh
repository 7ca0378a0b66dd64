#!/usr/bin/env bash
# Memory per element of N small hashes (10 fields) in redis-server and a standalone
# agent, in the same run (see benches/collections-memory.py); then HSET and HGET of a
# random field of a random one of those hashes with redis-benchmark (-c 50, -P 1 and
# -P 16, REQUESTS each): requests/s and server CPU per request, into
# benches/results/collections-hashes.csv.
# Usage: [REQUESTS=200000] bash benches/collections-memory.sh [N]   (default 200000)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
cargo build --release -q -p compute-agent
source benches/servers.sh
mkdir -p benches/results
python3 benches/collections-memory.py "$rport" "$aport" "$N"

REQUESTS=${REQUESTS:-200000}
csv=benches/results/collections-hashes.csv
echo "server,hashes,pipeline,test,rps,cpu_us_per_req" > "$csv"
run() { # server port pid pipeline test command...
  local server=$1 port=$2 pid=$3 p=$4 test=$5 before after rps
  shift 5
  before=$(ticks "$pid")
  rps=$(redis-benchmark -p "$port" -c 50 -n "$REQUESTS" -r "$N" -P "$p" --csv "$@" 2>/dev/null \
    | tail -n 1 | tr -d '"' | cut -d, -f2)
  after=$(ticks "$pid")
  python3 -c "print('$server,$N,$p,$test,$rps,%.2f' % (($after - $before) / $hz * 1e6 / $REQUESTS))" >> "$csv"
}
for p in 1 16; do
  for server in redis-server dmc-agent; do
    if [ "$server" = redis-server ]; then port=$rport; pid=$rpid; else port=$aport; pid=$apid; fi
    run "$server" "$port" "$pid" "$p" hset HSET user:__rand_int__ f__rand_int__ v
    run "$server" "$port" "$pid" "$p" hget HGET user:__rand_int__ f3
  done
done
python3 - "$csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
get = lambda s, p, t: next(r for r in rows if r["server"] == s and r["pipeline"] == p and r["test"] == t)
print(f"{'test':6} {'P':>3} {'redis rps':>10} {'dmc rps':>9} {'ratio':>6} {'redis cpu µs':>12} {'dmc cpu µs':>10}")
for p in ("1", "16"):
    for t in ("hset", "hget"):
        r, d = get("redis-server", p, t), get("dmc-agent", p, t)
        print(f"{t:6} {p:>3} {float(r['rps']):10.0f} {float(d['rps']):9.0f} {float(d['rps']) / float(r['rps']):6.2f}"
              f" {float(r['cpu_us_per_req']):12.2f} {float(d['cpu_us_per_req']):10.2f}")
PY
