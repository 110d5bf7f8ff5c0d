#!/usr/bin/env bash
# Hostile clients against two builds of ratelimit-svc: BEFORE (default
# aebd74c, before the bounds) and HEAD, each built in a temporary git
# worktree. For each build, every attack runs on loopback against fresh
# replicas, and the figures print side by side as one markdown table:
#
#   flood   local-only: 100 requests each with a unique value just under
#           4 MiB and a YEAR×100 limit override, then unique small keys
#           (50 a request) for FLOOD; VmHWM and VmRSS from
#           /proc/PID/status at the end and 60 s later, utime+stime from
#           /proc/PID/stat over the 10 s after the flood and 50–60 s after.
#   keys    500 000 keys held (hour windows), then GET
#           /debug/keys?limit=500000: status and bytes.
#   codes   the gRPC answer to a YEAR×100 override, to a value just under
#           4 MiB, and to a value that is not UTF-8.
#   body    a 6 MiB buffered ext_proc request body: let through or refused.
#   stuck   an ext_proc stream takes a max_concurrent: 1 target's slot
#           (request headers, end of stream) and goes silent; a probe
#           every 0.5 s tells when the slot is free again (STUCK_WAIT).
#   conns   under ulimit -n 256: 300 idle and 30 slow (a header line a
#           second) connections held on the HTTP port, then 40
#           ShouldRateLimit calls on new gRPC connections and 40
#           /healthcheck GETs, 2 s deadline each.
#   redis   Redis mode: the largest TTL Redis holds after the override;
#           200/s on one key of a 50/s rule while redis-server is stopped
#           for 5 s and started again; the service's log lines about it
#           and the most admitted in one client-side second.
#
# Each replica runs with the defaults (only addresses, config and log
# level are set), so a bound missing from BEFORE is simply absent; the
# table lists the bounds' flags each build has. The 60 s RSS wait is
# spent running the other attacks on other replicas. Everything listens
# on free loopback ports; everything started is stopped at exit.
#
#   scripts/hostile-load.sh                   # BEFORE=aebd74c FLOOD=15s STUCK_WAIT=20s
#   BEFORE=4de4b0a FLOOD=10s scripts/hostile-load.sh
set -euo pipefail
cd "$(dirname "$0")/.."
name=hostile-load
. scripts/lib.sh
BEFORE=${BEFORE:-aebd74c}
FLOOD=${FLOOD:-15s}
STUCK_WAIT=${STUCK_WAIT:-20s}

for c in redis-server redis-cli python3 curl git go; do
  command -v "$c" >/dev/null || { echo "hostile-load: $c not found" >&2; exit 1; }
done
work=$(mktemp -d)
pids=()  # everything started, stopped at exit
trees=() # worktrees, removed at exit
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for t in "${trees[@]}"; do git worktree remove --force "$t" 2>/dev/null || true; done
  git worktree prune 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
go build -o "$work/hostile" ./cmd/hostile
build() { # name rev: builds ratelimit-svc at rev into $work/name/
  local src="$work/src-$1"
  git worktree add --quiet --detach "$src" "$2"
  trees+=("$src")
  mkdir -p "$work/$1"
  (cd "$src" && go build -o "$work/$1/ratelimit-svc" ./cmd/ratelimit-svc)
  git -C "$src" rev-parse --short HEAD >"$work/$1/rev"
}
build before "$BEFORE"
build after HEAD

mkdir -p "$work/cfg"
cat >"$work/cfg/policy.yaml" <<'EOF'
domain: hostile
descriptors:
  - key: flood
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: keep
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: rate
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: hostile
    rate_limit: {unit: minute, requests_per_unit: 100}
EOF
cat >"$work/cfg/targets.yaml" <<'EOF'
targets:
  slot: {max_concurrent: 1}
  big: {max_concurrent: 0}
EOF

status_kb() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; } # pid field
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tck=$(getconf CLK_TCK)

