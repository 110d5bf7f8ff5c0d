#!/usr/bin/env bash
# Measures ShouldRateLimit against a no-op RLS (the floor) and ratelimit-svc,
# local-only and with Redis, in one run on one machine, with rlsbench; then
# the accuracy of 4 replicas sharing a 50/s limit at 5× load. Prints
# markdown tables. Everything listens on loopback; nothing is left running.
#
#   scripts/bench-rls.sh            # 5 s per cell, 3 interleaved runs
#   D=10s R=5 scripts/bench-rls.sh  # longer cells, more runs
set -euo pipefail
cd "$(dirname "$0")/.."
D=${D:-5s}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/" ./cmd/ratelimit-svc ./cmd/rlsbench
cat > "$work/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: shared
    rate_limit: {unit: second, requests_per_unit: 50}
EOF

wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }

"$work/rlsbench" serve-noop -addr 127.0.0.1:19081 >"$work/noop.log" 2>&1 & pids+=($!); noop=$!
"$work/ratelimit-svc" --config "$work/bench.yaml" --grpc-addr 127.0.0.1:19082 --http-addr 127.0.0.1:19180 \
  --log-level warn >"$work/local.log" 2>&1 & pids+=($!); local=$!
redis=""
if command -v redis-server >/dev/null; then
  redis-server --port 16379 --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 & pids+=($!); rpid=$!
  wait_port 16379
  for i in 0 1 2 3; do
    "$work/ratelimit-svc" --config "$work/bench.yaml" --grpc-addr "127.0.0.1:1909$i" --http-addr "127.0.0.1:1919$i" \
      --debug-addr "" --redis-url redis://127.0.0.1:16379 --replica-id "bench-$i" --log-level warn >"$work/redis$i.log" 2>&1 & pids+=($!)
    [ "$i" = 0 ] && redis=$!
  done
  wait_port 19093
fi
wait_port 19081; wait_port 19082

summary() { # file server-pid → "rps p50 p99 cpu-per-100k"
  python3 - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
cpu = next((c["cpu_seconds_per_100k_requests"] for c in d["cpu"] if str(c["pid"]) == sys.argv[2]), 0)
l = d["latency_us"]
print(f'{d["throughput_rps"]:.0f} {l["p50"]:.0f} {l["p99"]:.0f} {cpu:.3f} {d["errors"]}')
EOF
}

# Each cell runs R times, the servers interleaved, and reports medians:
# on a shared machine one run's ratio is noise. The order of the servers
# rotates from run to run, so none always follows the same one.
R=${R:-3}
targets=(noop local redis)
: >"$work/rows"
for keys in 1 10000; do
  for c in 1 16 64; do
    for r in $(seq "$R"); do
      for k in 0 1 2; do
        target=${targets[$(((k + r) % 3))]}
        case $target in
          noop) addr=127.0.0.1:19081; pid=$noop ;;
          local) addr=127.0.0.1:19082; pid=$local ;;
          redis) [ -n "$redis" ] || continue; addr=127.0.0.1:19090; pid=$redis ;;
        esac
        "$work/rlsbench" -addr "$addr" -domain bench -descriptor 'k={k}' -keys "$keys" -c "$c" -d "$D" \
          -pids "$pid" -json >"$work/out.json" 2>/dev/null
        echo "$keys $c $r $target $(summary "$work/out.json" "$pid")" >>"$work/rows"
      done
    done
  done
done
python3 - "$work/rows" "$R" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"Medians of {sys.argv[2]} interleaved runs per cell; ratios are to the no-op floor of the same run.")
print()
print("| keys | c | server | req/s | × floor | p50 µs | p99 µs | server CPU s /100k | × floor | errors |")
print("|---|---|---|---|---|---|---|---|---|---|")
cells = {}
for keys, c, r, target, rps, p50, p99, cpu, errs in rows:
    cells.setdefault((int(keys), int(c)), {}).setdefault(r, {})[target] = (float(rps), float(p50), float(p99), float(cpu), int(errs))
for (keys, c), runs in sorted(cells.items()):
    for target in ("noop", "local", "redis"):
        got = [run[target] for run in runs.values() if target in run]
        if not got:
            continue
        med = lambda i: statistics.median(g[i] for g in got)
        ratio = lambda i: statistics.median(run[target][i] / run["noop"][i] for run in runs.values() if target in run and run["noop"][i])
        print(f"| {keys} | {c} | {target} | {med(0):.0f} | {ratio(0):.2f} | {med(1):.0f} | {med(2):.0f} | {med(3):.2f} | {ratio(3):.2f} | {sum(g[4] for g in got)} |")
EOF

if [ -n "$redis" ]; then
  echo
  echo "Accuracy: 4 replicas sharing 50/s through Redis, 250/s offered open-loop, round-robin:"
  echo '```'
  "$work/rlsbench" -addr 127.0.0.1:19090,127.0.0.1:19091,127.0.0.1:19092,127.0.0.1:19093 -domain bench \
    -descriptor 'shared=one' -keys 1 -c 16 -rate 250 -d 10s >"$work/accuracy.txt" 2>"$work/accuracy.err" || true
  sed -n '/^accuracy/,$p' "$work/accuracy.txt"
  grep -q '^accuracy' "$work/accuracy.txt" || { echo "rlsbench reported no accuracy:"; tail -5 "$work/accuracy.err"; }
  echo '```'
fi
