# Shared by benches/load.sh and benches/instructions.sh: processes stopped by pid, free ports,
# the origin, and the vestibule configurations of each scenario. Source it; it sets ROOT, OUT,
# BIN, PLAIN and starts nothing by itself.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/bench-results/$(date +%Y%m%d-%H%M%S)-$(basename "$0" .sh)}
mkdir -p "$OUT"
PROXY_THREADS=${PROXY_THREADS:-1}

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_port() {
  for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2; return 1
}
stop() {
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
}

NCPU=$(nproc)
# Where each part runs: CPU lists for taskset (PROXY_CPUS, WRK_CPUS, ORIGIN_CPUS; load.sh takes
# them as --cpus PROXY:WRK:ORIGIN). By default the proxy under test gets CPU 0 and wrk and the
# origin the others, when there are at least two.
if [ "$NCPU" -ge 2 ]; then
  PROXY_CPUS=${PROXY_CPUS:-0}
  WRK_CPUS=${WRK_CPUS:-1-$((NCPU - 1))}
  ORIGIN_CPUS=${ORIGIN_CPUS:-$WRK_CPUS}
fi
pin() { # cpu-list -> a taskset prefix, or nothing
  if [ -n "${1:-}" ] && command -v taskset >/dev/null; then echo "taskset -c $1"; fi
}
cpu_count() { # cpu-list like 0-3,8 -> 5
  python3 -c 'import sys; print(sum(int(b) - int(a) + 1 for a, _, b in (p.partition("-") if "-" in p else (p, "-", p) for p in sys.argv[1].split(","))))' "$1"
}
PROXY_PIN=$(pin "${PROXY_CPUS:-}")
LOAD_PIN=$(pin "${WRK_CPUS:-}")
ORIGIN_PIN=$(pin "${ORIGIN_CPUS:-}")
# nginx workers: one per origin CPU unless ORIGIN_WORKERS says otherwise.
ORIGIN_WORKERS=${ORIGIN_WORKERS:-$( [ -n "${ORIGIN_CPUS:-}" ] && cpu_count "$ORIGIN_CPUS" || echo 1)}

# Builds vestibule and the plain proxy, unless both are given prebuilt (VESTIBULE_BIN and
# PLAIN_BIN: a machine without cargo, as in benches/bundle.sh's tarball).
build() {
  if [ -z "${VESTIBULE_BIN:-}" ] || [ -z "${PLAIN_BIN:-}" ]; then
    echo "== building (release)"
    (cd "$ROOT" && cargo build --release --quiet --bin vestibule --example plain_proxy)
  fi
  BIN=${VESTIBULE_BIN:-$ROOT/target/release/vestibule}
  PLAIN=${PLAIN_BIN:-$ROOT/target/release/examples/plain_proxy}
  BENCH_KEY=$("$BIN" keygen)
}

# Starts the origin (nginx when installed, else the demo origin); sets ORIGIN_PORT, ORIGIN_PID.
start_origin() {
  ORIGIN_PORT=$(free_port)
  if command -v nginx >/dev/null; then
    ORIGIN_KIND=nginx
    mkdir -p "$OUT/nginx"
    # Everything nginx writes is under $OUT and its workers run as this user: a machine that
    # only carries nginx's binary (benches/bundle.sh) has no /var/lib/nginx, and maybe no
    # "nogroup" group, nginx's compiled-in defaults.
    cat > "$OUT/nginx/nginx.conf" <<EOF
daemon off;
master_process $( [ "$ORIGIN_WORKERS" -gt 1 ] && echo on || echo off );
worker_processes $ORIGIN_WORKERS;
$( [ "$(id -u)" = 0 ] && echo "user $(id -un) $(id -gn);" )
pid $OUT/nginx/nginx.pid;
error_log $OUT/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $OUT/nginx/body;
  proxy_temp_path $OUT/nginx/proxy;
  fastcgi_temp_path $OUT/nginx/fastcgi;
  uwsgi_temp_path $OUT/nginx/uwsgi;
  scgi_temp_path $OUT/nginx/scgi;
  server {
    listen 127.0.0.1:$ORIGIN_PORT;
    location / { default_type text/plain; return 200 "hello from the origin\n"; }
  }
}
EOF
    $ORIGIN_PIN nginx -p "$OUT/nginx" -c "$OUT/nginx/nginx.conf" >"$OUT/nginx/stdout.log" 2>&1 &
  else
    ORIGIN_KIND="vestibule demo origin"
    $ORIGIN_PIN "$BIN" origin --listen "127.0.0.1:$ORIGIN_PORT" --threads "$ORIGIN_WORKERS" >"$OUT/origin.log" 2>&1 &
  fi
  ORIGIN_PID=$!
  PIDS+=("$ORIGIN_PID")
  wait_port "$ORIGIN_PORT"
}