# start side name [extra flags...]: a replica of side's build on three
# free ports; sets pid, grpc, http, dbg. With NOFILE set it runs under
# ulimit -n NOFILE.
start() {
  local side=$1 name=$2
  shift 2
  read -r gp hp dp < <(free_ports 3)
  grpc=127.0.0.1:$gp http=127.0.0.1:$hp dbg=127.0.0.1:$dp
  (
    [ -n "${NOFILE:-}" ] && ulimit -n "$NOFILE"
    exec "$work/$side/ratelimit-svc" --config "$work/cfg" --grpc-addr "$grpc" --http-addr "$http" \
      --debug-addr "$dbg" --log-level "${LOG_LEVEL:-warn}" "$@"
  ) >"$work/$side/$name.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  wait_port "$gp" "$pid"
  wait_port "$hp" "$pid"
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# flood_watch side pid http: the flood replica's memory and CPU over the
# 60 s after the flood, and then its Go heap (in use, and idle but not
# returned to the system) from /metrics, into side/watch.json.
flood_watch() {
  local c0 c10 c50 c60 hwm rss0 rss60 heap
  rss0=$(status_kb "$2" VmRSS) c0=$(cpu_ticks "$2")
  sleep 10
  c10=$(cpu_ticks "$2")
  sleep 40
  c50=$(cpu_ticks "$2")
  sleep 10
  c60=$(cpu_ticks "$2") rss60=$(status_kb "$2" VmRSS) hwm=$(status_kb "$2" VmHWM)
  heap=$(curl -s -m 10 "http://$3/metrics" | awk '$1 == "go_memstats_heap_inuse_bytes" {u = $2} $1 == "go_memstats_heap_idle_bytes" {i = $2}
    $1 == "go_memstats_heap_released_bytes" {r = $2} END {printf "{\"inuse\": %d, \"kept\": %d}", u, i - r}')
  echo "{\"heap\": $heap, \"hwm_kb\": $hwm, \"rss_end_kb\": $rss0, \"rss_60s_kb\": $rss60, \"cpu_0_10_ms\": $(((c10 - c0) * 1000 / tck)), \"cpu_50_60_ms\": $(((c60 - c50) * 1000 / tck))}" >"$work/$1/watch.json"
}

# stuck_flag side: the build's flag bounding a silent ext_proc stream,
# if it has one (the stuck slot replica then runs with it at 5 s).
stuck_flag() { "$work/$1/ratelimit-svc" -help 2>&1 | grep -oE -- '-ext-?proc[a-z-]*(idle|progress)[a-z-]*' | head -1 || true; }

run_side() {
  local side=$1 fpid w
  cut -d' ' -f1-3 /proc/loadavg >"$work/$side/load"
  echo "== $side ($(cat "$work/$side/rev")): load average $(cat "$work/$side/load")" >&2
  "$work/$side/ratelimit-svc" -help >"$work/$side/help" 2>&1 || true
  start "$side" flood
  fpid=$pid
  echo "{\"rss_start_kb\": $(status_kb "$fpid" VmRSS)}" >"$work/$side/flood0.json"
  "$work/hostile" flood -addr "$grpc" -d "$FLOOD" >"$work/$side/flood.json"
  flood_watch "$side" "$fpid" "$http" &
  w=$!
  pids+=("$w")

  start "$side" keys
  "$work/hostile" flood -addr "$grpc" -big 0 -key keep -keys 500000 -d 120s >"$work/$side/keys-flood.json"
  curl -s -o /dev/null -m 60 -w '{"code": %{http_code}, "bytes": %{size_download}}' \
    "http://$dbg/debug/keys?limit=500000" >"$work/$side/keys.json" || echo '{"code": 0, "bytes": 0}' >"$work/$side/keys.json"
  stop "$pid"

  local sf
  sf=$(stuck_flag "$side")
  echo "$sf" >"$work/$side/stuckflag"
  start "$side" codes ${sf:+"$sf" 5s}
  "$work/hostile" codes -addr "$grpc" >"$work/$side/codes.json"
  "$work/hostile" body -addr "$grpc" >"$work/$side/body.json"
  "$work/hostile" stuck -addr "$grpc" -wait "$STUCK_WAIT" >"$work/$side/stuck.json"
  stop "$pid"

  NOFILE=256 start "$side" conns
  "$work/hostile" conns -http "$http" -grpc "$grpc" >"$work/$side/conns.json"
  stop "$pid"

  wait "$w"
  stop "$fpid"
  run_redis "$side"
}

# run_redis side: the override's TTL in Redis, then two outages under a
# steady load: redis-server killed and started again 5 s later, and
# paused (SIGSTOP) for 5 s and continued.
run_redis() {
  local side=$1 v
  rport=$(free_ports 1)
  redis_up "$side"
  LOG_LEVEL=info start "$side" redis --redis-url "redis://127.0.0.1:$rport"
  "$work/hostile" codes -addr "$grpc" >"$work/$side/redis-codes.json"
  redis-cli -p "$rport" eval "local m = -2 for _, k in ipairs(redis.call('keys', '*')) do local t = redis.call('ttl', k) if t > m then m = t end end return m" 0 >"$work/$side/ttl"
  for v in kill pause; do outage "$side" "$v"; done
  stop "$pid"
  stop "$rpid"
}
redis_up() { # side: redis-server on $rport; sets rpid
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >>"$work/$1/redis-server.log" 2>&1 &
  rpid=$!
  pids+=("$rpid")
  wait_port "$rport" "$rpid"
}
outage() { # side kill|pause: 200/s on a 50/s key for 20 s, Redis out from 5 s to 10 s
  local lpid
  "$work/hostile" rate -addr "$grpc" -rate 200 -d 20s >"$work/$1/rate-$2.json" &
  lpid=$!
  pids+=("$lpid")
  sleep 5
  date +%s.%N >"$work/$1/out-$2"
  if [ "$2" = kill ]; then
    stop "$rpid"
    sleep 5
    redis_up "$1"
  else
    kill -STOP "$rpid"
    sleep 5
    kill -CONT "$rpid"
  fi
  date +%s.%N >"$work/$1/back-$2"
  wait "$lpid"
  date +%s.%N >"$work/$1/end-$2"
}

run_side before
run_side after
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
cat >"$work/table.py" <<'EOF'
import datetime, json, os, re, sys

work, flood, stuck_wait = sys.argv[1:4]
SIDES = ("before", "after")
BOUNDS = ["max-keys", "rls-max-value-bytes", "rls-max-descriptors", "rls-max-entries", "rls-max-override-period",
          "http-max-conns", "http-idle-timeout", "grpc-max-recv-bytes", "memory-limit", "gc-heap-floor", "debug-keys-max"]


def text(side, name):
    path = os.path.join(work, side, name)
    return open(path).read().strip() if os.path.exists(path) else ""


def load(side, name):
    t = text(side, name)
    try:
        return json.loads(t) if t else {}
    except ValueError:
        return {}


def mb(kb):
    return f"{kb / 1024:,.0f} MB" if isinstance(kb, (int, float)) else "–"


def counts(d):
    return ", ".join(f"{k} {v}" for k, v in sorted((d or {}).items())) or "–"


def flags(side):
    h = text(side, "help")
    have = [f for f in BOUNDS if f"  -{f} " in h]
    if not have:
        return "none of them"
    missing = [f for f in BOUNDS if f not in have]
    return "all" if not missing else "all but " + ", ".join(missing)


def stuck(side):
    s = load(side, "stuck.json")
    flag = text(side, "stuckflag")
    if s.get("freed_after_s") is not None:
        out = f'freed after {s["freed_after_s"]:.1f} s'
    else:
        out = f'not freed in {s.get("waited_s", 0):.0f} s (probes answered {s.get("last_probe_answer", "–")})'
    m = re.search(re.escape(f"  {flag} ") + r'[^\n]*\n[^\n]*\(default "([^"]*)"\)', text(side, "help")) if flag else None
    default = f" (default {m.group(1)})" if m else ""
    note = f"run with {flag} 5s{default}" if flag else "no ext_proc stream idle/progress flag: not built"
    return f'slot taken ({s.get("stuck_answer", "–")}); {out}; {note}'


def times(side, v):
    return [float(text(side, f"{n}-{v}") or 0) for n in ("out", "back", "end")]


def log_lines(side, v):
    stop, _, end = times(side, v)
    seen = {}
    for line in text(side, "redis.log").splitlines():
        try:
            r = json.loads(line)
            ts = datetime.datetime.fromisoformat(r["time"].replace("Z", "+00:00")).timestamp()
        except (ValueError, KeyError, TypeError):
            continue
        if ts < stop - 0.5 or ts > end:
            continue
        key = f'{r.get("level")} "{r.get("msg")}"'
        seen[key] = seen.get(key, 0) + 1
    if not seen:
        return "none"
    return "; ".join(k + (f" ×{n}" if n > 1 else "") for k, n in seen.items())


def admitted(side, v):
    r = load(side, f"rate-{v}.json")
    stop, start, _ = times(side, v)
    secs = r.get("seconds", [])[1:-1]  # the first and last seconds are partial

    def most(pick):
        xs = [s["ok"] for s in secs if pick(s["unix"])]
        return str(max(xs)) if xs else "–"

    errs = sum(s["errors"] for s in secs)
    return (f"before the stop {most(lambda u: u + 1 <= stop)}; Redis down {most(lambda u: u >= stop and u + 1 <= start)}; "
            f"after {most(lambda u: u >= int(start))}; calls failed {errs}")


def ttl(side):
    try:
        t = int(text(side, "ttl"))
    except ValueError:
        return "–"
    if t == -2:
        return "no key (-2)"
    if t == -1:
        return "no key with a TTL (-1): only keys that never expire"
    return f"{t:,} s ({t / 86400 / 365:.1f} years)" if t > 86400 else f"{t} s"


def conns(side, what):
    c = load(side, "conns.json")
    if what == "grpc":
        return f'p50 {c.get("grpc_p50_ms", 0):.1f} ms, p99 {c.get("grpc_p99_ms", 0):.1f} ms ({counts(c.get("grpc_answers"))})'
    if what == "health":
        return counts(c.get("healthcheck_answers"))
    return f'{c.get("held", "–")} open at the probes; {c.get("reopened", "–")} closed by the server and reopened'


def flood_sent(side):
    f = load(side, "flood.json")
    return (f'100 × {f.get("big_value_bytes", 0) / 1048576:.2f} MiB with YEAR×100: {counts(f.get("big_answers"))}; '
            f'{f.get("keys_sent", 0):,} keys in {f.get("requests", 0):,} requests: {counts(f.get("answers"))}')


def keys_page(side):
    k = load(side, "keys.json")
    sent = load(side, "keys-flood.json")
    n = k.get("bytes", 0)
    size = f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n} bytes"
    return f'{k.get("code", "–")}, {size} ({sent.get("keys_sent", 0):,} keys sent)'


def watch(field, unit=""):
    def f(side):
        v = load(side, "watch.json").get(field)
        return mb(v) if unit == "MB" else (f"{v} ms" if v is not None else "–")
    return f


def heap(side):
    h = load(side, "watch.json").get("heap") or {}
    if "inuse" not in h:
        return "–"
    return f'{h["inuse"] / 1048576:,.0f} MB; {h["kept"] / 1048576:,.0f} MB'


rows = [
    ("load average (1, 5, 15 min) as the build's run began", lambda s: text(s, "load")),
    ("bounds' flags in -help (" + ", ".join(BOUNDS) + ")", flags),
    (f"key flood, local-only: huge values first, then unique keys for {flood}", flood_sent),
    ("RSS before the flood", lambda s: mb(load(s, "flood0.json").get("rss_start_kb"))),
    ("RSS peak (VmHWM)", watch("hwm_kb", "MB")),
    ("RSS at the end of the flood", watch("rss_end_kb", "MB")),
    ("RSS 60 s after the flood", watch("rss_60s_kb", "MB")),
    ("… of it, Go heap in use; idle but kept from the system (/metrics)", heap),
    ("CPU (utime+stime) of the idle replica, 0–10 s after the flood", watch("cpu_0_10_ms")),
    ("CPU (utime+stime) of the idle replica, 50–60 s after the flood", watch("cpu_50_60_ms")),
    ("answer to an override of YEAR×100", lambda s: load(s, "codes.json").get("override_year_x100", "–")),
    ("answer to a value just under 4 MiB", lambda s: load(s, "codes.json").get("value_bytes", "–")),
    ("answer to a value that is not UTF-8", lambda s: load(s, "codes.json").get("invalid_utf8", "–")),
    ("Redis mode: largest TTL Redis holds after those three", ttl),
    ("/debug/keys?limit=500000 with 500 000 keys held", keys_page),
    ("6 MiB buffered ext_proc request body", lambda s: load(s, "body.json").get("body_answer", "–")),
    (f"stuck ext_proc slot (max_concurrent 1; headers, then silent; watched {stuck_wait})", stuck),
    ("ulimit -n 256; 300 idle + 30 slow HTTP connections held", lambda s: conns(s, "held")),
    ("… meanwhile ShouldRateLimit on new gRPC connections (2 s deadline)", lambda s: conns(s, "grpc")),
    ("… meanwhile /healthcheck (2 s deadline)", lambda s: conns(s, "health")),
    ("Redis killed, started again 5 s later: the replica's log lines", lambda s: log_lines(s, "kill")),
    ("… most admitted in one client-side second (50/s rule, 200/s sent)", lambda s: admitted(s, "kill")),
    ("Redis paused (SIGSTOP) for 5 s: the replica's log lines", lambda s: log_lines(s, "pause")),
    ("… most admitted in one client-side second (50/s rule, 200/s sent)", lambda s: admitted(s, "pause")),
]
revs = [text(s, "rev") for s in SIDES]
print(f"| item | before ({revs[0]}) | after ({revs[1]}) |")
print("|---|---|---|")
for name, f in rows:
    print(f"| {name} | " + " | ".join(str(f(s)).replace("|", "/") for s in SIDES) + " |")
EOF
python3 "$work/table.py" "$work" "$FLOOD" "$STUCK_WAIT"
