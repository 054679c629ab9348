#!/usr/bin/env bash
# Proof-of-work solve times in a real browser: Debian's chromium, headless, solves the
# challenge page of rooms at difficulties 12 to 22, with the page's own SHA-256 (what visitors
# run) and with WebCrypto (`#webcrypto`). Prints the median and the 90th percentile of the time
# from the page's arrival to the browser sending the solution back, per difficulty; the
# table in docs/src/concepts/entry.md comes from here.
#
#   benches/challenge.sh                       # 12..22, 7 runs each
#   RUNS=3 DIFFICULTIES="12 16 20" benches/challenge.sh
#
# Needs chromium, node and `npm ci` in tests/browser (as tests/it/browser.rs). Every solve is
# bounded by LIMIT_MS, and every process this script starts is stopped by pid.
set -euo pipefail
source "$(dirname "$0")/common.sh"
RUNS=${RUNS:-7}
DIFFICULTIES=${DIFFICULTIES:-"12 14 16 18 20 22"}
LIMIT_MS=${LIMIT_MS:-120000}
build

ORIGIN_PORT=$(free_port)
"$BIN" origin --listen "127.0.0.1:$ORIGIN_PORT" --threads 1 > "$OUT/origin.log" 2>&1 &
PIDS+=($!)
wait_port "$ORIGIN_PORT"

PORT=$(free_port)
mkdir -p "$OUT/proxy"
cp -r "$ROOT/pages" "$OUT/proxy/pages"
printf 'active = "bench"\n[ring]\nbench = "%s"\n' "$BENCH_KEY" > "$OUT/proxy/keys.toml"
{
  printf '[server]\nlisten = ["127.0.0.1:%s"]\nthreads = 1\n' "$PORT"
  printf '[upstream]\npeers = ["127.0.0.1:%s"]\n' "$ORIGIN_PORT"
  for d in $DIFFICULTIES; do
    printf '[[room]]\nname = "pow%s"\npaths = ["/pow%s/"]\ncookie_name = "pow%s"\npages = "pages"\n' "$d" "$d" "$d"
    printf 'allow_percentage = 100\nchallenge = "pow"\nchallenge_difficulty = %s\n' "$d"
  done
} > "$OUT/proxy/vestibule.toml"
"$BIN" --config "$OUT/proxy/vestibule.toml" > "$OUT/proxy.log" 2>&1 &
PIDS+=($!)
wait_port "$PORT"

ROOMS=$(for d in $DIFFICULTIES; do printf '[%s,"/pow%s/__echo"],' "$d" "$d"; done)
ARG=$(printf '{"mode":"measure","base":"http://127.0.0.1:%s","rooms":[%s],"runs":%s,"limit_ms":%s}' \
  "$PORT" "${ROOMS%,}" "$RUNS" "$LIMIT_MS")
echo "== solving: difficulties $DIFFICULTIES, $RUNS runs each, the page's SHA-256 and WebCrypto"
node "$ROOT/tests/browser/challenge.mjs" "$ARG" > "$OUT/solves.json"
python3 - "$OUT/solves.json" <<'PY'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))["measured"]
def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]
print("| difficulty | expected hashes | page's SHA-256: median / p90 (ms) | WebCrypto: median / p90 (ms) |")
print("| ---: | ---: | ---: | ---: |")
by = {}
for r in rows:
    by.setdefault(r["difficulty"], {})[r["solver"]] = r["times"]
for d, solvers in sorted(by.items()):
    cells = []
    for s in ("javascript", "webcrypto"):
        t = [x for x in solvers.get(s, []) if x is not None]
        missed = len(solvers.get(s, [])) - len(t)
        cell = f"{statistics.median(t):,.0f} / {q(t, 0.9):,.0f}" if t else "none"
        if missed:
            cell += f" ({missed} over the limit)"
        cells.append(cell)
    print(f"| {d} | {2 ** d:,} | {cells[0]} | {cells[1]} |")
PY
echo "Results: $OUT"
