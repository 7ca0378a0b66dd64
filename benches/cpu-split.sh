#!/usr/bin/env bash
# One redis-benchmark run against redis-server or a standalone agent, with where the
# CPU went: requests/s, the server's user and system CPU per request (/proc/PID/stat),
# redis-benchmark's own CPU per request, and context switches per request (the whole
# machine's). On a machine whose cores the client shares, throughput is about
# cores busy / (server + client CPU per request); "cores busy" below that says the
# processes waited on each other.
#
# usage: bash benches/cpu-split.sh TEST DEPTH REQUESTS redis|AGENT_BINARY [AGENT ARGS...]
#   e.g. bash benches/cpu-split.sh set 16 1000000 target/release/compute-agent --threads 1
set -euo pipefail
command -v /usr/bin/time >/dev/null || { echo "needs GNU time: apt-get install time" >&2; exit 1; }
test=$1 depth=$2 n=$3 server=$4
shift 4
port=${CPU_SPLIT_PORT:-7791}
if redis-cli -p "$port" ping >/dev/null 2>&1; then
  echo "port $port is taken (set CPU_SPLIT_PORT)" >&2
  exit 1
fi
if [ "$server" = redis ]; then
  redis-server --port $port --save "" --appendonly no >/dev/null 2>&1 &
else
  "$server" --port $port "$@" >/dev/null 2>&1 &
fi
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
ready=0
for _ in $(seq 200); do
  if redis-cli -p "$port" ping >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.05
done
if [ $ready = 0 ] || ! kill -0 $pid 2>/dev/null; then
  echo "$server did not start on port $port" >&2
  exit 1
fi
bench=(redis-benchmark -p $port -c 50 -r 100000 -d 32 -t "$test" -P "$depth" -q)
# Warm: the key space filled (GET then hits, as in benches/ab-agents.py), pages touched.
redis-benchmark -p $port -c 50 -r 100000 -d 32 -t set -P 16 -q -n 400000 >/dev/null
"${bench[@]}" -n 200000 >/dev/null
hz=$(getconf CLK_TCK)
read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
c0=$(awk '/^ctxt/ {print $2}' /proc/stat)
out=$(/usr/bin/time -f "%U %S" "${bench[@]}" -n "$n" 2>&1 | tr '\r' '\n' | grep -E "requests per|^[0-9.]+ [0-9.]+$")
read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
c1=$(awk '/^ctxt/ {print $2}' /proc/stat)
rps=$(echo "$out" | awk '/requests per/ {print $2}')
read -r cu cs < <(echo "$out" | grep -v "requests per" | tail -1)
python3 - "$rps" "$u0" "$u1" "$s0" "$s1" "$cu" "$cs" "$c0" "$c1" "$n" "$hz" "$server" "$test" "$depth" <<'PY'
import sys
rps, u0, u1, s0, s1, cu, cs, c0, c1, n, hz = map(float, sys.argv[1:12])
server, test, depth = sys.argv[12:]
us = lambda ticks: ticks / hz * 1e6 / n
user, sys_, client = us(u1 - u0), us(s1 - s0), (cu + cs) * 1e6 / n
print(f"server={server} test={test} depth={depth} rps={rps:.0f} server_user_us={user:.2f} "
      f"server_sys_us={sys_:.2f} client_us={client:.2f} cores_busy={rps * (user + sys_ + client) / 1e6:.2f} "
      f"ctx_switches_per_req={(c1 - c0) / n:.4f}")
PY
