#!/usr/bin/env bash
# redis-benchmark against redis-server and a standalone compute agent, in the same run,
# on loopback: -c 50 -n N -r 100000 -d 32 with -P 1 and -P 16, one test at a time.
# Prints requests/s, p50 and p99 (ms) and server CPU per request (µs, from
# /proc/PID/stat) per server, and the DMC / redis-server ratios; writes
# benches/results/$OUT.csv.
# Usage: [TESTS=set,get] [CMDS='SETBIT k __rand_int__ 1;PFADD h __rand_int__']
#        [OUT=redis-benchmark] bash benches/redis-benchmark.sh [REQUESTS]
#   (default 1000000 requests), e.g. the collections:
#   TESTS=lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100,lrange_600 \
#   OUT=collections bash benches/redis-benchmark.sh 20000
#   CMDS runs custom commands (`;`-separated, redis-benchmark's __rand_int__ in
#   0..99999) after TESTS; TESTS= with CMDS runs only those.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
TESTS=${TESTS-set,get}
CMDS=${CMDS:-}
OUT=${OUT:-redis-benchmark}
command -v redis-benchmark >/dev/null || { echo "needs redis-tools and redis-server"; exit 1; }
cargo build --release -q -p compute-agent
source benches/servers.sh

mkdir -p benches/results
csv=benches/results/$OUT.csv
echo "server,pipeline,test,rps,p50_ms,p99_ms,cpu_us_per_req" > "$csv"
run() { # server port pid pipeline test-or-command
  local before after
  before=$(ticks "$3")
  if [[ "$5" == *" "* ]]; then
    # A custom command: its words are redis-benchmark's last arguments.
    read -r -a words <<< "$5"
    redis-benchmark -p "$2" -c 50 -n "$N" -r 100000 -P "$4" --csv "${words[@]}" 2>/dev/null \
      | tail -n +2 | tr -d '"' > "$dir/out"
  else
    redis-benchmark -p "$2" -c 50 -n "$N" -r 100000 -d 32 -t "$5" -P "$4" --csv 2>/dev/null \
      | tail -n +2 | tr -d '"' > "$dir/out"
  fi
  after=$(ticks "$3")
  while IFS=, read -r test rps avg min p50 p95 p99 max; do
    cpu=$(python3 -c "print(round(($after - $before) / $hz * 1e6 / $N, 2))")
    echo "$1,$4,$test,$rps,$p50,$p99,$cpu" >> "$csv"
  done < "$dir/out"
}
jobs=()
for t in ${TESTS//,/ }; do jobs+=("$t"); done
IFS=';' read -r -a custom <<< "$CMDS"
for c in "${custom[@]}"; do [[ -n "$c" ]] && jobs+=("$c"); done
for t in "${jobs[@]}"; do
  for P in 1 16; do
    echo "== $t -P $P" >&2
    run redis-server "$rport" "$rpid" "$P" "$t"
    run dmc-agent "$aport" "$apid" "$P" "$t"
  done
done
python3 - "$csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
get = lambda s, p, t: next(r for r in rows if r["server"] == s and r["pipeline"] == p and r["test"] == t)
tests = list(dict.fromkeys(r["test"] for r in rows))
print(f"{'test':24} {'P':>3} {'redis rps':>10} {'dmc rps':>10} {'ratio':>6} {'redis µs/req':>12} {'dmc µs/req':>10} {'cpu ratio':>9}")
for t in tests:
    for p in ("1", "16"):
        r, d = get("redis-server", p, t), get("dmc-agent", p, t)
        rc, dc = float(r["cpu_us_per_req"]), float(d["cpu_us_per_req"])
        print(f"{t:24} {p:>3} {float(r['rps']):10.0f} {float(d['rps']):10.0f} {float(d['rps'])/float(r['rps']):6.2f} "
              f"{rc:12.2f} {dc:10.2f} {dc / rc if rc else float('nan'):9.2f}")
PY
