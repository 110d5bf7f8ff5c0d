#!/usr/bin/env bash
# Many keys, each far below its limit: 1, 2 and 4 ratelimit-svc replicas
# sharing one redis-server against a no-op RLS (the floor), measured with
# rlsbench in one run on one machine. Prints markdown tables.
#
# Workload A: KEYS keys user={k} (100/minute each), C callers in a closed
# loop for D, requests round-robin over the replicas, keys in turn: no key
# comes near its limit, so every OVER_LIMIT is a wrong answer. Per replica
# count: throughput against the floor, latency, OVER_LIMIT, decisions by
# mode (the replicas' ratelimit_decisions_total), Redis commands and Redis
# CPU per 100k decisions. Beside the floor of one no-op RLS, each replica
# count has the floor of as many no-op servers, round-robin alike: the
# cost of N processes sharing the machine's cores, apart from the engine.
# Workload B: 4 replicas, 1 000 keys zipf={k} (10/second each) drawn from
# a Zipf law (s = 1.1, key 0 the most popular), C callers in a closed loop
# for D: the hot keys are far over their limit, the tail far under it.
# rlsbench checks every key and second: keys admitted over the limit (must
# be 0) and keys denied in a second in which they were sent at most their
# limit (the target is 0). Then the same load on 4 per-request counters
# (rlsbench serve-counter: INCRBY and EXPIRE per request, as
# envoyproxy/ratelimit on Redis) sharing the same redis-server, for the
# Redis CPU a decision costs there (COUNTER=0 leaves it out).
#
# The replicas are restarted and Redis flushed before each replica count.
# A replica holds a static share of a key's window only from the first
# window that begins a lease (3 s) after it joined; until then the keys
# are shared by credit alone (a sliding window's or a token bucket's from
# the window after that). Each run starts once the replicas hold their
# shares (up to a minute for workload A, two for a sliding window or a
# token bucket); WARM=0 measures from a cold start instead.
# SETTLED=1 runs an unmeasured pass of workload A over the same keys
# before each measured one, so the replicas hold every key already: a
# service that has run a while, not the first pass over its keys, whose
# key tables and heaps are still growing.
# Everything listens on free loopback ports; nothing is left running.
#
#   scripts/many-keys.sh                      # D=10s KEYS=100000 C=64
#   D=5s KEYS=20000 C=32 scripts/many-keys.sh
#   ONLY=B scripts/many-keys.sh               # workload B alone
#   ZRATE=10000 ONLY=B scripts/many-keys.sh   # workload B in an open loop at 10 000 req/s, the counter too
#   ZALLOW=0.5 ONLY=B scripts/many-keys.sh    # workload B's rule with local_allowance 0.5 (shares hold half its limit)
#   ZALG=sliding_window ONLY=B scripts/many-keys.sh # workload B of a sliding window (or token_bucket); the
#                                             # limit check stays per second, which a sliding window
#                                             # may deny under, and the counter a fixed window's
#   ONLY=A REPLICAS=4 scripts/many-keys.sh    # workload A on 4 replicas alone
#   SETTLED=1 ONLY=A scripts/many-keys.sh     # workload A on replicas that hold the keys
#   ALG=sliding_window ONLY=A scripts/many-keys.sh # workload A of a sliding window (shares from its second window)
#   ALG=token_bucket ONLY=A scripts/many-keys.sh   # workload A of a token bucket (shares from its second window)
#   ALG=token_bucket BURST=50 ONLY=A scripts/many-keys.sh # of a burst of 50: shares of epochs of 30 s, the time 50 take to refill
set -euo pipefail
cd "$(dirname "$0")/.."
name=many-keys
. scripts/lib.sh
D=${D:-10s}
KEYS=${KEYS:-100000}
C=${C:-64}
ZKEYS=1000 # workload B's keys
ZIPF=1.1   # workload B's Zipf exponent

command -v redis-server >/dev/null || { echo "many-keys: redis-server not found" >&2; exit 1; }
work=$(mktemp -d)
pids=() # redis and the no-op floor
reps=() # the replicas running now
cleanup() {
  for p in "${reps[@]}" "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/" ./cmd/ratelimit-svc ./cmd/rlsbench
ALG=${ALG:-fixed_window} # workload A's algorithm
ZALG=${ZALG:-fixed_window} # workload B's
case "$ZALG" in fixed_window | sliding_window | token_bucket) ;; *)
  echo "many-keys: ZALG=$ZALG: want fixed_window, sliding_window or token_bucket" >&2
  exit 2
  ;;
