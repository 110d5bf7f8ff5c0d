#!/usr/bin/env bash
# A rolling update in the middle of a window: R ratelimit-svc replicas
# share one redis-server under a rule of 100 a minute (UNIT=minute) on
# KEYS keys user={k}; once they hold static shares of a minute, 5 s into
# it, a new replica starts and the last one stops (SIGTERM: it pushes,
# releases and leaves), as Kubernetes replaces a pod. UNIT=hour: 100 an
# hour, replaced 5 s after the replicas start, in the hour they found
# (they start together: its founders, registry.go). Then rlsbench sends workload A
# (keys in turn, C callers in a closed loop, round-robin over the live
# replicas) for D, within that minute. The new replica holds no share of
# the minute: without loans each of its requests of a key costs a round,
# with them only its first (a minute here; for an hour or a day rule the
# same holds for hours). Prints one line per run: req/s, p99, OVER_LIMIT,
# the replicas' decisions by mode and Redis CPU per 100k decisions.
# ADD=k: a scale-out instead, k new replicas started and none stopped
# (the old ones' decisions are then printed apart: without shrinking
# shares they released theirs of each key a newcomer touched).
# ALG=sliding_window or token_bucket: the rule's algorithm (default
# fixed_window); their shares begin a minute later, so the scale-out or
# the update comes 5 s into the second minute that begins a lease after
# the replicas joined (UNIT=minute only).
#
#   scripts/rolling-update.sh                       # D=20s KEYS=20000 C=64 R=2
#   BIN=/path/to/older/ratelimit-svc scripts/rolling-update.sh   # another build
#   RUNS=2 BINS="old:/tmp/old new:/tmp/new" scripts/rolling-update.sh  # alternately
#   ADD=2 scripts/rolling-update.sh                 # 2 → 4 replicas mid-minute
#   ADD=2 ALG=sliding_window scripts/rolling-update.sh
# Everything listens on free loopback ports; nothing is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
name=rolling-update
. scripts/lib.sh
D=${D:-20s}
KEYS=${KEYS:-20000}
C=${C:-64}
R=${R:-2}
RUNS=${RUNS:-1}
ADD=${ADD:-0}
UNIT=${UNIT:-minute}
ALG=${ALG:-fixed_window}
case "$UNIT" in minute | hour) ;; *)
  echo "$name: UNIT=$UNIT: want minute or hour" >&2
  exit 2
  ;;
esac
case "$UNIT/$ALG" in */fixed_window | minute/sliding_window | minute/token_bucket) ;; *)
  echo "$name: ALG=$ALG with UNIT=$UNIT: want fixed_window, or sliding_window or token_bucket by the minute" >&2
  exit 2
  ;;