ROOM='[[room]]
pages = "pages"
allow_percentage = 50'
# The same room with an event whose pre-queue is open: every request is a new
# visitor who gets the pre-queue page and a token due at the start.
PREQUEUE_ROOM="$ROOM
[[room.event]]
name = \"launch\"
prequeue_start = \"$(date -u -d '-1 hour' +%FT%TZ)\"
start = \"$(date -u -d '+1 day' +%FT%TZ)\"
end = \"$(date -u -d '+2 days' +%FT%TZ)\"
shuffle_at_start = true"
# The same room asking new arrivals for a proof-of-work: every request is a new
# visitor who gets the challenge page, with a challenge of its own.
CHALLENGE_ROOM="$ROOM
challenge = \"pow\""
# A capacity room with slots to spare: every visitor is admitted, and an admitted visitor's
# requests ask whether their session was revoked and keep it counted.
CAPACITY_ROOM='[[room]]
pages = "pages"
admission = "fifo"
new_users_per_minute = 1000000
total_active_users = 1000000'
# Three rules, one of each algorithm, none of which ever blocks: the window per client, a
# token bucket per client and path (so allowed answers carry RateLimit headers), and a
# concurrency cap. Their requests are the allowed scenario's, so the difference is the rules.
RULES='[[rate_limit]]
name = "per-ip"
window = "10s"
limit = 1000000
[[rate_limit]]
name = "per-path"
key = ["client_ip", "path"]
algorithm = "token_bucket"
limit = 1000000
period = "1s"
[[rate_limit]]
name = "slots"
algorithm = "concurrency"
limit = 100000'
# The same, with the bucket keyed by an API key header the client sends.
RULES_API_KEY=${RULES/'"path"'/'"header:x-api-key"'}
RULES_API_KEY=${RULES_API_KEY/per-path/api-key}

# With TLS=1, every proxy also gets a TLS listener with one certificate (ECDSA P-256, made
# here with openssl); sets TLS_CERT, TLS_KEY.
make_certificate() {
  mkdir -p "$OUT/tls"
  TLS_CERT=$OUT/tls/bench.pem TLS_KEY=$OUT/tls/bench.key
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj /CN=bench.test -addext subjectAltName=DNS:bench.test \
    -keyout "$TLS_KEY" -out "$TLS_CERT" 2>/dev/null
}

# Starts nginx as a reverse proxy in front of the origin, the peer's figure in the same run:
# one worker pinned like the proxy under test, kept-alive origin connections, and its
# access log off, on (one write(2) a line) or buffered (`buffer=64k`, flushed at least every
# 100 ms, as vestibule flushes its own). Sets NGINX_PROXY_PORT, NGINX_PROXY_PID.
start_nginx_proxy() { # name off|on|buffered
  local name=$1 access=$2 dir="$OUT/$1"
  NGINX_PROXY_PORT=$(free_port)
  mkdir -p "$dir"
  local log="access_log off;"
  case $access in
    on) log="access_log $dir/access.log combined;" ;;
    buffered) log="access_log $dir/access.log combined buffer=64k flush=100ms;" ;;
  esac
  cat > "$dir/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
$( [ "$(id -u)" = 0 ] && echo "user $(id -un) $(id -gn);" )
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  $log
  keepalive_requests 1000000;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_PROXY_PORT;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
  $PROXY_PIN nginx -p "$dir" -c "$dir/nginx.conf" >"$dir/stdout.log" 2>&1 &
  NGINX_PROXY_PID=$!
  PIDS+=("$NGINX_PROXY_PID")
  wait_port "$NGINX_PROXY_PORT"
}

# Starts the plain Pingora proxy (the reference) in front of the origin; sets PLAIN_PORT,
# PLAIN_PID (and PLAIN_TLS_PORT with TLS=1). Arguments go to plain_proxy (--no-work-stealing).
start_plain() {
  PLAIN_PORT=$(free_port)
  local tls=()
  if [ "${TLS:-0}" = 1 ]; then
    PLAIN_TLS_PORT=$(free_port)
    tls=("127.0.0.1:$PLAIN_TLS_PORT" "$TLS_CERT" "$TLS_KEY")
  fi
  $PROXY_PIN "$PLAIN" "$@" "127.0.0.1:$PLAIN_PORT" "127.0.0.1:$ORIGIN_PORT" "$PROXY_THREADS" "${tls[@]}" >"$OUT/plain.t${PROXY_THREADS}${1:-}.log" 2>&1 &
  PLAIN_PID=$!
  PIDS+=("$PLAIN_PID")
  wait_port "$PLAIN_PORT"
}