esac
case "$ALG" in fixed_window | sliding_window | token_bucket) ;; *)
  echo "many-keys: ALG=$ALG: want fixed_window, sliding_window or token_bucket" >&2
  exit 2
  ;;
esac
BURST=${BURST:-} # workload A's token bucket burst; empty: its rate
burst_yaml=
APERIOD=60 # workload A's epoch of static shares, s
if [ -n "$BURST" ]; then
  [ "$ALG" = token_bucket ] || { echo "many-keys: BURST applies to ALG=token_bucket" >&2; exit 2; }
  burst_yaml=", burst: $BURST"
  APERIOD=$(python3 -c "print($BURST * 0.6)") # the time the burst takes to refill at 100 a minute
fi
cat >"$work/policy.yaml" <<EOF
domain: mk
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: $ALG$burst_yaml}
  - key: zipf
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: $ZALG${ZALLOW:+, local_allowance: $ZALLOW}}
EOF

# Thirteen free loopback ports: Redis, the floor, gRPC and HTTP of each
# of four replicas, then three more no-op servers.
read -r -a ports < <(free_ports 13)
rport=${ports[0]}
noop=127.0.0.1:${ports[1]}
grpc_addr() { echo "127.0.0.1:${ports[$((2 + 2 * $1))]}"; }
http_addr() { echo "127.0.0.1:${ports[$((3 + 2 * $1))]}"; }

rcli() { redis-cli -h 127.0.0.1 -p "$rport" "$@"; }

redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
wait_port "$rport" $!
noops=("$noop") # the no-op servers: the floor, then three more
noop_pids=()
"$work/rlsbench" serve-noop -addr "$noop" >"$work/noop.log" 2>&1 &
pids+=($!)
noop_pids+=($!)
wait_port "${noop#*:}" $!
if [ "${ONLY:-}" != B ]; then
  for i in 10 11 12; do
    noops+=("127.0.0.1:${ports[$i]}")
    "$work/rlsbench" serve-noop -addr "127.0.0.1:${ports[$i]}" >>"$work/noop.log" 2>&1 &
    pids+=($!)
    noop_pids+=($!)
    wait_port "${ports[$i]}" $!
  done
fi
noop_addrs() { (IFS=,; echo "${noops[*]:0:$1}"); }
noop_pid_list() { (IFS=,; echo "${noop_pids[*]:0:$1}"); }

start_replicas() { # count: starts that many on a flushed Redis
  rcli flushall >/dev/null
  reps=()
  for ((i = 0; i < $1; i++)); do
    "$work/ratelimit-svc" --redis-url "redis://127.0.0.1:$rport" --replica-id "mk-$i" --config "$work/policy.yaml" \
      --grpc-addr "$(grpc_addr "$i")" --http-addr "$(http_addr "$i")" --log-level warn \
      >>"$work/replica$i.log" 2>&1 &
    reps+=($!)
  done
  for ((i = 0; i < $1; i++)); do
    wait_port "${ports[$((2 + 2 * i))]}" "${reps[$i]}"
    wait_port "${ports[$((3 + 2 * i))]}" "${reps[$i]}"
  done
}
warm_up() { # period in seconds [algorithm, $ALG]: wait for the first window that begins 4 s from now or later (a sliding window's or a token bucket's: the one after)
  [ "${WARM:-1}" = 0 ] && return 0
  local later=0
  [ "${2:-$ALG}" != fixed_window ] && later=1
  python3 -c "
import math, time
p = $1; now = time.time()
time.sleep((math.floor((now + 4) / p) + 1 + $later) * p - now + 0.2)"
}
stop_replicas() {
  for p in "${reps[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${reps[@]}"; do wait "$p" 2>/dev/null || true; done
  reps=()
}
addrs() { # count → comma-separated gRPC addresses
  local out=()
  for ((i = 0; i < $1; i++)); do out+=("$(grpc_addr "$i")"); done
  (IFS=,; echo "${out[*]}")
}
pid_list() { (IFS=,; echo "${reps[*]}"); }

