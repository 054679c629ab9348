#!/usr/bin/env bash
# Side-by-side load benchmark: the origin alone, a plain Pingora proxy, and vestibule on its
# allowed path, with three rate-limit rules, and serving the waiting page, and nginx as a proxy
# with its access log off, on and buffered -- all in one run, so the ratios hold even on a
# shared machine whose absolute speed drifts.
#
#   benches/load.sh                      # 3 rounds x 8 scenarios x 10 s
#   ROUNDS=5 DURATION=20 CONNECTIONS=64 benches/load.sh
#   VESTIBULE_BIN=/path/to/vestibule benches/load.sh   # measure a prebuilt binary
#   BASELINE_BIN=/path/to/older/vestibule benches/load.sh   # also an earlier build's allowed, waiting page (and
#                                        # in Arabic), 3 rules and access-log rows (baseline_*), same rounds
#   BASELINE_PAGES=/path/to/its/pages     # the pages folder of that build, when the templates changed since
#   ONLY='handshakes' TLS=1 benches/load.sh   # just the scenarios matching a regex
#   CLOSE=1 benches/load.sh              # also a new connection for every request (plain HTTP)
#   TLS=1 benches/load.sh                # also over TLS: h1 keep-alive (wrk), h2 (h2load),
#                                        # and full handshakes (wrk, a new connection each time)
#   benches/load.sh --threads 1,2 --cpus 0-1:0-1:0-1      # scaling, here (2 cores shared)
#   CONNECTIONS=256 benches/load.sh --threads 1,2,4,8 --cpus 0-7:8-11:12-15 --wrk-threads 4
#                                        # scaling on a 16-core machine: proxy, wrk, origin
#
# --threads runs every scenario at each proxy thread count and adds plain Pingora with work
# stealing off; the last table gives CPU per request at each count against the first.
#
# All proxies start once; each round measures every scenario in turn and the table reports
# per-scenario medians, so drift of a shared machine hits every scenario alike.
#
# Needs wrk (apt-get install wrk); uses nginx as the origin when installed, else vestibule's
# own demo origin. Pins the proxy under test to CPU 0 and wrk and the origin to the others
# when there are at least two, unless --cpus says otherwise. Every run is bounded by DURATION, and every process this script
# starts is stopped by its pid. Results go to bench-results/<time>/.
set -euo pipefail

usage() {
  echo "usage: benches/load.sh [--threads 1,2,4,8] [--cpus PROXY:WRK:ORIGIN] [--wrk-threads N]" >&2
  exit 2
}
THREAD_LIST=""
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREAD_LIST=${2:?}; shift 2 ;;
    --cpus)
      IFS=: read -r PROXY_CPUS WRK_CPUS ORIGIN_CPUS <<< "${2:?}"
      [ -n "$PROXY_CPUS" ] && [ -n "$WRK_CPUS" ] && [ -n "$ORIGIN_CPUS" ] || usage
      shift 2 ;;
    --wrk-threads) WRK_THREADS=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-2}
