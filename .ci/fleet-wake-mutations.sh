#!/usr/bin/env bash
# Breaks the fleet on purpose, one way at a time, and checks that a test of
# tests/fleet.rs catches each break:
# `a_request_waiting_for_a_place_hears_of_its_release_instead_of_polling`
# the wake-ups (it counts, in Redis, the script calls a waiting request
# makes, and looks for the release's announcement), and
# `every_worker_learns_from_the_whole_fleets_answers` the samples shared
# (it counts what each worker's policy was given).
#
# Usage, from anywhere in the repository: .ci/fleet-wake-mutations.sh
# Needs redis-server (the test starts its own). Exit status 0 when the
# unmutated tests pass and every break is caught; 1 when one is missed
# (or does not build);
# 2 when a patch no longer applies (update it here).
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
export CARGO_TARGET_DIR="${FLEET_MUTATIONS_TARGET_DIR:-${CARGO_TARGET_DIR:-$(.ci/mutation-target-dir gate-mutations)}}"
WAKE=a_request_waiting_for_a_place_hears_of_its_release_instead_of_polling
LEARN=every_worker_learns_from_the_whole_fleets_answers
files=(src/redis/client.rs src/redis/release.lua src/redis/reserve.lua)
work="$(mktemp -d "${TMPDIR:-/tmp}/fleet-mutations.XXXXXX")"
for f in "${files[@]}"; do cp "$f" "$work/$(basename "$f")"; done
restore() { for f in "${files[@]}"; do cmp -s "$work/$(basename "$f")" "$f" || cp "$work/$(basename "$f")" "$f"; done; }
trap 'restore; rm -rf "$work"' EXIT

run() { cargo test -q --features redis --test fleet "$1" >"$work/log" 2>&1; }

# name | test | file | exact text (once) | replacement
mutants=(
  "waiters-poll|$WAKE|src/redis/client.rs|Some(inner) => inner.freed.listening.store(true, Ordering::Relaxed),|Some(inner) => inner.freed.listening.store(false, Ordering::Relaxed),"
  "release-unannounced|$WAKE|src/redis/release.lua|  redis.call('PUBLISH', ARGV[6], KEYS[1])|  -- not announced"
  "samples-unshared|$LEARN|src/redis/release.lua|  if ARGV[7] ~= '' then|  if false then"
  "own-samples-echoed|$LEARN|src/redis/reserve.lua|    if f[2] ~= ARGV[6] then|    if true then"
)

echo "== unmutated"
for test in "$WAKE" "$LEARN"; do
    if ! run "$test"; then
        # The assertion's message first (a backtrace would push it out of
        # a short tail), then the end of the log.
        grep -A12 "panicked at" "$work/log" >&2 || true
        tail -n 30 "$work/log" >&2
        echo "the unmutated $test fails" >&2
        exit 2
    fi
done
echo "passes"
missed=0
for m in "${mutants[@]}"; do
    IFS='|' read -r name test file old new <<<"$m"
    restore
    if ! python3 .ci/replace-once.py "$file" "$old" "$new"
    then
        echo "a patch no longer applies: update .ci/fleet-wake-mutations.sh" >&2
        exit 2
    fi
    if ! cargo test -q --features redis --test fleet --no-run >"$work/log" 2>&1; then
        echo "$name: does not build (a break must build to count)"
        missed=$((missed + 1))
    elif run "$test"; then
        echo "$name: MISSED"
        missed=$((missed + 1))
    else
        echo "$name: caught ($(grep -m1 -oE "script calls while B waited 3 s|no release was announced|panicked at [^ ]*" "$work/log" || echo 'failed'))"
    fi
done
exit $((missed > 0))