# snapshot name count: the replicas' decisions by mode and Redis's
# command calls and CPU, as JSON in $work/name.json.
snapshot() {
  rcli info commandstats >"$work/$1.stats"
  rcli info cpu >"$work/$1.cpu"
  local urls=()
  for ((i = 0; i < $2; i++)); do urls+=("http://$(http_addr "$i")/metrics"); done
  python3 "$work/mk.py" snapshot "$work/$1.stats" "$work/$1.cpu" "${urls[@]}" >"$work/$1.json"
}

cat >"$work/mk.py" <<'EOF'
import json, os, re, sys, urllib.request

# Commands a client sends, as opposed to those the scripts run inside
# Redis (INFO commandstats counts both); info and flushall are this
# script's own.
SENT = {"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro", "function", "script", "hello", "ping", "client", "cluster", "command"}
OWN = {"info", "flushall"}

def snapshot(stats, cpu, urls):
    calls, usec = {}, {}
    for line in open(stats):
        m = re.match(r"cmdstat_([^:]+):calls=(\d+),usec=(\d+),", line.strip())
        if m:
            calls[m.group(1)] = int(m.group(2))
            usec[m.group(1)] = int(m.group(3))
    used = 0.0
    for line in open(cpu):
        name, _, v = line.strip().partition(":")
        if name in ("used_cpu_user", "used_cpu_sys"):
            used += float(v)
    modes, denied, scraped = {}, {}, 0
    for url in urls:
        try:
            body = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError as e:
            print(f"many-keys: {url}: {e}", file=sys.stderr)
            continue
        scraped += 1
        for line in body.splitlines():
            if not line.startswith("ratelimit_decisions_total{"):
                continue
            labels, value = line.rsplit(" ", 1)
            mode = re.search(r'mode="([^"]*)"', labels)
            mode = mode.group(1) if mode else "?"
            modes[mode] = modes.get(mode, 0) + float(value)
            if 'outcome="over_limit"' in labels:
                denied[mode] = denied.get(mode, 0) + float(value)
    print(json.dumps({"calls": calls, "usec": usec, "cpu": used, "modes": modes, "denied": denied, "scraped": scraped, "urls": len(urls)}))

def diff(before, after):
    b, a = json.load(open(before)), json.load(open(after))
    calls = {k: v - b["calls"].get(k, 0) for k, v in a["calls"].items() if k.split("|")[0] not in OWN}
    modes = {k: v - b["modes"].get(k, 0) for k, v in a["modes"].items()}
    denied = {k: v - b["denied"].get(k, 0) for k, v in a["denied"].items()}
    return {
        "sent": sum(v for k, v in calls.items() if k.split("|")[0] in SENT),
        "calls": {k: v for k, v in calls.items() if v},
        "usec": {k: v - b.get("usec", {}).get(k, 0) for k, v in a.get("usec", {}).items() if k.split("|")[0] not in OWN},
        "all": sum(calls.values()),
        "cpu": a["cpu"] - b["cpu"],
        "modes": {k: int(v) for k, v in sorted(modes.items()) if v},
        "denied": {k: int(v) for k, v in denied.items() if v},
        "metrics": a["scraped"] == a["urls"] and b["scraped"] == b["urls"] and a["urls"] > 0,
    }

def row(name, report, before=None, after=None):
    d = json.load(open(report))
    r = {"name": name, "report": d}
    if before:
        r["redis"] = diff(before, after)
    print(json.dumps(r))

def fmt(n):
    return f"{n:,.0f}".replace(",", " ")

