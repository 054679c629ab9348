#!/usr/bin/env bash
# What the operator console costs the admin listener: the CPU the vestibule process uses with
# no console open and with 10 open consoles (each a /console/stream feed, one message a second),
# and the memory each open feed holds (60 feeds, the RSS difference divided by 60).
#
#   benches/console.sh                 # builds release, ~75 s of measurement
#   SECONDS_EACH=60 benches/console.sh
#
# Everything runs on loopback; every process it starts is stopped by pid. Prints a small table.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECONDS_EACH=${SECONDS_EACH:-20}
BIN=${BIN:-$ROOT/target/release/vestibule}
[ -n "${NO_BUILD:-}" ] || (cd "$ROOT" && cargo build --release --quiet --bin vestibule)

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PROXY=$(port); ADMIN=$(port); ORIGIN=$(port)
TOKEN=console-bench-token-0123456789
HASH=$(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)
cat > "$WORK/keys.toml" <<EOF
active = "k1"
[ring]
k1 = "$("$BIN" keygen)"
EOF
chmod 600 "$WORK/keys.toml"
cat > "$WORK/v.toml" <<EOF
[server]
listen = ["127.0.0.1:$PROXY"]
threads = 1
[admin]
listen = "127.0.0.1:$ADMIN"
operators = [{ name = "bench", token_sha256 = "$HASH", role = "operator" }]
[upstream]
peers = ["127.0.0.1:$ORIGIN"]
[[room]]
name = "sale"
paths = ["/sale"]
admission = "fifo"
new_users_per_minute = 100
total_active_users = 1000
[[room]]
name = "launch"
paths = ["/launch"]
admission = "random"
new_users_per_minute = 50
[[room]]
name = "default"
allow_percentage = 50
[[rate_limit]]
name = "burst"
key = ["client_ip"]
limit = 10
window = "10s"
EOF
(cd "$WORK" && exec "$BIN" demo --config v.toml >"$WORK/log" 2>&1) &
PID=$!
PIDS+=("$PID")
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$ADMIN/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fs "http://127.0.0.1:$ADMIN/healthz" >/dev/null || { cat "$WORK/log"; exit 1; }

ticks() { awk '{print $14+$15}' "/proc/$PID/stat"; }
rss_kib() { awk '/VmRSS/{print $2}' "/proc/$PID/status"; }
HZ=$(getconf CLK_TCK)
cpu_over() { # CPU % of one core over SECONDS_EACH
  local a b
  a=$(ticks); sleep "$SECONDS_EACH"; b=$(ticks)
  python3 -c "print(f'{($b-$a)/$HZ/$SECONDS_EACH*100:.2f}')"
}
feeds() { # open N feeds in the background, each read by curl and thrown away
  local n=$1 i
  for i in $(seq 1 "$n"); do
    curl -sN --max-time 600 -H "Authorization: Bearer $TOKEN" \
      "http://127.0.0.1:$ADMIN/console/stream" >/dev/null 2>&1 &
    PIDS+=("$!")
    FEED_PIDS+=("$!")
  done
}
stop_feeds() {
  for p in "${FEED_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  FEED_PIDS=()
  sleep 2
}
open_feeds() { curl -fs -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$ADMIN/status" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["admin"]["console_streams"])'; }

sleep 2
idle=$(cpu_over)
FEED_PIDS=()
feeds 10
sleep 2
ten_open=$(open_feeds)
ten=$(cpu_over)
stop_feeds
before=$(rss_kib)
feeds 60
sleep 3
sixty_open=$(open_feeds)
after=$(rss_kib)
stop_feeds
per_feed=$(python3 -c "print(f'{($after-$before)/60:.1f}')")

echo "| what | figure |"
echo "| --- | ---: |"
echo "| CPU, no console open (% of one core) | $idle |"
echo "| CPU, 10 open consoles ($ten_open feeds, % of one core) | $ten |"
echo "| RSS before 60 feeds (KiB) | $before |"
echo "| RSS with 60 feeds ($sixty_open open, KiB) | $after |"
echo "| memory per open feed (KiB) | $per_feed |"
