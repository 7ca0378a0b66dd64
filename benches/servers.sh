# Sourced by the benchmark scripts (after they built the release agent): starts
# redis-server and a standalone compute agent on free loopback ports ($rport, $aport;
# pids $rpid, $apid; a scratch directory $dir), stops both on exit, and defines
# `ticks PID` (a process's CPU time in clock ticks, from /proc) and $hz.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port); aport=$(free_port)
dir=$(mktemp -d)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null &
rpid=$!
./target/release/compute-agent --port "$aport" --log warn >/dev/null &
apid=$!
trap 'kill $rpid $apid 2>/dev/null; rm -rf "$dir"' EXIT
for p in $rport $aport; do for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done; done
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
