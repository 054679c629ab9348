#!/usr/bin/env bash
# Soak: mixed traffic for a bounded time against a release build, with a reload every 30 s, two
# origin restarts and 2,000 idle connections opened and dropped. Records RSS, fds and p99 over
# time (CSV + PNG) and exits non-zero on a 5xx the origin did not cause, on leaks or on a panic.
#
#   benches/soak.sh                 # 30 minutes (the figures in docs/src/performance.md)
#   MINUTES=3 benches/soak.sh       # a quick run
#   RATE=500 OUT=/tmp/soak benches/soak.sh
#
# Everything runs on 127.0.0.1; every loop is bounded by the run's length.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-30}
RATE=${RATE:-300}
OUT=${OUT:-bench-results/soak}
cargo build --release --bin vestibule --example soak
exec target/release/examples/soak --bin target/release/vestibule \
  --minutes "$MINUTES" --rate "$RATE" --out "$OUT"
