#!/usr/bin/env bash
# Memory per element of small hashes (10 fields) in redis-server and a standalone
# agent, in the same run: see benches/collections-memory.py.
# Usage: bash benches/collections-memory.sh [N]   (default 200000 hashes)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
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
python3 benches/collections-memory.py "$rport" "$aport" "$N"