# Writes $OUT/<name>/vestibule.toml with <extra> after the common sections; sets VPORT and
# VADMIN (its admin port), and VTLS_PORT with TLS=1.
write_vestibule() { # name extra
  local name=$1 text=$2
  VPORT=$(free_port)
  VADMIN=$(free_port)
  local tls_listen="" tls_table=""
  if [ "${TLS:-0}" = 1 ]; then
    VTLS_PORT=$(free_port)
    tls_listen="tls_listen = [\"127.0.0.1:$VTLS_PORT\"]"
    tls_table="[tls]
certificates = [{ cert = \"$TLS_CERT\", key = \"$TLS_KEY\" }]"
  fi
  local admin=$VADMIN
  mkdir -p "$OUT/$name"
  # An earlier build (BASELINE_BIN) may need the pages of its day: BASELINE_PAGES.
  if [ "$BIN" != "${SAVED_BIN:-$BIN}" ] && [ -n "${BASELINE_PAGES:-}" ]; then
    cp -r "$BASELINE_PAGES" "$OUT/$name/pages"
  else
    cp -r "$ROOT/pages" "$OUT/$name/pages"
  fi
  printf 'active = "bench"\n[ring]\nbench = "%s"\n' "$BENCH_KEY" > "$OUT/$name/keys.toml"
  # With JWT_KEY (a PEM file), the ring also holds that JWT key (rooms with jwt = true).
  if [ -n "${JWT_KEY:-}" ]; then
    printf '[[jwt_key]]\nkid = "bench"\nalgorithm = "ES256"\nprivate_key = "%s"\n' "$JWT_KEY" >> "$OUT/$name/keys.toml"
  fi
  chmod 600 "$OUT/$name/keys.toml"
  cat > "$OUT/$name/vestibule.toml" <<EOF
[server]
listen = ["127.0.0.1:$VPORT"]
threads = $PROXY_THREADS
work_stealing = ${WORK_STEALING:-false}
pid_file = "$OUT/$name/vestibule.pid"
upgrade_sock = "$OUT/$name/upgrade.sock"
$tls_listen
[admin]
listen = "127.0.0.1:$admin"
[upstream]
peers = ["127.0.0.1:$ORIGIN_PORT"]
[log]
level = "warn"
access = ${ACCESS_LOG:-false}
$tls_table
$text
EOF
}

# Starts vestibule for a scenario, optionally under a wrapper (valgrind); sets VPID, VPORT.
start_vestibule() { # name extra [wrapper...]
  local name=$1 text=$2; shift 2
  write_vestibule "$name" "$text"
  # The log goes beside the config's folder, not into it: the reload watcher sees every change
  # in that folder, and a log written there every 100 ms would be measured as the access log's.
  $PROXY_PIN "$@" "$BIN" --config "$OUT/$name/vestibule.toml" >"$OUT/$name.log" 2>&1 &
  VPID=$!
  PIDS+=("$VPID")
  wait_port "$VPORT"
}

# What a vestibule did so far, from its admin endpoint: answers it forwarded from the origin
# (2xx) and room pages it wrote itself (anon, wait, deny, pre-queue and challenge decisions).
forwarded() { # admin-port
  curl -s "http://127.0.0.1:$1/metrics" | awk '/^vestibule_upstream_responses_total\{status_class="2xx"\}/ { n += $2 } END { printf "%d", n }'
}
room_pages() { # admin-port
  curl -s "http://127.0.0.1:$1/metrics" | awk '/^vestibule_room_decisions_total\{/ && /decision="(anon|wait|lost|deny|prequeue|challenge)"/ { n += $2 } END { printf "%d", n }'
}

# An allow cookie for 127.0.0.1, from a room that admits everyone (by default the lottery
# room at 100 %); sets COOKIE.
get_cookie() { # [room]
  start_vestibule cookie "${1:-${ROOM/allow_percentage = 50/allow_percentage = 100}}"
  # Every cookie set (a jwt room sets two), as one Cookie header value.
  COOKIE=$(curl -s -D - -o /dev/null "http://127.0.0.1:$VPORT/" | tr -d '\r' | awk -F': ' 'tolower($1) == "set-cookie" { split($2, a, ";"); print a[1] }' | paste -sd';' | sed 's/;/; /g')
  stop "$VPID"
  [ -n "$COOKIE" ] || { echo "no cookie from vestibule" >&2; exit 1; }
}

# --- one wrk measurement (load.sh, cluster.sh): needs RESULTS, CONNECTIONS, DURATION, WARMUP,
# CLK_TCK and ROUND set by the caller ----------------------------------------------------------
to_ms() { # wrk prints 1.23ms / 456.00us / 1.20s
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n = n; else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'
}
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# Context switches of every thread of a process, voluntary or not: a worker thread that parks
# for lack of work and is woken again counts one.
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { n += $2 } END { print n + 0 }'; }
per_request() { awk -v d="$1" -v n="$2" 'BEGIN { printf "%.2f", (n > 0 ? d / n : 0) }'; }

FAILED=()
# Checks that a scenario measured the path its name claims: every request of the run was
# forwarded to the origin ("origin"), or answered with a room page ("page"). A rejected cookie
# would otherwise make "allowed" time the cheaper waiting page.
check_path() { # name expect admin-port before-count requests
  local name=$1 expect=$2 admin=$3 before=$4 requests=$5 after
  if [ "$expect" = origin ]; then after=$(forwarded "$admin"); else after=$(room_pages "$admin"); fi
  local got=$((after - before))
  # wrk counts answers it read; the proxy may finish a few more as the run is cut.
  if [ "$got" -lt $((requests * 99 / 100)) ] || [ "$got" -gt $((requests + ${SLACK:-$((CONNECTIONS * 2))})) ]; then
    echo "!! $name: $requests requests, but $got took the '$expect' path" >&2
    FAILED+=("$name (round $ROUND): $got of $requests on the $expect path")
  fi
}

# wrk sends the same request for a whole run, and cannot take a cookie the proxy renews, as a
# browser does: an allow token changes value once per allow_period, and from then on the proxy
# renews it on every request that presents the old one. So before and after each run the
# cookie is checked with one request: COOKIE becomes the one the proxy wants now, and a run
# during which it was renewed is measured again.
current_cookie() { # url; updates COOKIE, and fails when the proxy renewed it
  [ -n "${COOKIE:-}" ] || return 0
  local renewed
  renewed=$(curl -sk -D - -o /dev/null -H "Cookie: $COOKIE" "$1" | tr -d '\r' |
    awk -F': ' -v name="${COOKIE%%=*}" 'tolower($1) == "set-cookie" && index($2, name "=") == 1 { split($2, a, ";"); print a[1]; exit }')
  [ -z "$renewed" ] || { COOKIE=$renewed; return 1; }
}

# After a run on the origin path: whether the proxy renewed the cookie meanwhile, so the run is
# to be measured again (once: MEASURED_AGAIN is set for the second run).
renewed_during() { # name url
  [ "${EXPECT:-}" = origin ] && [ -z "${MEASURED_AGAIN:-}" ] || return 1
  current_cookie "$2" && return 1
  echo "   $1: the room cookie was renewed during the run; measuring again"
}

# Sets ARGS to the given arguments, with any cookie header carrying the current COOKIE.
current_args() { # url [args...]
  local url=$1 a; shift
  current_cookie "$url" || true
  ARGS=()
  for a in "$@"; do
    [[ ${a,,} == "cookie: "* ]] && a="${a%%: *}: $COOKIE"
    ARGS+=("$a")
  done
}

measure() { # name url pid [wrk args...]; EXPECT=origin|page ADMIN=port check the path
  local name=$1 url=$2 pid=$3; shift 3
  # ONLY (a regex): measure just the matching scenarios, with their plain references.
  if [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]]; then return 0; fi
  local given=("$@")
  if [ "${EXPECT:-}" = origin ]; then current_args "$url" "$@"; set -- "${ARGS[@]}"; fi
  $LOAD_PIN wrk -t"${WRK_THREADS:-1}" -c"$CONNECTIONS" -d"${WARMUP}s" "$@" "$url" >/dev/null
  local counted=0
  if [ -n "${EXPECT:-}" ]; then
    if [ "$EXPECT" = origin ]; then counted=$(forwarded "$ADMIN"); else counted=$(room_pages "$ADMIN"); fi
  fi
  local sw_before; sw_before=$(switches "$pid")
  local before; before=$(ticks "$pid")
  local w="$OUT/$name.round$ROUND.wrk"
  $LOAD_PIN wrk -t"${WRK_THREADS:-1}" -c"$CONNECTIONS" -d"${DURATION}s" --latency "$@" "$url" > "$w"
  local after; after=$(ticks "$pid")
  local sw_after; sw_after=$(switches "$pid")
  local requests rps p50 p99 cpu rss ctx
  requests=$(awk '/requests in/ { print $1 }' "$w")
  rps=$(awk '/Requests\/sec/ { print $2 }' "$w")
  p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' "$w")")
  p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$w")")
  cpu=$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v n="$requests" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }')
  rss=$(awk '/VmHWM/ { print $2 }' "/proc/$pid/status")
  ctx=$(per_request $((sw_after - sw_before)) "$requests")
  if grep -q "Non-2xx" "$w"; then
    echo "!! $name had non-2xx answers: $(grep Non-2xx "$w")" >&2
    FAILED+=("$name (round $ROUND): $(grep Non-2xx "$w")")
  fi
  if [ -n "${EXPECT:-}" ]; then
    check_path "$name" "$EXPECT" "$ADMIN" "$counted" "$requests"
  fi
  if renewed_during "$name" "$url"; then
    MEASURED_AGAIN=1 measure "$name" "$url" "$pid" "${given[@]}"
    return
  fi
  printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$ROUND" "$name" "$rps" "$p50" "$p99" "$cpu" "$rss" "$PROXY_THREADS" "$ctx" >> "$RESULTS"
  echo "   $name: $rps req/s, p50 $p50 ms, p99 $p99 ms, $cpu us CPU/req, $ctx context switches/req, RSS $rss KiB"
}