def tables(rows_file, duration, keys, c, zkeys, zipf):
    rows = [json.loads(l) for l in open(rows_file)]
    floor = next((r["report"] for r in rows if r["name"] == "floor"), None)
    a = [r for r in rows if r["name"].startswith("A")]
    floors = {r["name"][1:]: r["report"] for r in rows if r["name"].startswith("F")}
    if floor:
        floors["1"] = floor
    b = [r for r in rows if r["name"] == "B"]
    counter = next((r for r in rows if r["name"] == "C"), None)
    print(f"## A: {fmt(keys)} keys `user={{k}}` at 100/minute each, c={c} closed loop, {duration} per run")
    print()
    print("Keys in turn, requests round-robin over the replicas: no key comes near its limit,")
    print("so every OVER_LIMIT is wrong. × floor is to the no-op RLS, same workload, same run;")
    print("× N no-ops to as many no-op servers as replicas, round-robin alike (their CPU in the last column).")
    if os.environ.get("SETTLED") == "1":
        print("Settled: each replica count's measured run follows an unmeasured one of the same length over the")
        print("same keys, so the replicas hold them already (their key tables grown, no key new).")
    print()
    print("| replicas | req/s | × floor | × N no-ops | p50 µs | p99 µs | errors | OVER_LIMIT | OVER_LIMIT from +1 s | keys denied under limit | replicas' CPU ms /100k | N no-ops' CPU ms /100k |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    def cpu_of(d):
        return sum(u.get("cpu_seconds_per_100k_requests", 0) for u in d.get("cpu") or [] if u.get("label") != "rlsbench") * 1000
    for r in ([{"name": "floor", "report": floor}] if floor else []) + a:
        d = r["report"]
        n = "no-op floor" if r["name"] == "floor" else r["name"][1:]
        ratio = d["throughput_rps"] / floor["throughput_rps"] if floor and floor["throughput_rps"] else float("nan")
        fn = floors.get(n) if r["name"] != "floor" else None
        ratio_n = f'{d["throughput_rps"] / fn["throughput_rps"]:.2f}' if fn and fn["throughput_rps"] else "–"
        cpu_n = f"{cpu_of(fn):.0f}" if fn and cpu_of(fn) else "–"
        if r["name"] == "floor":
            cpu_n = f"{cpu_of(d):.0f}" if cpu_of(d) else "–"
        late = sum(s["over_limit"] for s in d["accuracy"]["seconds"] if s["offset"] >= 1)
        lim = d["accuracy"].get("limit") or {}
        cpu = f"{cpu_of(d):.0f}" if r["name"] != "floor" else "–"
        print(f'| {n} | {fmt(d["throughput_rps"])} | {ratio:.2f} | {ratio_n} | {d["latency_us"]["p50"]:.0f} | {d["latency_us"]["p99"]:.0f} '
              f'| {d["errors"]} | {d["over_limit"]} | {late} | {lim.get("keys_denied_under_limit", "–")} | {cpu} | {cpu_n} |')
    for k in sorted(floors):
        if k != "1":
            f = floors[k]
            print(f'| {k} no-ops | {fmt(f["throughput_rps"])} | {f["throughput_rps"] / floor["throughput_rps"]:.2f} | 1.00 | {f["latency_us"]["p50"]:.0f} '
                  f'| {f["latency_us"]["p99"]:.0f} | {f["errors"]} | – | – | – | – | {cpu_of(f):.0f} |')
    print()
    print("Redis, per replica count: commands are INFO commandstats calls over the run, those the replicas sent")
    print("(EVALSHA and the like) and all of them (with those the scripts ran inside Redis); CPU is Redis's")
    print("used_cpu_user+used_cpu_sys over the run (gross: idle time included). Decisions are the replicas'")
    print("ratelimit_decisions_total over the run, by mode (and of those, the over_limit outcomes).")
    print()
    print("| replicas | decisions | by mode | Redis cmds sent | sent /100k decisions | all cmds /100k decisions | Redis CPU ms /100k decisions |")
    print("|---|---|---|---|---|---|---|")
    for r in a:
        x = r["redis"]
        dec = sum(x["modes"].values())
        note = ""
        if not x["metrics"] or dec == 0:
            dec, note = r["report"]["requests"], " (no metrics: requests)"
        per = lambda v: f"{v * 100000 / dec:,.0f}".replace(",", " ") if dec else "–"
        cpu = f'{x["cpu"] * 1000 * 100000 / dec:.0f}' if dec else "–"
        modes = ", ".join(f"{k} {fmt(v)}" + (f' ({fmt(x["denied"][k])} over_limit)' if k in x["denied"] else "")
                          for k, v in x["modes"].items()) or "–"
        print(f'| {r["name"][1:]} | {fmt(dec)}{note} | {modes} | {fmt(x["sent"])} | {per(x["sent"])} | {per(x["all"])} | {cpu} |')
    for r in b:
        d = r["report"]
        lim = d["accuracy"]["limit"]
        sum_limits = lim["keys"] * lim["limit"] / lim["window_seconds"]
        print()
        zalg = os.environ.get("ZALG", "fixed_window")
        alg = "" if zalg == "fixed_window" else f" ({zalg})"
        zrate = os.environ.get("ZRATE", "")
        loop = f"open loop at {fmt(int(zrate))} req/s (at most {c} in flight)" if zrate else f"c={c} closed loop"
        print(f"## B: 4 replicas, {fmt(zkeys)} keys `zipf={{k}}` at 10/second each{alg}, Zipf s={zipf}, {loop}, {duration}")
        print()
        if zrate:
            print("Open loop: the replicas and the counter are offered the same load; the sum of limits is over the keys")
        else:
            print("Closed loop: the offered load is what the callers could send; the sum of limits is over the keys")
        print("that got traffic. Windows are Unix seconds by send time, over all replicas. A request answered")
        print("in a later second than it was sent in may have been decided in either, so the checks are made")
        print("twice: by send time, and surely (only answers that came in the second they were sent in, and a")
        print("denial counts only if its second saw at most the limit even with the late answers).")
        print()
        print("| req/s offered | sum of limits /s | offered ÷ limits | OVER_LIMIT | errors | keys with traffic | keys sent over limit | keys over limit by send time | surely (must be 0) | key-seconds over | admitted beyond limit | keys denied under limit by send time | surely (target 0) | key-seconds surely denied under | answers surely denied under | max admitted by a key in a second |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        ratio = d["throughput_rps"] / sum_limits if sum_limits else float("nan")
        print(f'| {fmt(d["throughput_rps"])} | {fmt(sum_limits)} | {ratio:.2f} | {d["over_limit"]} | {d["errors"]} | {lim["keys"]} '
              f'| {lim["keys_offered_over_limit"]} | {lim["keys_over_limit"]} | {lim["keys_surely_over"]} | {lim["key_windows_over_limit"]} | {lim["admitted_over_limit"]} '
              f'| {lim["keys_denied_under_limit"]} | {lim["keys_surely_denied_under"]} | {lim["key_windows_surely_denied_under"]} | {lim["surely_denied_under"]} '
              f'| {lim["max_admitted"]} ({lim["max_key"]}) |')
        by = lim.get("surely_denied_under_by_latency")
        if lim["surely_denied_under"] and by:
            print()
            print(f"Answers surely denied under the limit, by latency (a decision made without waiting takes under 5 ms; "
                  f"one that waited out StoreTimeout + 180 ms takes 190 ms or more): {by[0]} under 5 ms, {by[1]} from 5 to 190 ms, "
                  f"{by[2]} at 190 ms or more.")
        if lim.get("surely_over_key"):
            print()
            print(f'Surely over: the first, {lim["surely_over_key"]} admitted {lim["surely_over_admitted"]} '
                  f'in the second from unix {lim["surely_over_window_unix"]}.')
        x = r.get("redis")
        if x:
            print()
            print("Decisions by mode: " + (", ".join(f"{k} {fmt(v)}" + (f' ({fmt(x["denied"][k])} over_limit)' if k in x["denied"] else "")
                                                     for k, v in x["modes"].items()) or "–"))
            dec = sum(x["modes"].values())
            if dec and counter:
                print()
                cd, cx = counter["report"], counter["redis"]
                clim = cd["accuracy"]["limit"]
                cn = cd["requests"]
                lat = lambda d: f'latency mean {d["latency_us"]["mean"] / 1000:.1f} ms, p90 {d["latency_us"]["p90"] / 1000:.1f} ms, p99 {d["latency_us"]["p99"] / 1000:.1f} ms'
                print(f'The replicas: {lat(r["report"])}. The per-request counter (`rlsbench serve-counter`: INCRBY and EXPIRE per request, as envoyproxy/ratelimit '
                      f'on Redis), 4 processes, the same load right after: {fmt(cd["throughput_rps"])} req/s, {lat(cd)}, '
                      f'{clim["keys_surely_over"]} keys surely over, {clim["surely_denied_under"]} answers surely denied under, '
                      f'{cx["cpu"] * 1000 * 100000 / cn:.0f} ms of Redis CPU per 100k decisions '
                      f'({x["cpu"] * 1000 * 100000 / dec / (cx["cpu"] * 1000 * 100000 / cn):.2f}× for the replicas).')
            if dec:
                print()
                print(f'Redis: {fmt(x["sent"])} commands sent ({x["sent"] * 100000 / dec:,.0f} per 100k decisions), '
                      f'{x["cpu"] * 1000 * 100000 / dec:.0f} ms of CPU per 100k decisions. Calls by command: '
                      + ", ".join(f"{k} {fmt(v)} ({x['usec'].get(k, 0) / 1000:.0f} ms)" for k, v in sorted(x.get("calls", {}).items(), key=lambda kv: -x["usec"].get(kv[0], 0))[:8]) + ".")

cmd = sys.argv[1]
if cmd == "snapshot":
    snapshot(sys.argv[2], sys.argv[3], sys.argv[4:])
elif cmd == "row":
    row(*sys.argv[2:])
elif cmd == "tables":
    tables(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), sys.argv[7])
EOF

bench() { # out.json rlsbench-args...: a non-zero exit (no answers) still leaves a report
  local out=$1
  shift
  "$work/rlsbench" -domain mk -c "$C" -d "$D" -json "$@" >"$out" 2>>"$work/rlsbench.log" ||
    echo "many-keys: rlsbench exited $? (see the errors column)" >&2
}

: >"$work/rows"
[ "${ONLY:-}" = B ] || bench "$work/floor.json" -addr "$noop" -pids "$(noop_pid_list 1)" -descriptor 'user={k}' -keys "$KEYS" -limit 100 -per minute
[ "${ONLY:-}" = B ] || python3 "$work/mk.py" row floor "$work/floor.json" >>"$work/rows"
for R in ${REPLICAS:-1 2 4}; do
  [ "${ONLY:-}" = B ] && break
  if [ "$R" -gt 1 ]; then
    bench "$work/f$R.json" -addr "$(noop_addrs "$R")" -pids "$(noop_pid_list "$R")" -descriptor 'user={k}' -keys "$KEYS" -limit 100 -per minute
    python3 "$work/mk.py" row "F$R" "$work/f$R.json" >>"$work/rows"
  fi
  start_replicas "$R"
  warm_up "$APERIOD"
  if [ "${SETTLED:-0}" = 1 ]; then # an unmeasured pass: every key held by then
    bench "$work/pre$R.json" -addr "$(addrs "$R")" -descriptor 'user={k}' -keys "$KEYS" -limit 100 -per minute
  fi
  snapshot "before$R" "$R"
  bench "$work/a$R.json" -addr "$(addrs "$R")" -pids "$(pid_list)" -descriptor 'user={k}' -keys "$KEYS" -limit 100 -per minute
  snapshot "after$R" "$R"
  stop_replicas
  python3 "$work/mk.py" row "A$R" "$work/a$R.json" "$work/before$R.json" "$work/after$R.json" >>"$work/rows"
done

if [ "${ONLY:-}" != A ]; then
  start_replicas 4
  warm_up 1 "$ZALG"
  snapshot beforeB 4
  bench "$work/b.json" -addr "$(addrs 4)" -descriptor 'zipf={k}' -keys "$ZKEYS" -zipf "$ZIPF" -limit 10 -per second ${ZRATE:+-rate "$ZRATE"}
  snapshot afterB 4
  stop_replicas
  python3 "$work/mk.py" row B "$work/b.json" "$work/beforeB.json" "$work/afterB.json" >>"$work/rows"
  if [ "${COUNTER:-1}" = 1 ]; then # the per-request counter, on the replicas' ports
    rcli flushall >/dev/null
    for ((i = 0; i < 4; i++)); do
      "$work/rlsbench" serve-counter -addr "$(grpc_addr "$i")" -redis "127.0.0.1:$rport" -limit 10 -per second >>"$work/counter.log" 2>&1 &
      reps+=($!)
    done
    for ((i = 0; i < 4; i++)); do wait_port "${ports[$((2 + 2 * i))]}" "${reps[$i]}"; done
    snapshot beforeC 0
    bench "$work/c.json" -addr "$(addrs 4)" -descriptor 'zipf={k}' -keys "$ZKEYS" -zipf "$ZIPF" -limit 10 -per second ${ZRATE:+-rate "$ZRATE"}
    snapshot afterC 0
    stop_replicas
    python3 "$work/mk.py" row C "$work/c.json" "$work/beforeC.json" "$work/afterC.json" >>"$work/rows"
  fi
fi

case "$ALG" in
  sliding_window) echo "Workload A's rule: $ALG (static shares from the second window that begins a lease after the replicas joined)." ;;
  token_bucket) echo "Workload A's rule: $ALG of a capacity of ${BURST:-its rate per minute} (static shares of epochs of ${APERIOD} s from the second that begins a lease after the replicas joined)." ;;
esac
ZALG="$ZALG" python3 "$work/mk.py" tables "$work/rows" "$D" "$KEYS" "$C" "$ZKEYS" "$ZIPF"
