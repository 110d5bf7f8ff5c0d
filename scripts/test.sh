#!/usr/bin/env bash
# The README's test command (make test): every test with the race
# detector. A package whose run the Go runtime itself aborted, with no
# test failing (a runtime fault inside a synctest bubble, "SIGSEGV" in
# the timer code or in the race detector's stack depot, or its own
# "ThreadSanitizer: CHECK failed"), is run again, at most twice, and must
# pass then; a rerun with a failing test fails the run; the crash is
# printed. pkg/limiter's race binary died so in about 1 run in 10 on
# the 2-core machine of the measurements, and in 2 of 3 clean-clone runs
# once token-bucket simulations joined it (a SIGSEGV in timer.maybeRunChan
# and the race runtime's "CHECK failed ... kEpochLast"); its longest
# simulations run without -race since.
# A test that fails fails the run at once.
# Then the large simulations of pkg/limiter, which skip themselves under
# -race (it makes them some 25 times slower), run without it.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

large() { # the large simulations, without the race detector
  echo "test: the large simulations of pkg/limiter, without -race"
  "$GO" test -count=1 -run '^TestSim' "$@" ./pkg/limiter/
}

"$GO" test -race -count=1 "$@" ./... 2>&1 | tee "$out"
[ "${PIPESTATUS[0]}" -eq 0 ] && { large "$@"; exit; }

# Each package's output is printed in one block ending in its ok/FAIL line.
rerun=()
while IFS= read -r pkg; do
  block=$(awk -v p="$pkg" '
    /^(ok|FAIL|\?)[ \t]/ { if ($2 == p && $1 == "FAIL") { print buf; exit } buf = ""; next }
    { buf = buf $0 "\n" }' "$out")
  if grep -q -- '--- FAIL' <<<"$block" || ! grep -qE 'ThreadSanitizer: CHECK failed|^SIGSEGV: |^fatal error: |^unexpected fault address' <<<"$block"; then
    echo "test: $pkg failed" >&2
    exit 1
  fi
  rerun+=("$pkg")
done < <(grep -E '^FAIL[[:space:]]+[^[:space:]]+[[:space:]]' "$out" | awk '{print $2}')
[ ${#rerun[@]} -gt 0 ] || exit 1
# crashed: whether a package's output shows the runtime's abort and no
# failing test.
crashed() {
  ! grep -q -- '--- FAIL' "$1" && grep -qE 'ThreadSanitizer: CHECK failed|^SIGSEGV: |^fatal error: |^unexpected fault address' "$1"
}
for pkg in "${rerun[@]}"; do
  for attempt in 1 2; do
    echo "test: the Go runtime aborted $pkg (no test failed); running it again ($attempt of 2)" >&2
    "$GO" test -race -count=1 "$@" "$pkg" 2>&1 | tee "$out"
    [ "${PIPESTATUS[0]}" -eq 0 ] && continue 2
    crashed "$out" || exit 1
  done
  exit 1
done
large "$@"
