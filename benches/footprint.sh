#!/usr/bin/env bash
# Pool bytes per key for 1 M keys (16-byte keys, 32-byte values), DMC next to
# redis-server 7 loaded with the same keys, with and without a TTL.
# Usage: bash benches/footprint.sh [KEYS]
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${1:-1000000}
command -v redis-server >/dev/null || { echo "redis-server is not installed (apt-get install redis-server)"; exit 1; }

cargo build --release -q -p dmc-benches --bin pool-footprint
echo "== DMC (pool-footprint)"
./target/release/pool-footprint --keys "$KEYS" 2>/dev/null

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --daemonize no >/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

gen() { # $1 = with TTL (0/1): RESP SET commands for KEYS keys
  python3 - "$KEYS" "$1" <<'PY'
import sys
n, ttl = int(sys.argv[1]), sys.argv[2] == "1"
out = sys.stdout.buffer
for i in range(n):
    k = b"key:%012d" % i
    v = b"v" * 32
    if ttl:
        out.write(b"*5\r\n$3\r\nSET\r\n$16\r\n%s\r\n$32\r\n%s\r\n$2\r\nEX\r\n$4\r\n3600\r\n" % (k, v))
    else:
        out.write(b"*3\r\n$3\r\nSET\r\n$16\r\n%s\r\n$32\r\n%s\r\n" % (k, v))
PY
}
used() { redis-cli -p "$port" info memory | awk -F: '/^used_memory:/{print $2}' | tr -d '\r'; }
echo "== redis-server $(redis-server --version | awk '{print $3}')"
echo "keys,ttl,used_memory_delta,bytes_per_key"
for ttl in 0 1; do
  redis-cli -p "$port" flushall >/dev/null
  base=$(used)
  gen $ttl | redis-cli -p "$port" --pipe >/dev/null
  after=$(used)
  python3 -c "print('$KEYS,' + ('with TTL' if $ttl else 'no TTL') + ',%d,%.1f' % ($after-$base, ($after-$base)/$KEYS))"
done
