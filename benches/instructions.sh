#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind: repeatable whatever else the
# machine is doing, where wall-clock CPU time on a shared machine drifts by 10-20 %. Counts
# user-space instructions only (the kernel's share of proxying is not in it).
#
#   benches/instructions.sh            # N1=1000, N2=3000 requests per scenario
#   ONLY='waiting' benches/instructions.sh   # the plain proxy and the scenarios matching a regex
#   PROXY_THREADS=2 CLIENTS=2 benches/instructions.sh   # 2 worker threads, 2 connections at once
#
# Valgrind runs one thread at a time, so counts at 2 threads show the work that grows with
# threads (wake-ups, hand-offs between threads, lock and pool paths), not what cache lines
# shared between cores cost.
#
# Each proxy runs under callgrind twice, serving N1 and then N2 keep-alive requests (from one
# connection unless CLIENTS says more); (instructions(N2) - instructions(N1)) / (N2 - N1) cancels
# start-up and shutdown.
set -euo pipefail
N1=${N1:-1000}
N2=${N2:-3000}
command -v valgrind >/dev/null || { echo "valgrind is needed: apt-get install -y valgrind" >&2; exit 1; }
# shellcheck source=benches/common.sh
source "$(dirname "$0")/common.sh"
build
start_origin
get_cookie "$CAPACITY_ROOM"
CAPACITY_COOKIE=$COOKIE
# A room with jwt = true, and an admitted visitor's two cookies (the room's and the JWT's): the
# allowed path where the JWT, verified once and then remembered, is the admission. (A build
# without JWTs, compared as a baseline, skips it.)
JWT_PEM=$OUT/jwt-bench.pem
JWT_ROOM="$ROOM
jwt = true"
rm -f "$JWT_PEM"
if "$BIN" keygen --jwt ES256 --out "$JWT_PEM" >/dev/null 2>&1; then
  JWT_KEY=$JWT_PEM get_cookie "${JWT_ROOM/allow_percentage = 50/allow_percentage = 100}"
  JWT_COOKIES=$COOKIE
  case $JWT_COOKIES in *waiting_room_jwt=*) ;; *) echo "no JWT cookie from a jwt room: $JWT_COOKIES" >&2; exit 1 ;; esac
fi
get_cookie

