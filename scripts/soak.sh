#!/usr/bin/env bash
# Soak: two ratelimit-svc replicas sharing one redis-server under a mixed
# RLS and ext_proc load for D, with Redis stopped twice and restarted once.
# Prints what has to stay flat or hold: each replica's RSS and goroutines,
# the gRPC errors of both loads, every limit checked against its answers,
# the CPU used, and what the replicas logged about Redis.
#
# Load, open loop, round-robin over both replicas, for D:
# - rlsbench, RLS_RATE/s: user={k} over 10 000 keys drawn from a Zipf law
#   (s = 1.1), 100/minute each: the hot keys go far over, the tail stays
#   under; checked per key and Unix minute.
# - rlsbench, HOT_RATE/s: one key hot=h at 50/second: checked per second.
# - soakload, EP_RATE/s: ext_proc downstream role (x-resil-role:
#   downstream), a buffered JSON body naming target soak (max_concurrent
#   12), a 200 event stream of 4 chunks 20 ms apart; the most requests
#   admitted at once is checked against the cap.
# Redis (times scaled to D; for D=10m): SIGSTOP at 3:00, SIGCONT OUT
# (20 s) later; SIGKILL at 6:00 and a new empty redis-server on the same
# port OUT later. Every 10 s each replica's VmRSS and go_goroutines (its
# /metrics) are sampled. Flat means: at the end, RSS at most 25 % and
# goroutines at most 50 above their value after warm-up (a minute, or
# D/5); less is no leak (the heap grows to the GC floor, 64 MiB, first).
# Everything runs on free loopback ports and is stopped at exit.
#
#   scripts/soak.sh                # D=10m
#   D=1m scripts/soak.sh           # a quick check
#   CHAOS=none D=1m scripts/soak.sh   # the same load, Redis left alone
#   RLS_RATE=1000 HOT_RATE=200 EP_RATE=100 D=10m scripts/soak.sh   # the defaults
set -euo pipefail
cd "$(dirname "$0")/.."
name=soak
. scripts/lib.sh
D=${D:-10m}
RLS_RATE=${RLS_RATE:-1000}
HOT_RATE=${HOT_RATE:-200}
EP_RATE=${EP_RATE:-100}
CHAOS=${CHAOS:-both} # both; stop or kill: that outage only; none: a baseline
case $CHAOS in both | stop | kill | none) ;; *) echo "soak: CHAOS=$CHAOS: want both, stop, kill or none" >&2; exit 1 ;; esac

case $D in
*m) secs=$((${D%m} * 60)) ;;
*s) secs=${D%s} ;;
*) secs=$D ;;
esac
[[ $secs =~ ^[0-9]+$ && $secs -ge 30 ]] || { echo "soak: D=$D: want whole seconds or minutes, at least 30s" >&2; exit 1; }
out=$((secs / 10 < 20 ? secs / 10 : 20)) # how long each outage lasts
OUT=${OUT:-$out}
stop_at=$((secs * 3 / 10))
kill_at=$((secs * 6 / 10))
warm=$((secs / 5 < 60 ? secs / 5 : 60))

command -v redis-server >/dev/null || { echo "soak: redis-server not found" >&2; exit 1; }
work=$(mktemp -d)
pids=() # everything started, in order; the current Redis is $redis
redis=
cleanup() {
  [ -n "$redis" ] && kill -CONT "$redis" 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go build -o "$work/" ./cmd/ratelimit-svc ./cmd/rlsbench ./cmd/soakload
mkdir "$work/config"
cat >"$work/config/soak.yaml" <<'EOF'
domain: soak
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 50}
EOF
cat >"$work/config/targets.yaml" <<'EOF'
targets:
  soak:
    provider: mock
    cluster: mock
    max_concurrent: 12
EOF

# Seven free loopback ports: Redis, then gRPC, HTTP and debug of each
# replica.
read -r -a ports < <(free_ports 7)
rport=${ports[0]}
grpc_addr() { echo "127.0.0.1:${ports[$((1 + 3 * $1))]}"; }
http_addr() { echo "127.0.0.1:${ports[$((2 + 3 * $1))]}"; }
debug_addr() { echo "127.0.0.1:${ports[$((3 + 3 * $1))]}"; }

start_redis() {
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >>"$work/redis.log" 2>&1 &
  redis=$!
  pids+=("$redis")
  wait_port "$rport" "$redis"
}
cpu_ticks() { # pid → utime+stime in clock ticks (0 once it is gone)
  awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0
}

start_redis
reps=()
for i in 0 1; do
  "$work/ratelimit-svc" --config "$work/config" --redis-url "redis://127.0.0.1:$rport" --replica-id "soak-$i" \
    --grpc-addr "$(grpc_addr $i)" --http-addr "$(http_addr $i)" --debug-addr "$(debug_addr $i)" \
    >"$work/replica$i.log" 2>&1 &
  reps+=($!)
  pids+=($!)
