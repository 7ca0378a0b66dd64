#!/usr/bin/env bash
# What failures and region moves cost clients (issue 15's measurements), on this host.
#
#   DMC: manager (lease LEASE ms, 16 MiB regions) + 3 memory nodes over tcp (r = 2) +
#        2 agents (proxy mode). dmc-bench runs YCSB-A (50 % updates) on agent 1 with a
#        per-second timeline while benches/faults/probe.py writes one key at a time
#        through agent 1 and reads every acknowledged write back at the end.
#        Scenarios, each on a fresh cluster, the event at second AT:
#          node-kill   kill -9 the memory node that is primary of the most regions
#          agent-kill  kill -9 agent 2 (the manager gives its shards to agent 1 and
#                      launches a replacement)
#          agent-kill-warm  the same with one backup agent per shard (instances
#                      resize --backups 1): agent 1 holds agent 2's hot keys warm
#          agent-stop  SIGSTOP agent 2 (hung: found by its lease, revoked on the
#                      nodes, then killed and replaced by the manager's launcher)
#          (the agent runs sample agent 1's local-cache hits and misses each
#          second: NAME-cache.csv)
#          migrate     regions migrate ID --to BACKUP, every region
#          drain       nodes drain NODE (the node that is primary of the most regions)
#   Redis: redis-server master + replica + one Sentinel (down-after LEASE ms, quorum 1);
#        the probe writes through Sentinel's current master; kill -9 the master.
#
# Writes benches/results/faults/: NAME-timeline.csv (per second: ops, p50, p99), NAME.png,
# NAME-probe.json, the events' own reports (fill, migrate, drain JSON), summary.md.
# Settings: LEASE (500), KEYS (200000), VALUE (100), SECS (30), AT (10), CONNS (8),
# SCENARIOS ("node-kill agent-kill agent-kill-warm agent-stop migrate drain redis-sentinel").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release
out=${OUT:-$root/benches/results/faults}
lease=${LEASE:-500}
keys=${KEYS:-200000}
value=${VALUE:-100}
secs=${SECS:-30}
at=${AT:-10}
conns=${CONNS:-8}
scenarios=${SCENARIOS:-"node-kill agent-kill agent-kill-warm agent-stop migrate drain redis-sentinel"}
work=$(mktemp -d)
export DMC_CLUSTER_SECRET=${DMC_CLUSTER_SECRET:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for s in "$work"/*/state.json; do
    [[ -f $s ]] && python3 - "$s" <<'PY' || true
import json, os, signal, sys
for r in json.load(open(sys.argv[1])).get("launched", {}).values():
    try: os.kill(r["pid"], signal.SIGKILL)
    except OSError: pass
PY
  done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$out"
for b in cluster-manager memory-node compute-agent dmc-bench; do
  [[ -x $bin/$b ]] || { echo "build first: cargo build --release --workspace" >&2; exit 1; }
done
python3 -c 'import redis' || { echo "needs python3-redis" >&2; exit 1; }

wait_line() { for _ in $(seq 1 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; echo "no '$2' in $1" >&2; exit 1; }
cm() { "$bin/cluster-manager" --manager http://127.0.0.1:7600 "$@"; }
# The node that is primary of the most regions.
busiest_node() { cm regions list --json | python3 -c 'import json,sys,collections; c=collections.Counter(r["primary"] for r in json.load(sys.stdin)); print(c.most_common(1)[0][0])'; }
declare -A node_pid

start_cluster() {
  local d=$work/$1
  mkdir -p "$d"
  "$bin/cluster-manager" serve --listen 127.0.0.1:7600 --state "$d/state.json" --log-dir "$d/agents" \
    --agent-port-base 6600 --lease-ms "$lease" --pool-transport tcp --region-size 16mb --segment-size 1mb \
    --shards 64 --log info >"$d/manager.log" 2>&1 &
  pids+=($!); wait_line "$d/manager.log" ready
  for id in 1 2 3; do
    "$bin/memory-node" --id $id --listen 127.0.0.1:$((7600 + id)) --capacity 1gb --dir "$d/n$id" \
      --manager http://127.0.0.1:7600 --log warn >"$d/node$id.log" 2>&1 &
    node_pid[$id]=$!; pids+=($!); wait_line "$d/node$id.log" ready
  done
  sleep 1
  [[ ${BACKUPS:-0} -gt 0 ]] && cm instances resize default --backups "$BACKUPS" >/dev/null
  cm agents scale 2 >/dev/null
  agents=($(cm agents list --json | python3 -c 'import json,sys; print(" ".join(sorted(a["listen"].split(":")[1] for a in json.load(sys.stdin)["agents"])))'))
}

stop_cluster() {
  local d=$work/$1
  cm agents scale 0 >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  pids=()
  python3 - "$d/state.json" <<'PY' || true
import json, os, signal, sys
for r in json.load(open(sys.argv[1])).get("launched", {}).values():
    try: os.kill(r["pid"], signal.SIGKILL)
    except OSError: pass
PY
}

# Loads the keys, starts the timed load and the probe on agent 1; the caller runs the
# event at second AT and calls finish_load.
start_load() {
  local name=$1 port=${agents[0]}
  rm -f "$work/stop" "$work/event"
  "$bin/dmc-bench" run -p "$port" -n "$keys" -d "$value" --load-only -q
  "$bin/dmc-bench" run -p "$port" -n "$keys" -d "$value" --no-load -w a -c "$conns" --warmup 1 \
    --duration "$secs" --timeline "$out/$name-timeline.csv" --json "$out/$name-run.json" -q &
  bench=$!
  python3 "$root/benches/faults/probe.py" "$out/$name-probe.json" "$work/stop" "$work/event" \
    --port "$port" >/dev/null &
  probe=$!
  sleep $((at + 1))
  date +%s.%N >"$work/event"
}
finish_load() {
  wait "$bench" || true
  touch "$work/stop"
  wait "$probe" || true
}

# Samples agent 1's local-cache hits and misses every half second (Unix time) until the
# stop file appears: $out/$1-cache.csv.
sample_cache() {
  python3 - "$out/$1-cache.csv" "$work/stop" "${agents[0]}" <<'PY' &
import csv, os, sys, time
import redis
path, stop, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = redis.Redis(port=port, socket_timeout=5)
w = csv.writer(open(path, "w", newline=""))
w.writerow(["time", "hits", "misses", "warm_keys"])
while not os.path.exists(stop):
    try:
        m = r.info("memory")
        w.writerow([f"{time.time():.3f}", m.get("local_cache_hits", 0), m.get("local_cache_misses", 0),
                    m.get("local_cache_warm_keys", 0)])
    except Exception:
        pass
    time.sleep(0.5)
PY
  sampler=$!
}

# Polls the region records until every region has two copies and none on node $1:
# prints when the node left the records and when the copies were back (ms after the
# event).
watch_regions() {
  python3 - "$1" "$(cat "$work/event")" "$bin/cluster-manager" <<'PY'
import json, subprocess, sys, time
node, event, cm = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
out = None
while time.time() < event + 30:
    try:
        regions = json.loads(subprocess.run([cm, "--manager", "http://127.0.0.1:7600", "regions", "list", "--json"],
                                            capture_output=True, text=True, timeout=5).stdout)
    except Exception:
        time.sleep(0.05); continue
    holds = lambda r: r["primary"] == node or node in r["backups"]
    if out is None and not any(holds(r) for r in regions):
        out = time.time() - event
    if out is not None and all(len(r["backups"]) == 1 and not r.get("filling") and not r.get("frozen") for r in regions):
        print(json.dumps({"out_of_records_ms": round(out * 1000), "two_copies_ms": round((time.time() - event) * 1000)}))
        break
    time.sleep(0.05)
PY
}

plot() {
  "$bin/dmc-bench" plot --out "$out/$1.png" --title "$2" --mark "$at:$3" "DMC=$out/$1-timeline.csv" \
    || echo "no chart for $1 (see above)"
}

for s in $scenarios; do
  case $s in
  node-kill)
    echo "== node-kill"
    start_cluster node-kill
    start_load node-kill
    victim=$(busiest_node)
    kill -9 "${node_pid[$victim]}"
    watch_regions "$victim" >"$out/node-kill-regions.json"
    finish_load
    grep 'a new copy of the region is complete' "$work/node-kill/manager.log" | sed 's/\x1b\[[0-9;]*m//g' \
      >"$out/node-kill-fills.log" || true
    stop_cluster node-kill
    plot node-kill "kill -9 of a memory node (r = 2, tcp, lease ${lease} ms)" "kill -9 node $victim"
    ;;
  agent-kill | agent-kill-warm | agent-stop)
    echo "== $s"
    if [[ $s == agent-kill-warm ]]; then export BACKUPS=1; else export BACKUPS=0; fi
    start_cluster "$s"
    sample_cache "$s"
    start_load "$s"
    victim=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print([r["pid"] for l, r in s["launched"].items() if l.endswith(":" + sys.argv[2])][0])' \
      "$work/$s/state.json" "${agents[1]}")
    # agent-stop: a hung agent (SIGSTOP): no exit to see, so the lease path; the
    # manager revokes it on the nodes, then (as the launcher's) kills and replaces it.
    if [[ $s == agent-stop ]]; then kill -STOP "$victim"; else kill -9 "$victim"; fi
    cp "$work/event" "$out/$s-event.txt"
    finish_load
    wait "$sampler" || true
    stop_cluster "$s"
    how="kill -9"; [[ $s == agent-stop ]] && how="SIGSTOP"
    plot "$s" "$how of agent 2 (load on agent 1, lease ${lease} ms, backups ${BACKUPS})" "$how agent 2"
    ;;
  migrate)
    echo "== migrate"
    start_cluster migrate
    start_load migrate
    : >"$out/migrate.jsonl"
    for id in $(cm regions list --json | python3 -c 'import json,sys; print(" ".join(str(r["id"]) for r in json.load(sys.stdin)))'); do
      to=$(cm regions list --json | python3 -c "import json,sys; print([r['backups'][0] for r in json.load(sys.stdin) if r['id'] == $id][0])")
      cm regions migrate "$id" --to "$to" --json | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' >>"$out/migrate.jsonl"
    done
    finish_load
    stop_cluster migrate
    plot migrate "regions migrate, every region (copy-free)" "migrations"
    ;;
  drain)
    echo "== drain"
    start_cluster drain
    start_load drain
    cm nodes drain "$(busiest_node)" --json >"$out/drain.json"
    finish_load
    stop_cluster drain
    plot drain "nodes drain of the busiest memory node" "nodes drain"
    ;;
  redis-sentinel)
    echo "== redis-sentinel"
    d=$work/redis; mkdir -p "$d"
    redis-server --port 7701 --dir "$d" --save '' --appendonly no --bind 127.0.0.1 >"$d/m.log" 2>&1 &
    master=$!; pids+=($!)
    redis-server --port 7702 --dir "$d" --save '' --appendonly no --bind 127.0.0.1 --replicaof 127.0.0.1 7701 >"$d/r.log" 2>&1 &
    pids+=($!)
    printf 'port 27701\nbind 127.0.0.1\nsentinel monitor m 127.0.0.1 7701 1\nsentinel down-after-milliseconds m %s\nsentinel failover-timeout m 5000\n' "$lease" >"$d/sentinel.conf"
    redis-server "$d/sentinel.conf" --sentinel >"$d/s.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do redis-cli -p 7702 info replication | grep -q master_link_status:up && break; sleep 0.1; done
    sleep 1
    rm -f "$work/stop" "$work/event"
    python3 "$root/benches/faults/probe.py" "$out/redis-sentinel-probe.json" "$work/stop" "$work/event" \
      --sentinel 27701 --master m >/dev/null &
    probe=$!
    sleep "$at"
    date +%s.%N >"$work/event"
    kill -9 "$master"
    sleep 15
    touch "$work/stop"
    wait "$probe" || true
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    pids=()
    ;;
  esac
done

python3 - "$out" "$at" "$lease" <<'PY'
import csv, json, os, statistics, sys
out, at, lease = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(p):
    return json.load(open(p)) if os.path.exists(p) else None
def shape(name):
    p = f"{out}/{name}-timeline.csv"
    if not os.path.exists(p):
        return None
    rows = list(csv.DictReader(open(p)))[:-1]
    ops = [int(r["ops"]) for r in rows]
    p99 = [int(r["p99_us"]) / 1000 for r in rows]
    base = statistics.median(ops[1:at])
    after = ops[at:]
    return {"base": base, "min": min(after), "below90": sum(1 for o in after if o < 0.9 * base),
            "p99_max": max(p99[at:]), "p99_base": statistics.median(p99[1:at]),
            "errors": sum(int(r["errors"]) for r in rows)}
lines = [f"# Failures and region moves under load (benches/faults.sh, lease {lease} ms)", "",
         "| scenario | ops/s before | min ops/s after | seconds < 90 % | p99 before / worst (ms) | load errors | probe: longest pause (ms) | probe errors | writes lost |",
         "|---|---|---|---|---|---|---|---|---|"]
for name in ("node-kill", "agent-kill", "agent-kill-warm", "agent-stop", "migrate", "drain", "redis-sentinel"):
    t, p = shape(name), load(f"{out}/{name}-probe.json")
    if t is None and p is None:
        continue
    t = t or {}
    cell = lambda k, f="{}": f.format(t[k]) if k in t else "—"
    lines.append(f"| {name} | {cell('base', '{:.0f}')} | {cell('min')} | {cell('below90')} | "
                 f"{cell('p99_base', '{:.1f}')} / {cell('p99_max', '{:.1f}')} | {cell('errors')} | "
                 f"{p.get('outage_ms') if p else '—'} | {p['errors'] if p else '—'} | {p['lost'] if p else '—'} |")
lines.append("")
r = load(f"{out}/node-kill-regions.json")
if r:
    lines.append(f"node-kill: the dead node left every region record {r['out_of_records_ms']} ms after the kill; "
                 f"every region had two copies again {r['two_copies_ms']} ms after it.")
if os.path.exists(f"{out}/node-kill-fills.log"):
    for l in open(f"{out}/node-kill-fills.log"):
        lines.append(f"    fill: {l.strip()[l.find('region='):] if 'region=' in l else l.strip()}")
if os.path.exists(f"{out}/migrate.jsonl"):
    ms = [json.loads(l) for l in open(f"{out}/migrate.jsonl") if l.strip()]
    if ms:
        lines.append("migrate: write block per region (ms): " + ", ".join(f"{m['write_block_ms']:.1f}" for m in ms)
                     + "; the drain of writes in flight (ms): " + ", ".join(f"{m['drain_ms']:.1f}" for m in ms))
for name in ("agent-kill", "agent-kill-warm", "agent-stop"):
    p = f"{out}/{name}-cache.csv"
    if not os.path.exists(p):
        continue
    event = float(open(f"{out}/{name}-event.txt").read())
    rows = [(float(r["time"]) - event, int(r["hits"]), int(r["misses"]), int(r["warm_keys"]))
            for r in csv.DictReader(open(p))]
    def counted(a, b):
        inside = [r for r in rows if a <= r[0] <= b]
        if len(inside) < 2:
            return "—"
        h, m = inside[-1][1] - inside[0][1], inside[-1][2] - inside[0][2]
        return f"{h} hits / {m} misses"
    warm = max((r[3] for r in rows if r[0] < 0), default=0)
    lines.append(f"{name}: agent 1 held {warm} of agent 2's keys warm before the kill; its local cache "
                 f"(keys it owns only) counted {counted(-5, 0)} in the 5 s before and {counted(0, 5)} in the 5 s after")
d = load(f"{out}/drain.json")
if d:
    lines.append(f"drain: {d['millis']} ms, {len(d['migrated'])} primaries moved, {len(d['filled'])} copies filled: "
                 + "; ".join(f"region {f['region']}: {f['bytes'] >> 20} MiB in {f['copy_ms']:.0f} ms "
                             f"({f['bytes'] / 1048576 / max(f['copy_ms'], 1) * 1000:.0f} MiB/s), {f['recopied_chunks']} chunks again, "
                             f"writes blocked {f['write_block_ms']:.1f} ms" for f in d["filled"]))
p = load(f"{out}/redis-sentinel-probe.json")
if p:
    lines.append(f"redis-sentinel: after kill -9 of the master, {p.get('outage_ms')} ms without a successful "
                 f"write until Sentinel promoted the replica and the client followed it; {p['errors']} failed writes "
                 f"meanwhile; {p['lost']} acknowledged writes lost.")
lines += ["", "Timelines: NAME-timeline.csv and NAME.png (second 0 is the first measured second; "
          f"the event is at second {at})."]
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