# Sends N sequential keep-alive requests (with optional headers) and reads every response;
# fails unless every answer took the path the scenario claims: the origin's ("origin"), or a
# room page vestibule wrote itself ("page").
drive() { # port n expect [header...]; CLIENTS connections share the n requests
  python3 - "$@" <<'PY'
import os, socket, sys, threading
port, n, expect, headers = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
clients = int(os.environ.get("CLIENTS", "1"))
ORIGIN_TEXT = (b"hello from the origin", b"demo origin")
# A client the proxy forwards keeps the cookie it is sent, like a browser: an allow token
# changes value once per allow_period (a capacity room's once a minute), and a client that kept
# presenting the old one would pay a renewal on every request after that. A page scenario
# measures new arrivals, which never send one back.
FOLLOW = expect == "origin"
errors = []

# TARGET: the path asked for ("/" unless set). With ENQUEUE (a queue API path), one request id
# is taken first and TARGET names it: an app asking after its place.
TARGET = os.environ.get("TARGET", "/")
if os.environ.get("ENQUEUE"):
    import json
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(("POST " + os.environ["ENQUEUE"] + " HTTP/1.1\r\nHost: bench\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").encode())
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    TARGET += json.loads(answer.split(b"\r\n\r\n", 1)[1])["request_id"]

def request(headers):
    return ("GET " + TARGET + " HTTP/1.1\r\nHost: bench\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode()

def client(n, headers):
    s = socket.create_connection(("127.0.0.1", port))
    req = request(headers)
    buf = b""
    for _ in range(n):
        s.sendall(req)
        while True:
            i = buf.find(b"\r\n\r\n")
            if i >= 0:
                length = 0
                for line in buf[:i].decode().split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                if len(buf) >= i + 4 + length:
                    head, body = buf[:i], buf[i + 4:i + 4 + length]
                    for line in head.decode().split("\r\n"):
                        if FOLLOW and line.lower().startswith("set-cookie:"):
                            value = line.split(":", 1)[1].strip().split(";")[0]
                            headers = [h for h in headers if not h.lower().startswith("cookie:")] + ["Cookie: " + value]
                            req = request(headers)
                    from_origin = any(t in body for t in ORIGIN_TEXT)
                    if not head.startswith(b"HTTP/1.1 200") or from_origin != (expect == "origin"):
                        raise RuntimeError(f"an answer did not take the {expect} path: {head[:200]!r}")
                    buf = buf[i + 4 + length:]
                    break
            data = s.recv(65536)
            if not data:
                raise RuntimeError("connection closed")
            buf += data

def run(n):
    try:
        client(n, list(headers))
    except Exception as e:
        errors.append(str(e))

threads = [threading.Thread(target=run, args=(n // clients + (k < n % clients),)) for k in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if errors:
    sys.exit(errors[0])
PY
}

total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done { gsub(",", "", $1); print $1; done = 1 }'; }

# Calls to epoll_wait in a callgrind file: each is the worker waiting for its sockets (both
# Tokio runtimes park there). About 2 a request (the client's next request, the origin's
# answer); a run with more was disturbed: every extra wake-up costs a few hundred instructions
# of timer wheel, clock and epoll, so it is counted and shown next to the instructions.
epoll_waits() {
  calls_to "$1" '^epoll_wait$'
}

# Calls in a callgrind file to the functions whose names match a regex.
calls_to() { # file regex
  python3 - "$1" "$2" <<'PY'
import re, sys
want = re.compile(sys.argv[2])
names, total, counting = {}, 0, False
with open(sys.argv[1], errors="replace") as f:
    for line in f:
        m = re.match(r"(c?)fn=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if m:
            if m.group(3) is not None:
                names[m.group(2)] = m.group(3)
            counting = m.group(1) == "c" and bool(want.search(names.get(m.group(2), "")))
        elif line.startswith("calls=") and counting:
            total += int(line[6:].split()[0])
            counting = False
print(total)
PY
}

# Timers Pingora armed on Tokio per request (its timeouts of 1 s and more, once
# `fast_timeout_to_tokio_threshold_seconds` is 0): what `--origin-timeouts` must add.
tokio_timers() { # name
  local a b timeout='FastOrTokioTimeout as pingora_timeout::ToTimeout>::timeout$'
  a=$(calls_to "$OUT/$1.$N1.callgrind" "$timeout")
  b=$(calls_to "$OUT/$1.$N2.callgrind" "$timeout")
  awk -v a="$a" -v b="$b" -v n=$(( N2 - N1 )) 'BEGIN { printf "%.2f", (b - a) / n }'
}

declare -A PER WAKES
measure() { # name kind(plain|vestibule) expect(origin|page) extra-config [header...]
  local name=$1 kind=$2 expect=$3 extra=$4; shift 4
  if [ -n "${ONLY:-}" ] && [ "$name" != plain_proxy ] && ! [[ "$name" =~ $ONLY ]]; then return; fi
  local counts=() waits=()
  for n in $N1 $N2; do
    local out="$OUT/$name.$n.callgrind"
    local vg=(valgrind --tool=callgrind --callgrind-out-file="$out")
    if [ "$kind" = plain ]; then
      local port; port=$(free_port)
      local flags=()
      read -ra flags <<<"$extra" # the plain proxy's extra config: its flags
      "${vg[@]}" "$PLAIN" "${flags[@]}" "127.0.0.1:$port" "127.0.0.1:$ORIGIN_PORT" "$PROXY_THREADS" >"$OUT/$name.$n.log" 2>&1 &
      local pid=$!; PIDS+=("$pid"); wait_port "$port"
    else
      start_vestibule "$name" "$extra" "${vg[@]}"
      local pid=$VPID port=$VPORT
    fi
    drive "$port" "$n" "$expect" "$@"
    kill -INT "$pid"; wait "$pid" 2>/dev/null || true
    counts+=("$(total "$out")")
    waits+=("$(epoll_waits "$out")")
  done
  PER[$name]=$(( (counts[1] - counts[0]) / (N2 - N1) ))
  WAKES[$name]=$(awk -v a="${waits[0]}" -v b="${waits[1]}" -v n=$(( N2 - N1 )) 'BEGIN { printf "%.2f", (b - a) / n }')
  echo "   $name: ${PER[$name]} instructions per request, ${WAKES[$name]} epoll waits per request"
}

echo "== callgrind, $N1 and $N2 requests per scenario over ${CLIENTS:-1} connection(s), proxy threads $PROXY_THREADS (origin: $ORIGIN_KIND)"
measure plain_proxy plain origin ""
# The plain proxy with vestibule's origin timeouts (read, write, the pool's idle one), which
# Pingora's default peer does not set: what those timers cost by themselves. The goals are
# against the default; this row says how much of vestibule's difference is its timeouts.
measure plain_proxy_origin_timeouts plain origin "--origin-timeouts"
if [ -n "${PER[plain_proxy_origin_timeouts]:-}" ]; then
  # The reference is only worth its row if the flag armed the timers vestibule arms (2.5 a
  # request: the origin's answer, and the pool's idle watch), and the default proxy none.
  timers_default=$(tokio_timers plain_proxy)
  timers_flag=$(tokio_timers plain_proxy_origin_timeouts)
  echo "   plain_proxy: $timers_default Tokio timers per request"
  echo "   plain_proxy_origin_timeouts: $timers_flag Tokio timers per request"
  awk -v t="$timers_flag" -v d="$timers_default" 'BEGIN { exit !(t >= 1.5 && d < 0.05) }' || {
    echo "plain_proxy --origin-timeouts armed no Tokio timers per request, or the default did" >&2
    exit 1
  }
fi
measure vestibule_allowed vestibule origin "$ROOM" "Cookie: $COOKIE"
measure vestibule_3_rules vestibule origin "$ROOM
$RULES" "Cookie: $COOKIE"
# The allowed path with its access line (buffered per thread, written to the log file every
# 100 ms): the line's cost is its difference from vestibule_allowed.
ACCESS_LOG=true measure vestibule_allowed_with_access_log vestibule origin "$ROOM" "Cookie: $COOKIE"
measure vestibule_waiting_page vestibule page "$ROOM"
measure vestibule_challenge_page vestibule page "$CHALLENGE_ROOM"
measure vestibule_capacity_allowed vestibule origin "$CAPACITY_ROOM" "Cookie: $CAPACITY_COOKIE"
if [ -n "${JWT_COOKIES:-}" ]; then
  JWT_KEY=$JWT_PEM measure vestibule_jwt_allowed vestibule origin "$JWT_ROOM" "Cookie: $JWT_COOKIES"
fi
# The queue API of a capacity room (api = true): the serving counter, and an app asking
# after a place the room let in (its request id checked, its marks read).
if [ -n "${JWT_COOKIES:-}" ]; then
  API_ROOM="$CAPACITY_ROOM
api = true"
  TARGET=/.vestibule/rooms/default/serving JWT_KEY=$JWT_PEM measure vestibule_api_serving vestibule page "$API_ROOM"
  ENQUEUE=/.vestibule/rooms/default/queue TARGET=/.vestibule/rooms/default/queue/ JWT_KEY=$JWT_PEM \
    measure vestibule_api_check_in vestibule page "$API_ROOM"
fi
# A bucket keyed by a header the client sends: that header costs a proxy on its own, so it is
# compared with the plain proxy fed the same header too.
measure plain_proxy_api_key_header plain origin "" "X-Api-Key: k-123"
measure vestibule_3_rules_api_key_header vestibule origin "$ROOM
$RULES_API_KEY" "Cookie: $COOKIE" "X-Api-Key: k-123"

{
  echo "| scenario | instructions/request | vs plain | reference | epoll waits/request |"
  echo "| --- | ---: | ---: | --- | ---: |"
  row() { # scenario reference
    [ -n "${PER[$1]:-}" ] && [ -n "${PER[$2]:-}" ] || return 0
    awk -v s="$1" -v n="${PER[$1]}" -v r="$2" -v p="${PER[$2]}" -v w="${WAKES[$1]}" \
      'BEGIN { printf "| %s | %d | %.2fx | %s | %s |\n", s, n, n / p, r, w }'
  }
  for s in plain_proxy vestibule_allowed vestibule_allowed_with_access_log vestibule_3_rules vestibule_waiting_page vestibule_challenge_page vestibule_capacity_allowed; do
    row "$s" plain_proxy
  done
  row vestibule_allowed_with_access_log vestibule_allowed
  row vestibule_jwt_allowed plain_proxy
  row vestibule_jwt_allowed vestibule_allowed
  row vestibule_api_serving plain_proxy
  row vestibule_api_check_in plain_proxy
  row plain_proxy_origin_timeouts plain_proxy
  row vestibule_allowed plain_proxy_origin_timeouts
  row vestibule_3_rules plain_proxy_origin_timeouts
  row plain_proxy_api_key_header plain_proxy
  row vestibule_3_rules_api_key_header plain_proxy
  row vestibule_3_rules_api_key_header plain_proxy_api_key_header
} | tee "$OUT/instructions.md"