done
for i in 0 1; do
  wait_port "${ports[$((1 + 3 * i))]}" "${reps[$i]}"
  wait_port "${ports[$((2 + 3 * i))]}" "${reps[$i]}"
done
addrs="$(grpc_addr 0),$(grpc_addr 1)"
rep_ticks0=("$(cpu_ticks "${reps[0]}")" "$(cpu_ticks "${reps[1]}")")
redis_ticks=$(( -$(cpu_ticks "$redis") )) # Redis's CPU over the run, summed over its instances

t0=${EPOCHREALTIME/./}
"$work/rlsbench" -addr "$addrs" -domain soak -descriptor 'user={k}' -keys 10000 -zipf 1.1 \
  -rate "$RLS_RATE" -c 64 -d "${secs}s" -limit 100 -per minute -json >"$work/zipf.json" 2>"$work/zipf.err" &
loads=($!)
"$work/rlsbench" -addr "$addrs" -domain soak -descriptor 'hot=h' -keys 1 \
  -rate "$HOT_RATE" -c 16 -d "${secs}s" -limit 50 -per second -json >"$work/hot.json" 2>"$work/hot.err" &
loads+=($!)
"$work/soakload" -addr "$addrs" -model soak -rate "$EP_RATE" -chunks 4 -gap 20ms -cap 12 \
  -d "${secs}s" -every 10s >"$work/extproc.json" 2>"$work/extproc.err" &
loads+=($!)
pids+=("${loads[@]}")

elapsed() { echo $(((${EPOCHREALTIME/./} - t0) / 1000000)); }
sample() { # t: one line per replica: t replica rss_kB goroutines
  for i in 0 1; do
    local rss g
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/${reps[$i]}/status" 2>/dev/null || echo -1)
    g=$(curl -s -m 5 "http://$(http_addr $i)/metrics" | awk '$1 == "go_goroutines" {print $2}')
    echo "$1 $i ${rss:--1} ${g:--1}" >>"$work/samples"
  done
}
event() {
  echo "${EPOCHREALTIME%.*} $*" >>"$work/marks"
  echo "$(date -u +%T) t=$(elapsed)s $*" | tee -a "$work/events" >&2
}

: >"$work/samples"
: >"$work/events"
: >"$work/marks"
event "start: $(git describe --always --dirty 2>/dev/null || echo unknown), D=${secs}s CHAOS=$CHAOS RLS_RATE=$RLS_RATE HOT_RATE=$HOT_RATE EP_RATE=$EP_RATE; Redis pid $redis on :$rport"
next=0 phase=0
while :; do
  t=$(elapsed)
  if ((t >= next)); then
    sample "$t"
    next=$((next + 10))
  fi
  [ "$CHAOS" = none ] && phase=9
  [ "$CHAOS" = kill ] && ((phase < 2)) && phase=2
  [ "$CHAOS" = stop ] && ((phase == 2)) && phase=9
  case $phase in
  0) ((t >= stop_at)) && { kill -STOP "$redis"; event "Redis SIGSTOP"; phase=1; } ;;
  1) ((t >= stop_at + OUT)) && { kill -CONT "$redis"; event "Redis SIGCONT"; phase=2; } ;;
  2) ((t >= kill_at)) && {
    redis_ticks=$((redis_ticks + $(cpu_ticks "$redis")))
    kill -KILL "$redis"
    wait "$redis" 2>/dev/null || true
    event "Redis SIGKILL"
    phase=3
  } ;;
  3) ((t >= kill_at + OUT)) && {
    start_redis
    redis_ticks=$((redis_ticks - $(cpu_ticks "$redis")))
    event "new redis-server pid $redis on :$rport"
    phase=4
  } ;;
  esac
  ((t >= secs)) && break
  sleep 1
done
for p in "${loads[@]}"; do wait "$p" || event "load pid $p exited $?"; done
sample "$(elapsed)"
redis_ticks=$((redis_ticks + $(cpu_ticks "$redis")))
rep_ticks1=("$(cpu_ticks "${reps[0]}")" "$(cpu_ticks "${reps[1]}")")
for i in 0 1; do curl -s -m 5 "http://$(http_addr $i)/metrics" >"$work/metrics$i"; done
event "loads done"

cat >"$work/report.py" <<'PY'
import json, os, re, sys, time

work, secs, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hz = os.sysconf("SC_CLK_TCK")
ticks = dict(a.split("=") for a in sys.argv[4:])
load = lambda n: json.load(open(os.path.join(work, n)))

print("### Timeline (UTC, t from the start of the load)\n")
print("```")
print(open(os.path.join(work, "events")).read().rstrip())
print("```\n")

