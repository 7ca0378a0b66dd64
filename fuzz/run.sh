#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 20) on stable Rust, starting from
# and adding to the corpus in fuzz/corpus/TARGET. A failing input is saved under
# fuzz/artifacts/TARGET and the script exits non-zero.
#   bash fuzz/run.sh [SECONDS] [TARGET...]
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`); RUSTC_BOOTSTRAP=1 lets the
# stable toolchain take the sanitizer flags cargo-fuzz passes.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-20}
shift || true
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(resp_request resp_reply rpc_frame glob hash_table rdb_payload)
fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "== fuzz $t for ${secs}s"
  log=$(mktemp)
  if ! cargo fuzz run -O "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 \
    -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz target $t failed; the input is in fuzz/artifacts/$t" >&2
    exit 1
  fi
  grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$log" || true
  rm -f "$log"
done
