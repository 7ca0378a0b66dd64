#!/usr/bin/env bash
# Growing the compute tier under load, DMC against Redis Cluster, on this host.
#
#   DMC:           manager + 2 shm memory nodes (r = 2) + 3 agents (proxy mode);
#                  `cluster-manager agents scale 4` while dmc-bench runs YCSB-B on agent 1.
#   Redis Cluster: 3 redis-server masters; `redis-cli --cluster add-node` then
#                  `redis-cli --cluster reshard` of 4096 slots to the new node while
#                  dmc-bench --cluster runs the same load.
#
# Both load the same keys first. Writes benches/results/rescale/{dmc,redis}-timeline.csv
# (per-second throughput and latency), the rescale reports, and summary.md.
# Settings: KEYS (200000), VALUE (100 bytes), SECS (measured seconds, 40), AT (second of
# the run the rescale starts, 10), CONNS (16).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release
out=${OUT:-$root/benches/results/rescale}
keys=${KEYS:-200000}
value=${VALUE:-100}
secs=${SECS:-40}
at=${AT:-10}
conns=${CONNS:-16}
work=$(mktemp -d)
# Every process of this run shares one cluster secret, through the environment.
export DMC_CLUSTER_SECRET=${DMC_CLUSTER_SECRET:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
shm=/dev/shm/dmc-rescale-$$
pids=()
cleanup() {
  "$bin/cluster-manager" --manager http://127.0.0.1:7300 agents scale 0 >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -f $work/state.json ]] && python3 - "$work/state.json" <<'PY' || true
import json, os, signal, sys
for r in json.load(open(sys.argv[1])).get("launched", {}).values():
    try: os.kill(r["pid"], signal.SIGKILL)
    except OSError: pass
PY
  rm -rf "$work" "$shm"
}
trap cleanup EXIT
mkdir -p "$out" "$shm"
for b in cluster-manager memory-node compute-agent dmc-bench; do
  [[ -x $bin/$b ]] || { echo "build first: cargo build --release --workspace" >&2; exit 1; }
done
command -v redis-server >/dev/null || { echo "needs redis-server" >&2; exit 1; }

wait_line() { for _ in $(seq 1 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; echo "no '$2' in $1" >&2; exit 1; }
cm() { "$bin/cluster-manager" --manager http://127.0.0.1:7300 "$@"; }
pool_json() { cm status --json | python3 -c 'import json,sys; s=json.load(sys.stdin); i=s["instances"][0]; print(json.dumps({"allocated": i["allocated"], "used": i["used"], "regions": i["regions"], "node_allocated": [n["allocated"] for n in s["nodes"]]}))'; }

echo "== DMC: 3 -> 4 agents, $keys keys of $value B"
"$bin/cluster-manager" serve --listen 127.0.0.1:7300 --state "$work/state.json" --log-dir "$work/agents" \
  --agent-port-base 6480 --region-size 256mb --log warn >"$work/manager.log" 2>&1 &
pids+=($!); wait_line "$work/manager.log" ready
for id in 1 2; do
  "$bin/memory-node" --id $id --listen 127.0.0.1:$((7300 + id)) --capacity 2gb --dir "$shm/n$id" \
    --manager http://127.0.0.1:7300 --log warn >"$work/node$id.log" 2>&1 &
  pids+=($!); wait_line "$work/node$id.log" ready
done
sleep 1.5
cm agents scale 3 >/dev/null
agent=$(cm agents list --json | python3 -c 'import json,sys; print(min(a["listen"] for a in json.load(sys.stdin)["agents"]).split(":")[1])')
"$bin/dmc-bench" run -p "$agent" -n "$keys" -d "$value" --load-only -q
before=$(pool_json)
"$bin/dmc-bench" run -p "$agent" -n "$keys" -d "$value" --no-load -w b -c "$conns" --duration "$secs" \
  --timeline "$out/dmc-timeline.csv" --json "$out/dmc-run.json" -q &
bench=$!
sleep $((at + 2))
cm agents scale 4 --json >"$out/dmc-scale.json"
wait $bench || true
sleep 1
after=$(pool_json)
echo "{\"before\": $before, \"after\": $after}" >"$out/dmc-pool.json"
cm agents scale 0 >/dev/null || true

echo "== Redis Cluster: 3 -> 4 masters, add-node + reshard 4096 slots"
for p in 7401 7402 7403 7404; do
  mkdir -p "$work/r$p"
  redis-server --port $p --dir "$work/r$p" --cluster-enabled yes --cluster-config-file nodes.conf \
    --save '' --appendonly no --bind 127.0.0.1 --daemonize no >"$work/r$p.log" 2>&1 &
  pids+=($!)
done
sleep 1
redis-cli --cluster create 127.0.0.1:7401 127.0.0.1:7402 127.0.0.1:7403 --cluster-replicas 0 --cluster-yes >/dev/null
for _ in $(seq 1 100); do redis-cli -p 7401 cluster info | grep -q cluster_state:ok && break; sleep 0.1; done
"$bin/dmc-bench" run -p 7401 --cluster -n "$keys" -d "$value" --load-only -q
"$bin/dmc-bench" run -p 7401 --cluster -n "$keys" -d "$value" --no-load -w b -c "$conns" --duration "$secs" \
  --timeline "$out/redis-timeline.csv" --json "$out/redis-run.json" -q &
bench=$!
sleep $((at + 2))
t0=$(date +%s.%N)
redis-cli --cluster add-node 127.0.0.1:7404 127.0.0.1:7401 >/dev/null
id=$(redis-cli -p 7404 cluster myid)
# The reshard needs every master to know the new node (gossip), and the new node to
# see the cluster as up.
for p in 7401 7402 7403; do
  for _ in $(seq 1 200); do redis-cli -p $p cluster nodes | grep -q "$id" && break; sleep 0.05; done
done
for _ in $(seq 1 200); do redis-cli -p 7404 cluster info | grep -q cluster_state:ok && break; sleep 0.05; done
redis-cli --cluster reshard 127.0.0.1:7401 --cluster-from all --cluster-to "$id" --cluster-slots 4096 \
  --cluster-yes >"$out/redis-reshard.log" 2>&1 || echo "reshard exited with an error: see $out/redis-reshard.log"
t1=$(date +%s.%N)
moved_keys=$(redis-cli -p 7404 dbsize)
wait $bench || true
python3 - "$out" "$t0" "$t1" "$moved_keys" "$at" <<'PY'
import csv, json, statistics, sys
out, t0, t1, moved, at = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
json.dump({"reshard_seconds": t1 - t0, "keys_moved": moved}, open(f"{out}/redis-reshard.json", "w"))
dmc = json.load(open(f"{out}/dmc-scale.json"))
pool = json.load(open(f"{out}/dmc-pool.json"))
runs = {n: json.load(open(f"{out}/{n}-run.json")) for n in ("dmc", "redis")}

def shape(name, busy):
    rows = list(csv.DictReader(open(f"{out}/{name}-timeline.csv")))
    rows = rows[:-1]  # the last second is partial
    ops = [int(r["ops"]) for r in rows]
    errs = [int(r["errors"]) for r in rows]
    base = statistics.median(ops[1:at]) if at > 2 else ops[0]
    window = ops[at:at + max(1, busy)]
    low = [o for o in ops[at:] if o < 0.9 * base]
    return base, min(window), sum(window) / len(window), len(low), sum(errs)

d = shape("dmc", max(1, round(dmc["millis"] / 1000 + 0.5)))
r = shape("redis", max(1, round(t1 - t0 + 0.5)))
err = lambda n: sum(runs[n].get("errors", {}).values()) if isinstance(runs[n].get("errors"), dict) else runs[n].get("errors", 0)
lines = [
    "# Rescale under load: 3 -> 4 (YCSB-B, benches/rescale.sh)", "",
    "| | DMC `agents scale 4` (proxy mode) | Redis Cluster `add-node` + `reshard` 4096 slots |",
    "|---|---|---|",
    f"| time until done | {dmc['millis']} ms (new agent serving) | {t1 - t0:.1f} s |",
    f"| keys moved | 0 | {moved} |",
    f"| ops/s before (median) | {d[0]:.0f} | {r[0]:.0f} |",
    f"| ops/s while rescaling (min / mean) | {d[1]} / {d[2]:.0f} | {r[1]} / {r[2]:.0f} |",
    f"| seconds below 90 % of before | {d[3]} | {r[3]} |",
    f"| failed requests in the run | {d[4]} | {r[4]} |",
    f"| pool bytes allocated before / after | {pool['before']['allocated']} / {pool['after']['allocated']} | — |",
    f"| pool bytes used before / after | {pool['before']['used']} / {pool['after']['used']} | — |",
    "", "Per-second timelines: `dmc-timeline.csv`, `redis-timeline.csv` (second 0 is the first",
    f"measured second; the rescale starts at second {at}).",
]
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
