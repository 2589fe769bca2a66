#!/usr/bin/env bash
# Breaks the layer on purpose, one way at a time, and checks that
# `the_layer_answers_or_holds_for_a_documented_reason` (tests/hostile.rs)
# catches each break: its oracle accepts a request held outside a slot's
# queue only while every place under `max_pending` is taken by a request
# queued or in flight, so a place that is never given back must fail it.
#
# Usage, from anywhere in the repository: .ci/hostile-mutations.sh
# Exit status 0 when the unmutated test passes and every break is caught;
# 1 when one is missed (or does not build); 2 when a patch no longer
# applies (update it here).
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
export CARGO_TARGET_DIR="${HOSTILE_MUTATIONS_TARGET_DIR:-${CARGO_TARGET_DIR:-$(.ci/mutation-target-dir gate-mutations)}}"
TEST=the_layer_answers_or_holds_for_a_documented_reason
# The regressions file too: a failing mutant may add a case to it.
files=(src/slot/gate.rs tests/hostile.proptest-regressions)
work="$(mktemp -d "${TMPDIR:-/tmp}/hostile-mutations.XXXXXX")"
for f in "${files[@]}"; do cp "$f" "$work/$(basename "$f")"; done
restore() { for f in "${files[@]}"; do cmp -s "$work/$(basename "$f")" "$f" || cp "$work/$(basename "$f")" "$f"; done; }
trap 'restore; rm -rf "$work"' EXIT

# The fixed-seed run of tests/hostile.rs (128 cases and the saved ones),
# not a soak.
run() { env -u PROPTEST_CASES cargo test -q --release --all-features --test hostile "$TEST" >"$work/log" 2>&1; }

# name | file | exact text (once) | replacement
mutants=(
  "pending-place-leaked|src/slot/gate.rs|        if let Some(lease) = self.lease.take() {|        std::mem::forget(self._pending.take()); if let Some(lease) = self.lease.take() {"
)

echo "== unmutated"
if ! run; then
    grep -A12 "panicked at\|Test failed" "$work/log" >&2 || true
    tail -n 30 "$work/log" >&2
    echo "the unmutated $TEST fails" >&2
    exit 2
fi
echo "passes"
missed=0
for m in "${mutants[@]}"; do
    IFS='|' read -r name file old new <<<"$m"
    restore
    if ! python3 .ci/replace-once.py "$file" "$old" "$new"
    then
        echo "a patch no longer applies: update .ci/hostile-mutations.sh" >&2
        exit 2
    fi
    if ! cargo test -q --release --all-features --test hostile --no-run >"$work/log" 2>&1; then
        echo "$name: does not build (a break must build to count)"
        missed=$((missed + 1))
    elif run; then
        echo "$name: MISSED"
        missed=$((missed + 1))
    else
        why=$(grep -m1 -oE "held outside its slot's queue while [0-9]+ of [0-9]+ places are taken|held without a documented reason|[0-9]+ held, [0-9]+ queued or in flight" "$work/log" \
              || grep -m1 -oE "panicked at [^ ]*" "$work/log" || echo 'failed')
        echo "$name: caught ($why)"
    fi
done
exit $((missed > 0))
