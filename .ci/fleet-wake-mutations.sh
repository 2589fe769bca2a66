#!/usr/bin/env bash
# Breaks the fleet's wake-ups on purpose, one way at a time, and checks that
# tests/fleet.rs's `a_request_waiting_for_a_place_hears_of_its_release_instead_of_polling`
# catches each break (it counts, in Redis, the script calls a waiting
# request makes, and looks for the release's announcement).
#
# Usage, from anywhere in the repository: .ci/fleet-wake-mutations.sh
# Needs redis-server (the test starts its own). Exit status 0 when the
# unmutated test passes and every break is caught; 1 when one is missed;
# 2 when a patch no longer applies (update it here).
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
export CARGO_TARGET_DIR="${FLEET_MUTATIONS_TARGET_DIR:-${CARGO_TARGET_DIR:-${TMPDIR:-/tmp}/tower-autothrottle-gate-mutations}}"
TEST=a_request_waiting_for_a_place_hears_of_its_release_instead_of_polling
files=(src/redis/client.rs src/redis/release.lua)
work="$(mktemp -d "${TMPDIR:-/tmp}/fleet-mutations.XXXXXX")"
for f in "${files[@]}"; do cp "$f" "$work/$(basename "$f")"; done
restore() { for f in "${files[@]}"; do cmp -s "$work/$(basename "$f")" "$f" || cp "$work/$(basename "$f")" "$f"; done; }
trap 'restore; rm -rf "$work"' EXIT

run() { cargo test -q --features redis --test fleet "$TEST" >"$work/log" 2>&1; }

# name | file | exact text (once) | replacement
mutants=(
  "waiters-poll|src/redis/client.rs|Some(inner) => inner.freed.listening.store(true, Ordering::Relaxed),|Some(inner) => inner.freed.listening.store(false, Ordering::Relaxed),"
  "release-unannounced|src/redis/release.lua|  redis.call('PUBLISH', ARGV[6], KEYS[1])|  -- not announced"
)

echo "== unmutated"
if ! run; then tail -n 30 "$work/log" >&2; echo "the unmutated test fails" >&2; exit 2; fi
echo "passes"
missed=0
for m in "${mutants[@]}"; do
    IFS='|' read -r name file old new <<<"$m"
    restore
    if ! python3 - "$file" "$old" "$new" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path, encoding="utf-8").read()
if text.count(old) != 1:
    sys.exit(f"{path}: the text to replace occurs {text.count(old)} times, not once: {old}")
open(path, "w", encoding="utf-8").write(text.replace(old, new))
PY
    then
        echo "a patch no longer applies: update .ci/fleet-wake-mutations.sh" >&2
        exit 2
    fi
    if run; then
        echo "$name: MISSED"
        missed=$((missed + 1))
    else
        echo "$name: caught ($(grep -m1 -oE 'script calls while B waited 3 s|no release was announced' "$work/log" || echo 'failed'))"
    fi
done
exit $((missed > 0))
