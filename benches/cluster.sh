#!/usr/bin/env bash
# What a cluster costs: the allowed path of a capacity room on a node with the
# in-process store against a node of a two-node cluster on Redis (the request path must not
# touch the store: goal within 2 %), and what the measured node costs the store per second:
# round trips, bytes, and Redis CPU.
#
#   benches/cluster.sh                     # 3 rounds x 3 scenarios x 10 s, sync every 1 s
#   ROUNDS=5 DURATION=20 SYNC=250ms benches/cluster.sh
#
# Needs wrk and redis-server (apt-get install wrk redis-server). Pins like load.sh: the proxy
# under test on CPU 0, wrk, the origin, Redis and the idle peer node on the others.
set -euo pipefail
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONNECTIONS=${CONNECTIONS:-50}
SYNC=${SYNC:-1s}
CLK_TCK=$(getconf CLK_TCK)
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install -y wrk" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server is needed: apt-get install -y redis-server" >&2; exit 1; }
# shellcheck source=benches/common.sh
source "$(dirname "$0")/common.sh"
build
start_origin

REDIS_PORT=$(free_port)
$LOAD_PIN redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT" >"$OUT/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
wait_port "$REDIS_PORT"

# A capacity room that admits everyone: every request takes the allowed path and counts.
CAPACITY='[[room]]
pages = "pages"
admission = "fifo"
new_users_per_minute = 10000000
total_active_users = 10000000'
CLUSTER="$CAPACITY
[cluster]
store = \"redis\"
redis = [\"redis://127.0.0.1:$REDIS_PORT/0\"]
sync_interval = \"$SYNC\""

RESULTS="$OUT/results.tsv"
printf "round\tscenario\trps\tp50_ms\tp99_ms\tcpu_us_per_req\trss_kib\tthreads\tctx_per_req\n" > "$RESULTS"
STORE="$OUT/store.tsv"
printf "round\tsyncs_per_s\tsent_bytes_per_s\treceived_bytes_per_s\tredis_cpu_pct\treq_per_s\n" > "$STORE"

start_plain
start_vestibule local "$CAPACITY"; LOCAL_PID=$VPID; LOCAL_PORT=$VPORT; LOCAL_ADMIN=$VADMIN
start_vestibule node_a "$CLUSTER"; NODE_PID=$VPID; NODE_PORT=$VPORT; NODE_ADMIN=$VADMIN
# Its peer, idle but syncing: the measured node shares its room with one more live node.
write_vestibule node_b "$CLUSTER"
$LOAD_PIN "$BIN" --config "$OUT/node_b/vestibule.toml" >"$OUT/node_b/vestibule.log" 2>&1 &
PIDS+=("$!")
wait_port "$VPORT"
for _ in $(seq 1 50); do
  curl -s "http://127.0.0.1:$NODE_ADMIN/metrics" | grep -q '^vestibule_cluster_nodes 2' && break
  sleep 0.2
done
curl -s "http://127.0.0.1:$NODE_ADMIN/metrics" | grep -q '^vestibule_cluster_nodes 2' ||
  { echo "the two nodes did not see each other" >&2; exit 1; }
# An allow cookie of the capacity room (the same key ring on every node).
COOKIE=$(curl -s -D - -o /dev/null "http://127.0.0.1:$LOCAL_PORT/" | tr -d '\r' | awk -F': ' 'tolower($1) == "set-cookie" { split($2, a, ";"); print a[1] }')
[ -n "$COOKIE" ] || { echo "no cookie from vestibule" >&2; exit 1; }

metric() { # admin-port series
  curl -s "http://127.0.0.1:$1/metrics" | awk -v s="$2" '$1 == s { print $2 }'
}

echo "== origin: $ORIGIN_KIND; Redis on $REDIS_PORT; sync every $SYNC; $CONNECTIONS connections, $ROUNDS rounds of ${DURATION}s"
for ROUND in $(seq 1 "$ROUNDS"); do
  echo "== round $ROUND/$ROUNDS"
  measure plain_proxy "http://127.0.0.1:$PLAIN_PORT/" "$PLAIN_PID"
  EXPECT=origin ADMIN=$LOCAL_ADMIN measure capacity_allowed_local "http://127.0.0.1:$LOCAL_PORT/" "$LOCAL_PID" -H "Cookie: $COOKIE"
  syncs0=$(metric "$NODE_ADMIN" vestibule_store_sync_seconds_count)
  sent0=$(metric "$NODE_ADMIN" 'vestibule_store_bytes_total{direction="sent"}')
  recv0=$(metric "$NODE_ADMIN" 'vestibule_store_bytes_total{direction="received"}')
  redis0=$(ticks "$REDIS_PID")
  t0=$(date +%s.%N)
  EXPECT=origin ADMIN=$NODE_ADMIN measure capacity_allowed_cluster "http://127.0.0.1:$NODE_PORT/" "$NODE_PID" -H "Cookie: $COOKIE"
  t1=$(date +%s.%N)
  syncs1=$(metric "$NODE_ADMIN" vestibule_store_sync_seconds_count)
  sent1=$(metric "$NODE_ADMIN" 'vestibule_store_bytes_total{direction="sent"}')
  recv1=$(metric "$NODE_ADMIN" 'vestibule_store_bytes_total{direction="received"}')
  redis1=$(ticks "$REDIS_PID")
  rps=$(awk -v r="$ROUND" '$1 == r && $2 == "capacity_allowed_cluster" { print $3 }' "$RESULTS")
  awk -v r="$ROUND" -v s=$((syncs1 - syncs0)) -v a=$((sent1 - sent0)) -v b=$((recv1 - recv0)) \
      -v c=$((redis1 - redis0)) -v hz="$CLK_TCK" -v t0="$t0" -v t1="$t1" -v rps="$rps" \
      'BEGIN { d = t1 - t0; printf "%s\t%.2f\t%.0f\t%.0f\t%.2f\t%s\n", r, s / d, a / d, b / d, 100 * c / hz / d, rps }' >> "$STORE"
  tail -1 "$STORE" | awk -F'\t' '{ printf "   store: %s syncs/s, %s B/s sent, %s B/s received, Redis CPU %s %% (node at %s req/s)\n", $2, $3, $4, $5, $6 }'
done

echo
echo "Machine: $(nproc) CPUs, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo); $(uname -sr)"
python3 - "$RESULTS" "$STORE" <<'PY' | tee "$OUT/table.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
store = list(csv.DictReader(open(sys.argv[2]), delimiter="\t"))
rounds = {}
for r in rows:
    rounds.setdefault(r["round"], {})[r["scenario"]] = r
def med(name, key):
    return statistics.median(float(v[name][key]) for v in rounds.values())
def ratio(a, b):
    return statistics.median(float(v[a]["cpu_us_per_req"]) / float(v[b]["cpu_us_per_req"]) for v in rounds.values())
print("| scenario | req/s | p50 ms | p99 ms | CPU us/req | vs plain | vs local |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for name in ["plain_proxy", "capacity_allowed_local", "capacity_allowed_cluster"]:
    vs_local = f"{ratio(name, 'capacity_allowed_local'):.3f}x" if name != "plain_proxy" else "-"
    print(f"| {name} | {med(name, 'rps'):.0f} | {med(name, 'p50_ms'):.3f} | {med(name, 'p99_ms'):.3f} | {med(name, 'cpu_us_per_req'):.1f} | {ratio(name, 'plain_proxy'):.2f}x | {vs_local} |")
m = lambda k: statistics.median(float(s[k]) for s in store)
print(f"\nThe measured node's store traffic (medians of {len(store)} rounds, at {m('req_per_s'):.0f} req/s): "
      f"{m('syncs_per_s'):.2f} round trips/s, {m('sent_bytes_per_s'):.0f} B/s sent, "
      f"{m('received_bytes_per_s'):.0f} B/s received; Redis CPU {m('redis_cpu_pct'):.2f} % (two nodes syncing).")
PY
echo "Goal: capacity_allowed_cluster within 2 % of capacity_allowed_local (CPU per request)."
echo "Raw results in $OUT"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "!! these runs did not measure what their row claims:" >&2
  printf '   %s\n' "${FAILED[@]}" >&2
  exit 1
fi