samples = {}
for line in open(os.path.join(work, "samples")):
    t, i, rss, g = line.split()
    samples.setdefault(int(i), []).append((int(t), int(rss), int(float(g))))
print(f"### RSS and goroutines, sampled every 10 s (warm-up: first {warm} s)\n")
print("Flat: at the last sample under load, RSS at most 25 % and goroutines at most 50 above the first")
print("sample after warm-up. The last column is once the loads have ended.\n")
print("| replica | series | start | after warm-up | middle | end of load | min–max under load after warm-up | flat | after the load |")
print("|---|---|---|---|---|---|---|---|---|")
for i, s in sorted(samples.items()):
    under = [x for x in s if x[0] < secs] or s
    start, end, done = s[0], under[-1], s[-1]
    after = [x for x in under if x[0] >= warm] or [end]
    mid = min(s, key=lambda x: abs(x[0] - secs / 2))
    w = after[0]
    for col, name, ok in ((1, "RSS MiB", lambda a, b: 0 <= b <= 1.25 * a),
                          (2, "goroutines", lambda a, b: 0 <= b <= a + 50)):
        f = (lambda v: f"{v / 1024:.1f}") if col == 1 else str
        lo, hi = min(x[col] for x in after), max(x[col] for x in after)
        print(f"| {i} | {name} | {f(start[col])} (t={start[0]}) | {f(w[col])} (t={w[0]}) | {f(mid[col])} (t={mid[0]}) "
              f"| {f(end[col])} (t={end[0]}) | {f(lo)}–{f(hi)} | {'yes' if ok(w[col], end[col]) else 'NO'} "
              f"| {f(done[col])} (t={done[0]}) |")

zipf, hot, ep = load("zipf.json"), load("hot.json"), load("extproc.json")
print("\n### Answers and gRPC errors\n")
print("| load | sent | ok | over limit / local reply | gRPC errors | by code | latency p50 / p99 / max |")
print("|---|---|---|---|---|---|---|")
for name, r in (("RLS user={k} Zipf", zipf), ("RLS hot=h", hot)):
    l = r["latency_us"]
    print(f'| {name} | {r["requests"]} | {r["ok"]} | {r["over_limit"]} | {r["errors"]} | {r.get("errors_by_code") or "–"} '
          f'| {l["p50"] / 1000:.2f} / {l["p99"] / 1000:.2f} / {l["max"] / 1000:.2f} ms |')
replies = {k: v for k, v in ep["answers"].items() if k.startswith("reply")}
errs = {k[6:]: v for k, v in ep["answers"].items() if k.startswith("error")}
d = ep["decision_ms"]
print(f'| ext_proc downstream | {ep["sent"]} (+{ep["skipped"]} skipped) | {ep["answers"].get("ok", 0)} | {replies or "–"} '
      f'| {ep["errors"]} | {errs or "–"} | decision {d["p50"]:.2f} / {d["p99"]:.2f} / {d["max"]:.2f} ms |')