esac
later=0 # minutes more to wait for the static shares: a sliding window's or a bucket's begin a minute later
[ "$ALG" = fixed_window ] || later=1
command -v redis-server >/dev/null || { echo "$name: redis-server not found" >&2; exit 1; }
work=$(mktemp -d)
pids=() # redis
rep=()  # the replicas running now, by index
cleanup() {
  for p in "${rep[@]}" "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/" ./cmd/ratelimit-svc ./cmd/rlsbench
BINS=${BINS:-"this:${BIN:-$work/ratelimit-svc}"}
cat >"$work/policy.yaml" <<EOF
domain: ru
descriptors:
  - key: user
    rate_limit: {unit: $UNIT, requests_per_unit: 100, algorithm: $ALG}
EOF
read -r -a ports < <(free_ports $((1 + 2 * (R + 1 + ADD))))
rport=${ports[0]}
rcli() { redis-cli -h 127.0.0.1 -p "$rport" "$@"; }
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
wait_port "$rport" $!

start() { # bin index: replica ru-index on its ports
  "$1" --redis-url "redis://127.0.0.1:$rport" --replica-id "ru-$2-$RANDOM" --config "$work/policy.yaml" \
    --grpc-addr "127.0.0.1:${ports[$((1 + 2 * $2))]}" --http-addr "127.0.0.1:${ports[$((2 + 2 * $2))]}" --log-level warn \
    >>"$work/replica$2.log" 2>&1 &
  rep[$2]=$!
  wait_port "${ports[$((1 + 2 * $2))]}" "${rep[$2]}"
  wait_port "${ports[$((2 + 2 * $2))]}" "${rep[$2]}"
}
modes() { # indexes: the summed ratelimit_decisions_total by mode, as JSON
  local urls=()
  for i in "$@"; do urls+=("http://127.0.0.1:${ports[$((2 + 2 * i))]}/metrics"); done
  python3 - "${urls[@]}" <<'EOF'
import json, re, sys, urllib.request
m = {}
for u in sys.argv[1:]:
    for line in urllib.request.urlopen(u, timeout=5).read().decode().splitlines():
        if line.startswith("ratelimit_decisions_total{"):
            labels, v = line.rsplit(" ", 1)
            k = re.search(r'mode="([^"]*)"', labels).group(1)
            m[k] = m.get(k, 0) + float(v)
print(json.dumps(m))
EOF
}
cpu() { rcli info cpu | awk -F: '/used_cpu_(user|sys):/ {s += $2} END {printf "%.3f", s}'; }

for ((run = 1; run <= RUNS; run++)); do
  for pair in $BINS; do
    label=${pair%%:*} bin=${pair#*:}
    rcli flushall >/dev/null
    rep=()
    for ((i = 0; i < R; i++)); do start "$bin" "$i"; done
    if [ "$UNIT" = minute ]; then # the first minute that begins a lease (3 s) after they all joined (the second: ALG), 5 s in
      python3 -c "import math, time; now = time.time(); time.sleep((math.floor((now + 4) / 60) + 1 + $later) * 60 - now + 5)"
    else
      sleep 5
    fi
    live=() old=() new=()
    if [ "$ADD" -gt 0 ]; then # a scale-out: ADD new replicas, none stopped
      for ((i = R; i < R + ADD; i++)); do start "$bin" "$i"; done
      sleep 1.5 # heartbeats: the others hear of them
      for ((i = 0; i < R; i++)); do old+=("$i"); done
      for ((i = R; i < R + ADD; i++)); do new+=("$i"); done
    else
      start "$bin" "$R"                       # the new replica
      kill "${rep[$((R - 1))]}"                # the one it replaces
      wait "${rep[$((R - 1))]}" 2>/dev/null || true
      sleep 1.5                                # heartbeats: the others hear it gone
      for ((i = 0; i < R - 1; i++)); do old+=("$i"); done
      new=("$R")
    fi
    live=("${old[@]}" "${new[@]}")
    addrs=$(for i in "${live[@]}"; do printf '127.0.0.1:%s,' "${ports[$((1 + 2 * i))]}"; done)
    m0=$(modes "${live[@]}") c0=$(cpu)
    check=(-limit 100 -per minute) # rlsbench checks per-minute windows; an hour's OVER_LIMIT alone says enough here
    [ "$UNIT" = minute ] && [ "$ALG" != token_bucket ] || check=() # a bucket may admit up to twice its rate in a minute
    "$work/rlsbench" -domain ru -c "$C" -d "$D" -json -addr "${addrs%,}" -descriptor 'user={k}' -keys "$KEYS" \
      "${check[@]}" >"$work/r.json" 2>>"$work/rlsbench.log" || true
    m1=$(modes "${live[@]}") c1=$(cpu)
    newm=$(modes "${new[@]}") oldm=$(modes "${old[@]}")
    python3 - "$label" "$work/r.json" "$m0" "$m1" "$c0" "$c1" "$newm" "$oldm" <<'EOF'
import json, sys
label, rep, m0, m1, c0, c1, newm, oldm = sys.argv[1:]
d = json.load(open(rep)); m0, m1, newm, oldm = json.loads(m0), json.loads(m1), json.loads(newm), json.loads(oldm)
modes = {k: int(v - m0.get(k, 0)) for k, v in m1.items() if v - m0.get(k, 0)}
dec = sum(modes.values()) or d["requests"]
print(f'{label}: {d["throughput_rps"]:.0f} req/s, p99 {d["latency_us"]["p99"]/1000:.1f} ms, OVER_LIMIT {d["over_limit"]}, errors {d["errors"]}; '
      f'decisions {modes}; the new replicas {dict((k, int(v)) for k, v in newm.items() if v)}; '
      f'the old ones (since they started) {dict((k, int(v)) for k, v in oldm.items() if v)}; '
      f'Redis CPU {(float(c1) - float(c0)) * 1e3 * 1e5 / dec:.0f} ms /100k decisions')
EOF
    for p in "${rep[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${rep[@]}"; do wait "$p" 2>/dev/null || true; done
  done
done
