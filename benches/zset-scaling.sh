#!/usr/bin/env bash
# One sorted set grown to each of SIZES members (member m:<12 digits> scores its number)
# in redis-server and in a standalone compute agent, side by side; at each size,
# redis-benchmark runs ZADD (a random member moves to a random score: both of DMC's
# trees change), ZRANGEBYSCORE from a random score LIMIT 0 10, ZSCORE and ZRANK of a
# random member (-c 10 -P 1, REQUESTS each). Prints, per size, requests/s, the mean
# time per request (µs) and server CPU per request (µs), and the DMC / redis-server
# ratios; pool bytes per member (DMC's used_memory delta) next to redis-server's.
# Writes benches/results/zset-scaling.csv and zset-scaling.png (time per request
# against size, log x: flat or logarithmic growth is the goal).
# Usage: [SIZES="10000 100000 1000000"] [REQUESTS=20000] bash benches/zset-scaling.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-10000 100000 1000000}
REQUESTS=${REQUESTS:-20000}
CLIENTS=10
command -v redis-benchmark >/dev/null || { echo "needs redis-tools and redis-server"; exit 1; }
cargo build --release -q -p compute-agent
cargo build --release -q -p dmc-benches --bin dmc-bench
source benches/servers.sh

mkdir -p benches/results
csv=benches/results/zset-scaling.csv
echo "server,members,test,rps,us_per_req,cpu_us_per_req,bytes_per_member" > "$csv"
used() { redis-cli -p "$1" info memory | tr -d '\r' | awk -F: '$1 == "used_memory" {print $2}'; }
declare -A base
for p in $rport $aport; do redis-cli -p "$p" flushall >/dev/null; base[$p]=$(used "$p"); done

run() { # server port pid members test command...
  local server=$1 port=$2 pid=$3 members=$4 test=$5 before after rps bytes
  shift 5
  before=$(ticks "$pid")
  rps=$(redis-benchmark -p "$port" -c "$CLIENTS" -n "$REQUESTS" -r "$members" -P 1 --csv "$@" 2>/dev/null \
    | tail -n 1 | tr -d '"' | cut -d, -f2)
  after=$(ticks "$pid")
  bytes=$(( $(used "$port") - ${base[$port]} ))
  python3 -c "
rps = float('$rps')
print('$server,$members,$test,%.0f,%.1f,%.2f,%.1f' % (rps, $CLIENTS * 1e6 / rps,
      ($after - $before) / $hz * 1e6 / $REQUESTS, $bytes / $members))" >> "$csv"
}

for size in $SIZES; do
  echo "== growing the set to $size members" >&2
  python3 - "$rport" "$aport" "$size" <<'PY'
import sys
import redis
size = int(sys.argv[3])
for port in map(int, sys.argv[1:3]):
    r = redis.Redis(port=port)
    have = r.zcard("big")
    pipe = r.pipeline(transaction=False)
    for start in range(have, size, 1000):
        pipe.zadd("big", {f"m:{i:012d}": i for i in range(start, min(start + 1000, size))})
        if len(pipe) == 20:
            pipe.execute()
        if start % 100_000 == 0 and start:
            print(f"  port {port}: {start} members", file=sys.stderr)
    pipe.execute()
    assert r.zcard("big") == size, (port, r.zcard("big"))
PY
  for server in redis-server dmc-agent; do
    if [ "$server" = redis-server ]; then port=$rport; pid=$rpid; else port=$aport; pid=$apid; fi
    run "$server" "$port" "$pid" "$size" zadd ZADD big __rand_int__ m:__rand_int__
    run "$server" "$port" "$pid" "$size" zrangebyscore ZRANGEBYSCORE big __rand_int__ +inf LIMIT 0 10
    run "$server" "$port" "$pid" "$size" zscore ZSCORE big m:__rand_int__
    run "$server" "$port" "$pid" "$size" zrank ZRANK big m:__rand_int__
  done
done

python3 - "$csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
get = lambda s, m, t: next(r for r in rows if r["server"] == s and r["members"] == m and r["test"] == t)
print(f"{'members':>9} {'test':14} {'redis rps':>10} {'dmc rps':>9} {'ratio':>6} {'redis µs':>9} {'dmc µs':>8}"
      f" {'redis cpu':>9} {'dmc cpu':>8} {'redis B/m':>9} {'dmc B/m':>8}")
for m in dict.fromkeys(r["members"] for r in rows):
    for t in dict.fromkeys(r["test"] for r in rows):
        r, d = get("redis-server", m, t), get("dmc-agent", m, t)
        print(f"{m:>9} {t:14} {float(r['rps']):10.0f} {float(d['rps']):9.0f} {float(d['rps']) / float(r['rps']):6.2f}"
              f" {float(r['us_per_req']):9.1f} {float(d['us_per_req']):8.1f} {float(r['cpu_us_per_req']):9.2f}"
              f" {float(d['cpu_us_per_req']):8.2f} {float(r['bytes_per_member']):9.1f} {float(d['bytes_per_member']):8.1f}")
PY
./target/release/dmc-bench curve "$csv" --out benches/results/zset-scaling.png \
  --title "One sorted set: time per request against its size (-c $CLIENTS -P 1)" \
  --x members --y us_per_req --by server --by test --log-x