print("\n### Limits\n")
print("By send time, and surely (answers that came in the window they were sent in; a denial only where")
print("the window saw at most the limit even with the answers sent before it): see rlsbench's limit check.\n")
print("| limit | keys with traffic | keys sent over | keys admitted over by send time | surely (must be 0) | windows over | admitted beyond | keys denied under by send time | surely (target 0) | windows surely denied under | answers surely denied under | most admitted in a window |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, r in (("user={k}: 100/minute", zipf), ("hot=h: 50/second", hot)):
    a = r["accuracy"]["limit"]
    print(f'| {name} | {a["keys"]} | {a["keys_offered_over_limit"]} | {a["keys_over_limit"]} | {a["keys_surely_over"]} | {a["key_windows_over_limit"]} '
          f'| {a["admitted_over_limit"]} | {a["keys_denied_under_limit"]} | {a["keys_surely_denied_under"]} | {a["key_windows_surely_denied_under"]} '
          f'| {a["surely_denied_under"]} | {a["max_admitted"]} ({a["max_key"]}, window from '
          f'{time.strftime("%H:%M:%S", time.gmtime(a["max_window_unix"]))}) |')
    if a.get("surely_over_key"):
        print(f'|  surely over, the first: {a["surely_over_key"]} admitted {a["surely_over_admitted"]} in the window from '
              f'{time.strftime("%H:%M:%S", time.gmtime(a["surely_over_window_unix"]))} | | | | | | | | | | | |')
print(f'| ext_proc soak: max_concurrent 12 | 1 | – | {1 if ep["admits_over_cap"] else 0} | – | admits over the cap: {ep["admits_over_cap"]} '
      f'| – | – | – | – | – | {ep["max_admitted_at_once"]} at once |')
# The hot key's seconds by phase: in an outage (Redis stopped or gone),
# the 10 s after one, and the rest. The bound in an outage is L + N
# (50 + 2 replicas) in any second.
marks = [l.split(" ", 1) for l in open(os.path.join(work, "marks"))]
at = lambda text: [int(u) for u, m in marks if m.startswith(text)]
outages = list(zip(at("Redis SIGSTOP"), at("Redis SIGCONT"))) + list(zip(at("Redis SIGKILL"), at("new redis-server")))
def phase(u):
    if any(a <= u <= b for a, b in outages):
        return "outage"
    if any(b < u <= b + 10 for a, b in outages):
        return "10 s after"
    return "otherwise"
rows = [s for s in hot["accuracy"]["seconds"] if 0 < s["offset"] < secs - 1]  # whole seconds only
print("\nhot=h by second (whole seconds of the run; a request sent just before a second's end may be decided in the next):\n")
print("| phase | seconds | admitted min / median / max | seconds over 50 | over 52 (L + N) | admitted beyond 50 |")
print("|---|---|---|---|---|---|")
for ph in ("otherwise", "outage", "10 s after"):
    a = sorted(s["max_key_admitted"] for s in rows if phase(s["unix"]) == ph)
    if a:
        print(f"| {ph} | {len(a)} | {a[0]} / {a[len(a) // 2]} / {a[-1]} | {sum(x > 50 for x in a)} | {sum(x > 52 for x in a)} "
              f"| {sum(x - 50 for x in a if x > 50)} |")
big = [(s["offset"], s["max_key_admitted"], phase(s["unix"])) for s in rows if s["max_key_admitted"] > 52]
if big:
    print("\nhot=h over 52: " + ", ".join(f"second {o}: {n} ({p})" for o, n, p in big))

cpu = {"replica 0": int(ticks["r0"]) / hz, "replica 1": int(ticks["r1"]) / hz, "redis-server": int(ticks["redis"]) / hz}
for name, r in (("rlsbench Zipf", zipf), ("rlsbench hot", hot)):
    cpu[name] = sum(u.get("cpu_seconds", 0) for u in r["cpu"] if u.get("label") == "rlsbench")
cpu["soakload"] = ep["cpu_seconds"]
print(f"\n### CPU over the {secs} s (user+system)\n")
print("| " + " | ".join(cpu) + " | total | cores |")
print("|" + "---|" * (len(cpu) + 2))
total = sum(cpu.values())
print("| " + " | ".join(f"{v:.1f} s" for v in cpu.values()) + f" | {total:.1f} s | {total / secs:.2f} |")

print("\n### Replicas' metrics at the end\n")
for i in (0, 1):
    modes, fails = {}, 0.0
    for line in open(os.path.join(work, f"metrics{i}")):
        if line.startswith("ratelimit_decisions_total{"):
            m = re.search(r'mode="([^"]*)"', line)
            k = m.group(1) if m else "?"
            modes[k] = modes.get(k, 0) + float(line.rsplit(" ", 1)[1])
        elif line.startswith("ratelimit_sync_failures_total"):
            fails += float(line.rsplit(" ", 1)[1])
    print(f"- replica {i}: decisions by mode " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(modes.items()))
          + f"; sync failures {fails:.0f}")

print("\n### What the replicas logged about Redis\n")
print("```")
other = {}
for i in (0, 1):
    for line in open(os.path.join(work, f"replica{i}.log")):
        try:
            e = json.loads(line)
        except ValueError:  # a library's own log line: drop its time stamp
            key = re.sub(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ", "", line.strip())
            key = re.sub(r"\d+\.\d+\.\d+\.\d+:\d+", "ADDR", key)[:100]
            other[key] = other.get(key, 0) + 1
            continue
        msg = e.get("msg", "")
        if "store unreachable" in msg or "reachable again" in msg:
            extra = {k: v for k, v in e.items() if k not in ("time", "level", "msg", "component")}
            print(f'{e["time"][11:23]} replica {i} {e["level"]} {msg.split(":")[0]} {extra}')
        elif e.get("level") in ("WARN", "ERROR"):
            key = f'{e["level"]} {msg[:80]}'
            other[key] = other.get(key, 0) + 1
print("```")
if other:
    print("\nOther warnings and errors (count, both replicas):\n")
    for k, n in sorted(other.items(), key=lambda x: -x[1])[:15]:
        print(f"- {n}× {k}")
PY
python3 "$work/report.py" "$work" "$secs" "$warm" "r0=$((rep_ticks1[0] - rep_ticks0[0]))" \
  "r1=$((rep_ticks1[1] - rep_ticks0[1]))" "redis=$redis_ticks"
echo
echo "ext_proc load by 10 s (soakload -every):"
sed 's/^/    /' "$work/extproc.err"