# One h2load measurement over TLS (HTTP/2 by ALPN), recorded like measure's: needs the same
# variables, and H2_STREAMS (concurrent streams per connection).
measure_h2() { # name url pid [h2load args...]; EXPECT/ADMIN as for measure
  local name=$1 url=$2 pid=$3; shift 3
  if [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]]; then return 0; fi
  local given=("$@")
  if [ "${EXPECT:-}" = origin ]; then current_args "$url" "$@"; set -- "${ARGS[@]}"; fi
  $LOAD_PIN h2load -t"${WRK_THREADS:-1}" -c"$CONNECTIONS" -m"${H2_STREAMS:-10}" -D"$WARMUP" "$@" "$url" >/dev/null
  local counted=0
  if [ -n "${EXPECT:-}" ]; then
    if [ "$EXPECT" = origin ]; then counted=$(forwarded "$ADMIN"); else counted=$(room_pages "$ADMIN"); fi
  fi
  local h="$OUT/$name.round$ROUND.h2load"
  local sw_before; sw_before=$(switches "$pid")
  local before; before=$(ticks "$pid")
  $LOAD_PIN h2load -t"${WRK_THREADS:-1}" -c"$CONNECTIONS" -m"${H2_STREAMS:-10}" -D"$DURATION" "$@" "$url" > "$h"
  local after; after=$(ticks "$pid")
  local sw_after; sw_after=$(switches "$pid")
  local requests rps mean cpu rss ok ctx
  requests=$(awk '/^requests:/ { print $8 }' "$h")
  ok=$(awk '/^status codes:/ { print $3 }' "$h")
  rps=$(awk '/^finished in/ { print $4 }' "$h")
  mean=$(to_ms "$(awk '/^time for request:/ { print $6 }' "$h")")
  cpu=$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v n="$requests" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }')
  rss=$(awk '/VmHWM/ { print $2 }' "/proc/$pid/status")
  ctx=$(per_request $((sw_after - sw_before)) "$requests")
  # Answers that arrive as h2load stops count in its status codes but not as done.
  if [ "$ok" -lt "$requests" ]; then
    echo "!! $name: $requests requests done, $ok with 2xx" >&2
    FAILED+=("$name (round $ROUND): $requests done, $ok 2xx")
  fi
  if [ -n "${EXPECT:-}" ]; then
    # Streams in flight when h2load stops are answered but not counted by it.
    SLACK=$((CONNECTIONS * ${H2_STREAMS:-10} * 2)) check_path "$name" "$EXPECT" "$ADMIN" "$counted" "$requests"
  fi
  if renewed_during "$name" "$url"; then
    MEASURED_AGAIN=1 measure_h2 "$name" "$url" "$pid" "${given[@]}"
    return
  fi
  printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$ROUND" "$name" "$rps" "$mean" "-" "$cpu" "$rss" "$PROXY_THREADS" "$ctx" >> "$RESULTS"
  echo "   $name: $rps req/s, mean $mean ms, $cpu us CPU/req, $ctx context switches/req, RSS $rss KiB"
}
