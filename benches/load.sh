#!/usr/bin/env bash
# Side-by-side load benchmark: the origin alone, a plain Pingora proxy, and vestibule on its
# allowed path, with three rate-limit rules, and serving the waiting page -- all in one run, so
# the ratios hold even on a shared machine whose absolute speed drifts.
#
#   benches/load.sh                      # 3 rounds x 6 scenarios x 10 s
#   ROUNDS=5 DURATION=20 CONNECTIONS=64 benches/load.sh
#   VESTIBULE_BIN=/path/to/vestibule benches/load.sh   # measure a prebuilt binary
#   ONLY='handshakes' TLS=1 benches/load.sh   # just the scenarios matching a regex
#   TLS=1 benches/load.sh                # also over TLS: h1 keep-alive (wrk), h2 (h2load),
#                                        # and full handshakes (wrk, a new connection each time)
#
# All proxies start once; each round measures every scenario in turn and the table reports
# per-scenario medians, so drift of a shared machine hits every scenario alike.
#
# Needs wrk (apt-get install wrk); uses nginx as the origin when installed, else vestibule's
# own demo origin. Pins the proxy under test to CPU 0 and wrk and the origin to the others
# when there are at least two. Every run is bounded by DURATION, and every process this script
# starts is stopped by its pid. Results go to bench-results/<time>/.
set -euo pipefail

DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-2}
CONNECTIONS=${CONNECTIONS:-32}
CLK_TCK=$(getconf CLK_TCK)
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install -y wrk" >&2; exit 1; }
# shellcheck source=benches/common.sh
source "$(dirname "$0")/common.sh"
build
start_origin

# --- one measurement ------------------------------------------------------------------------
RESULTS="$OUT/results.tsv"
printf "round\tscenario\trps\tp50_ms\tp99_ms\tcpu_us_per_req\trss_kib\n" > "$RESULTS"

# to_ms, ticks, check_path and measure are in common.sh.

echo "== origin: $ORIGIN_KIND on 127.0.0.1:$ORIGIN_PORT; $CONNECTIONS connections, $ROUNDS rounds of ${DURATION}s per scenario, proxy threads $PROXY_THREADS, pinning: ${PROXY_PIN:-none}"

if [ "${TLS:-0}" = 1 ]; then
  command -v h2load >/dev/null || { echo "TLS=1 needs h2load: apt-get install -y nghttp2-client" >&2; exit 1; }
  make_certificate
fi
get_cookie

start_plain
start_vestibule allowed "$ROOM"; ALLOWED_PID=$VPID; ALLOWED_PORT=$VPORT; ALLOWED_ADMIN=$VADMIN; ALLOWED_TLS=${VTLS_PORT:-}
start_vestibule rules "$ROOM
$RULES"; RULES_PID=$VPID; RULES_PORT=$VPORT; RULES_ADMIN=$VADMIN
start_vestibule waiting "$ROOM"; WAITING_PID=$VPID; WAITING_PORT=$VPORT; WAITING_ADMIN=$VADMIN; WAITING_TLS=${VTLS_PORT:-}
ACCESS_LOG=true start_vestibule access_log "$ROOM"; LOG_PID=$VPID; LOG_PORT=$VPORT; LOG_ADMIN=$VADMIN

