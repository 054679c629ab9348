#!/usr/bin/env bash
# Runs every fuzz target with cargo-fuzz (libFuzzer), starting from the seeds in fuzz/seeds/.
#
#   fuzz/run.sh                  # smoke: each target for SECONDS_EACH (default 5); CI runs 3
#   RUNS=10000000 fuzz/run.sh    # at least 10^7 executions per target
#   fuzz/run.sh token path       # only these targets
#
# Needs a nightly toolchain (libFuzzer's instrumentation flags are unstable) and cargo-fuzz;
# when either is missing and cannot be installed, it says so and exits 0, so CI stays green on
# machines that cannot fuzz. Prints one line per target: executions, seconds, crashes.
set -uo pipefail
cd "$(dirname "$0")"

SECONDS_EACH=${SECONDS_EACH:-5}
RUNS=${RUNS:-}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(token cookie identity path config head proxy_header challenge invite jwt request_id enqueue oidc admin draw spool)

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "== fuzz: installing the nightly toolchain"
  rustup toolchain install nightly --profile minimal >/dev/null 2>&1 || true
fi
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "!! fuzz: no nightly toolchain here and rustup could not install one; skipping the fuzz smoke run"
  exit 0
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "== fuzz: installing cargo-fuzz"
  if ! cargo install --locked cargo-fuzz >/dev/null 2>&1 && ! cargo install cargo-fuzz >/dev/null 2>&1; then
    echo "!! fuzz: cargo-fuzz could not be installed; skipping the fuzz smoke run"
    exit 0
  fi
fi

echo "== fuzz: building the targets"
cargo +nightly fuzz build -O -s none >/dev/null 2>build.log || { cat build.log; exit 1; }

failed=0
for t in "${targets[@]}"; do
  [ -f "fuzz_targets/$t.rs" ] || continue
  mkdir -p "corpus/$t"
  if [ -n "$RUNS" ]; then
    limit=(-runs="$RUNS")
  else
    limit=(-max_total_time="$SECONDS_EACH")
  fi
  log=$(mktemp)
  start=$(date +%s)
  cargo +nightly fuzz run -O -s none "$t" "corpus/$t" "seeds/$t" -- "${limit[@]}" \
    -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 >"$log" 2>&1
  code=$?
  took=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  crashes=$(ls "artifacts/$t" 2>/dev/null | grep -c '^crash-\|^oom-\|^timeout-' || true)
  echo "fuzz $t: ${execs:-?} executions in ${took} s, exit $code, crashes ${crashes:-0}"
  if [ $code -ne 0 ]; then
    failed=1
    tail -40 "$log"
  fi
  rm -f "$log"
done
exit $failed