CONNECTIONS=${CONNECTIONS:-32}
WRK_THREADS=${WRK_THREADS:-1}
CLK_TCK=$(getconf CLK_TCK)
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install -y wrk" >&2; exit 1; }
# shellcheck source=benches/common.sh
source "$(dirname "$0")/common.sh"
# With --threads, every scenario runs at each thread count (all proxies start at once, and each
# round measures a scenario at every count back to back, so drift hits every count alike), and
# plain Pingora is measured in its default configuration and with work stealing off.
SCALING=0
if [ -n "$THREAD_LIST" ]; then SCALING=1; else THREAD_LIST=$PROXY_THREADS; fi
THREAD_LIST=${THREAD_LIST//,/ }
build
start_origin

# --- one measurement ------------------------------------------------------------------------
RESULTS="$OUT/results.tsv"
printf "round\tscenario\trps\tp50_ms\tp99_ms\tcpu_us_per_req\trss_kib\tthreads\tctx_per_req\n" > "$RESULTS"

# to_ms, ticks, check_path and measure are in common.sh.

echo "== origin: $ORIGIN_KIND ($ORIGIN_WORKERS workers) on 127.0.0.1:$ORIGIN_PORT; $CONNECTIONS connections from $WRK_THREADS wrk threads, $ROUNDS rounds of ${DURATION}s per scenario, proxy threads $THREAD_LIST; CPUs: proxy ${PROXY_CPUS:-any}, wrk ${WRK_CPUS:-any}, origin ${ORIGIN_CPUS:-any}"

if [ "${TLS:-0}" = 1 ]; then
  command -v h2load >/dev/null || { echo "TLS=1 needs h2load: apt-get install -y nghttp2-client" >&2; exit 1; }
  make_certificate
fi
get_cookie

# Every proxy of one thread count, by "<threads> <what>".
declare -A P
for PROXY_THREADS in $THREAD_LIST; do
  t=$PROXY_THREADS
  start_plain; P[$t plain_pid]=$PLAIN_PID P[$t plain_port]=$PLAIN_PORT P[$t plain_tls]=${PLAIN_TLS_PORT:-}
  if [ "$SCALING" = 1 ]; then
    start_plain --no-work-stealing; P[$t nosteal_pid]=$PLAIN_PID P[$t nosteal_port]=$PLAIN_PORT
  fi
  start_vestibule "allowed.t$t" "$ROOM"; P[$t allowed_pid]=$VPID P[$t allowed_port]=$VPORT P[$t allowed_admin]=$VADMIN P[$t allowed_tls]=${VTLS_PORT:-}
  start_vestibule "rules.t$t" "$ROOM
$RULES"; P[$t rules_pid]=$VPID P[$t rules_port]=$VPORT P[$t rules_admin]=$VADMIN
  start_vestibule "waiting.t$t" "$ROOM"; P[$t waiting_pid]=$VPID P[$t waiting_port]=$VPORT P[$t waiting_admin]=$VADMIN P[$t waiting_tls]=${VTLS_PORT:-}
  start_vestibule "prequeue.t$t" "$PREQUEUE_ROOM"; P[$t prequeue_pid]=$VPID P[$t prequeue_port]=$VPORT P[$t prequeue_admin]=$VADMIN
  start_vestibule "challenge.t$t" "$CHALLENGE_ROOM"; P[$t challenge_pid]=$VPID P[$t challenge_port]=$VPORT P[$t challenge_admin]=$VADMIN
  ACCESS_LOG=true start_vestibule "access_log.t$t" "$ROOM"; P[$t log_pid]=$VPID P[$t log_port]=$VPORT P[$t log_admin]=$VADMIN
  if [ "$ORIGIN_KIND" = nginx ] && [ "$t" = 1 ]; then
    # nginx as the proxy, the peer's figure: access log off, on, and buffered. One worker (with
    # more, its CPU would be in processes other than the one whose time is read).
    start_nginx_proxy "nginx_proxy.t$t" off; P[$t ngx_pid]=$NGINX_PROXY_PID P[$t ngx_port]=$NGINX_PROXY_PORT
    start_nginx_proxy "nginx_proxy_log.t$t" on; P[$t ngx_log_pid]=$NGINX_PROXY_PID P[$t ngx_log_port]=$NGINX_PROXY_PORT
    start_nginx_proxy "nginx_proxy_log_buffered.t$t" buffered; P[$t ngx_buf_pid]=$NGINX_PROXY_PID P[$t ngx_buf_port]=$NGINX_PROXY_PORT
  fi
  if [ -n "${BASELINE_BIN:-}" ]; then
    # An earlier build, in the same rounds: before/after figures that share the machine's drift.
    SAVED_BIN=$BIN BIN=$BASELINE_BIN
    start_vestibule "baseline_allowed.t$t" "$ROOM"; P[$t b_allowed_pid]=$VPID P[$t b_allowed_port]=$VPORT P[$t b_allowed_admin]=$VADMIN
    start_vestibule "baseline_rules.t$t" "$ROOM
$RULES"; P[$t b_rules_pid]=$VPID P[$t b_rules_port]=$VPORT P[$t b_rules_admin]=$VADMIN
    ACCESS_LOG=true start_vestibule "baseline_access_log.t$t" "$ROOM"; P[$t b_log_pid]=$VPID P[$t b_log_port]=$VPORT P[$t b_log_admin]=$VADMIN
    start_vestibule "baseline_waiting.t$t" "$ROOM"; P[$t b_waiting_pid]=$VPID P[$t b_waiting_port]=$VPORT P[$t b_waiting_admin]=$VADMIN
    BIN=$SAVED_BIN
  fi
done

# One scenario at every thread count of the round, back to back, so a comparison across thread
# counts spans seconds of the machine's drift, not a whole round of it. Odd rounds go up the
# thread list and even rounds down it: on this shared machine whichever of two runs comes first
# tends to cost more, and alternating cancels that out of the medians.
each() { # measure|measure_h2 proxy(P key) port|tls name origin|page|- [wrk/h2load args...]
  local how=$1 key=$2 via=$3 name=$4 expect=$5; shift 5
  [ "$expect" = - ] && expect=""
  local scheme=http; [ "$via" = tls ] && scheme=https
  local t
  for t in $ORDER; do
    PROXY_THREADS=$t EXPECT=$expect ADMIN=${P[$t ${key}_admin]:-} \
      "$how" "$name" "$scheme://127.0.0.1:${P[$t ${key}_$via]}/" "${P[$t ${key}_pid]}" "$@"
  done
}

ARABIC="Accept-Language: ar-EG,ar;q=0.9,en-US;q=0.6,en;q=0.5"
for ROUND in $(seq 1 "$ROUNDS"); do
  echo "== round $ROUND/$ROUNDS"
  ORDER=$THREAD_LIST
  if [ $((ROUND % 2)) = 0 ]; then ORDER=$(printf '%s\n' $THREAD_LIST | tac | tr '\n' ' '); fi
  measure origin "http://127.0.0.1:$ORIGIN_PORT/" "$ORIGIN_PID"
  each measure plain port plain_proxy -
  if [ "$SCALING" = 1 ]; then
    each measure nosteal port plain_proxy_no_work_stealing -
  fi
  each measure allowed port vestibule_allowed origin -H "Cookie: $COOKIE"
  each measure rules port vestibule_3_rules origin -H "Cookie: $COOKIE"
  each measure waiting port vestibule_waiting_page page
  # The same page in a language negotiated from a browser's Accept-Language.
  each measure waiting port vestibule_waiting_page_ar page -H "$ARABIC"
  # An event's pre-queue page, for a new visitor each time.
  each measure prequeue port vestibule_prequeue_page page
  # A proof-of-work room's challenge page, a challenge of its own for each request.
  each measure challenge port vestibule_challenge_page page
  each measure log port vestibule_allowed_with_access_log origin -H "Cookie: $COOKIE"
  if [ -n "${P[1 ngx_pid]:-}" ]; then
    SAVED_ORDER=$ORDER ORDER=1
    each measure ngx port nginx_proxy -
    each measure ngx_log port nginx_proxy_with_access_log -
    each measure ngx_buf port nginx_proxy_with_access_log_buffered -
    ORDER=$SAVED_ORDER
  fi
  if [ -n "${BASELINE_BIN:-}" ]; then
    each measure b_allowed port baseline_allowed origin -H "Cookie: $COOKIE"
    each measure b_rules port baseline_3_rules origin -H "Cookie: $COOKIE"
    each measure b_log port baseline_allowed_with_access_log origin -H "Cookie: $COOKIE"
    each measure b_waiting port baseline_waiting_page page
    each measure b_waiting port baseline_waiting_page_ar page -H "$ARABIC"
  fi
  if [ "${CLOSE:-0}" = 1 ]; then
    # A new connection for every request: what a connection costs on its own (accepting it,
    # and, at more than one thread without work stealing, registering it where it is served).
    each measure plain port plain_proxy_close - -H "Connection: close"
    each measure allowed port vestibule_allowed_close origin -H "Cookie: $COOKIE" -H "Connection: close"
    if [ -n "${BASELINE_BIN:-}" ]; then
      each measure b_allowed port baseline_allowed_close origin -H "Cookie: $COOKIE" -H "Connection: close"
    fi
  fi
  if [ "${TLS:-0}" = 1 ]; then
    each measure plain tls plain_proxy_tls -
    each measure allowed tls vestibule_allowed_tls origin -H "Cookie: $COOKIE"
    each measure_h2 plain tls plain_proxy_h2 -
    each measure_h2 allowed tls vestibule_allowed_h2 origin -H "cookie: $COOKIE"
    each measure_h2 waiting tls vestibule_waiting_page_h2 page
    each measure plain tls plain_proxy_handshakes - -H "Connection: close"
    each measure allowed tls vestibule_allowed_handshakes origin -H "Cookie: $COOKIE" -H "Connection: close"
  fi
done

# --- the table ------------------------------------------------------------------------------
echo
echo "Machine: $(nproc) CPUs, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo); $(uname -sr)"
echo "Origin: $ORIGIN_KIND ($ORIGIN_WORKERS workers). $CONNECTIONS connections, wrk -t$WRK_THREADS, ${DURATION}s, proxy threads $THREAD_LIST."
echo
python3 "$(dirname "$0")/table.py" "$RESULTS" | tee "$OUT/table.md"
echo
echo "Goals: allowed <= 1.10x, 3 rules <= 1.15x, waiting page (any language) <= 0.60x plain CPU/req (stricter goal: <= 0.5x); RSS <= 2x."
if [ "$SCALING" = 1 ]; then
  echo "Scaling goals: CPU/req at 2 threads <= 1.08x its 1-thread figure (allowed, 3 rules); on 16 cores <= 1.25x from 1 to 8 threads and req/s at 8 >= 1.4x plain default."
fi
if [ "${TLS:-0}" = 1 ]; then
  echo "TLS goals: allowed over TLS <= 1.05x; handshakes/s within 5 % of plain; h2 waiting page <= 0.5x plain h2."
fi
echo "Raw results in $OUT"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "!! these runs did not measure what their row claims; the table above is not valid:" >&2
  printf '   %s\n' "${FAILED[@]}" >&2
  exit 1
fi