for ROUND in $(seq 1 "$ROUNDS"); do
  echo "== round $ROUND/$ROUNDS"
  measure origin "http://127.0.0.1:$ORIGIN_PORT/" "$ORIGIN_PID"
  measure plain_proxy "http://127.0.0.1:$PLAIN_PORT/" "$PLAIN_PID"
  EXPECT=origin ADMIN=$ALLOWED_ADMIN measure vestibule_allowed "http://127.0.0.1:$ALLOWED_PORT/" "$ALLOWED_PID" -H "Cookie: $COOKIE"
  EXPECT=origin ADMIN=$RULES_ADMIN measure vestibule_3_rules "http://127.0.0.1:$RULES_PORT/" "$RULES_PID" -H "Cookie: $COOKIE"
  EXPECT=page ADMIN=$WAITING_ADMIN measure vestibule_waiting_page "http://127.0.0.1:$WAITING_PORT/" "$WAITING_PID"
  EXPECT=origin ADMIN=$LOG_ADMIN measure vestibule_allowed_with_access_log "http://127.0.0.1:$LOG_PORT/" "$LOG_PID" -H "Cookie: $COOKIE"
  if [ "${TLS:-0}" = 1 ]; then
    measure plain_proxy_tls "https://127.0.0.1:$PLAIN_TLS_PORT/" "$PLAIN_PID"
    EXPECT=origin ADMIN=$ALLOWED_ADMIN measure vestibule_allowed_tls "https://127.0.0.1:$ALLOWED_TLS/" "$ALLOWED_PID" -H "Cookie: $COOKIE"
    measure_h2 plain_proxy_h2 "https://127.0.0.1:$PLAIN_TLS_PORT/" "$PLAIN_PID"
    EXPECT=origin ADMIN=$ALLOWED_ADMIN measure_h2 vestibule_allowed_h2 "https://127.0.0.1:$ALLOWED_TLS/" "$ALLOWED_PID" -H "cookie: $COOKIE"
    EXPECT=page ADMIN=$WAITING_ADMIN measure_h2 vestibule_waiting_page_h2 "https://127.0.0.1:$WAITING_TLS/" "$WAITING_PID"
    measure plain_proxy_handshakes "https://127.0.0.1:$PLAIN_TLS_PORT/" "$PLAIN_PID" -H "Connection: close"
    EXPECT=origin ADMIN=$ALLOWED_ADMIN measure vestibule_allowed_handshakes "https://127.0.0.1:$ALLOWED_TLS/" "$ALLOWED_PID" -H "Cookie: $COOKIE" -H "Connection: close"
  fi
done

# --- the table ------------------------------------------------------------------------------
echo
echo "Machine: $(nproc) CPUs, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo); $(uname -sr)"
echo "Origin: $ORIGIN_KIND. $CONNECTIONS connections, wrk -t1, ${DURATION}s, proxy threads $PROXY_THREADS."
echo
python3 - "$RESULTS" <<'PY' | tee "$OUT/table.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
order, by = [], {}
for r in rows:
    if r["scenario"] not in by:
        order.append(r["scenario"])
        by[r["scenario"]] = []
    by[r["scenario"]].append(r)
def num(v):
    try:
        return float(v)
    except ValueError:
        return float("nan")
def med(name, key):
    return statistics.median(num(r[key]) for r in by[name])
# Each row is compared with the plain proxy doing the same: TLS rows with plain Pingora's TLS
# listener (same rustls, same certificate), h2 rows with its h2, handshake rows with its
# handshakes.
def ref(name):
    for suffix in ("_tls", "_h2", "_handshakes"):
        if name.endswith(suffix):
            return "plain_proxy" + suffix
    return "plain_proxy"
def peak(name):
    return max(float(r["rss_kib"]) for r in by[name])

# CPU ratios are taken within each round (the plain proxy ran seconds before) and the median
# over rounds reported; "best" is the ratio of the lowest figures, as other tenants of a shared
# machine can only add time.
def ratios(name):
    rounds = {}
    for r in rows:
        rounds.setdefault(r["round"], {})[r["scenario"]] = float(r["cpu_us_per_req"])
    return [v[name] / v[ref(name)] for v in rounds.values() if name in v and ref(name) in v]
def best(name, key):
    return min(float(r[key]) for r in by[name])
print("| scenario | req/s | p50 ms | p99 ms | CPU us/req | RSS KiB | CPU vs plain | CPU vs plain, best | RSS vs plain |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for name in order:
    cpu, rss = med(name, "cpu_us_per_req"), peak(name)
    if name == "origin" or name == ref(name):
        cmp = ("-", "-", "-")
    else:
        cmp = (f"{statistics.median(ratios(name)):.2f}x",
               f"{best(name, 'cpu_us_per_req') / best(ref(name), 'cpu_us_per_req'):.2f}x",
               f"{rss / peak(ref(name)):.2f}x")
    print(f"| {name} | {med(name, 'rps'):.0f} | {med(name, 'p50_ms'):.3f} | {med(name, 'p99_ms'):.3f} | {cpu:.1f} | {rss:.0f} | {' | '.join(cmp)} |")
print(f"\n(medians of {max(len(v) for v in by.values())} rounds; RSS is the peak)")
PY
echo
echo "Goals: allowed <= 1.10x, 3 rules <= 1.15x, waiting page <= 0.60x plain CPU/req; RSS <= 2x."
if [ "${TLS:-0}" = 1 ]; then
  echo "TLS goals: allowed over TLS <= 1.05x; handshakes/s within 5 % of plain; h2 waiting page <= 0.5x plain h2."
fi
echo "Raw results in $OUT"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "!! these runs did not measure what their row claims; the table above is not valid:" >&2
  printf '   %s\n' "${FAILED[@]}" >&2
  exit 1
fi
