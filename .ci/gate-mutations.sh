#!/usr/bin/env bash
# Breaks the gate on purpose, one way at a time, and checks that the chaos
# test's oracle (tests/chaos.rs) catches every break.
#
# Each mutant is an exact-text patch of src/slot/gate.rs or src/slot/mod.rs.
# For each: patch, build, run `cargo test --all-features --test chaos`,
# expect it to FAIL, put the file back. Then a table: mutant -> caught or
# MISSED.
#
# Usage, from anywhere in the repository:
#   .ci/gate-mutations.sh            every mutant
#   .ci/gate-mutations.sh NAME...    only these
#   .ci/gate-mutations.sh --list     the mutants
#
# Environment:
#   GATE_MUTATIONS_TARGET_DIR  cargo's target dir (else CARGO_TARGET_DIR,
#                              else $TMPDIR/tower-autothrottle-gate-mutations-N,
#                              N a checksum of the checkout's path)
#   GATE_MUTATIONS_TIMEOUT     seconds a mutant's test run may take (600)
#   CHAOS_SEEDS                passed on to the test (default there: 4)
#
# The test runs with CHAOS_ORACLE_ONLY=1: its last check, which reads the
# crate's own in-flight and queue counts, is off, so a mutant counts as
# caught only when the independent oracle catches it.
#
# Exit status: 0 when the unmutated test passes and every mutant is caught;
# 1 when a mutant is missed or does not build; 2 when the unmutated test
# fails or a patch no longer applies (the source changed: update the patch
# here rather than test nothing).
#
# The two files are copied aside first and put back after each mutant and on
# any exit (Ctrl-C included). A mutated file starts with a `GATE-MUTANT`
# line, so that a run killed beyond any trap (kill -9) is easy to spot; the
# script refuses to start while such a line is there.
set -euo pipefail
for tool in git python3 cargo timeout; do
    command -v "$tool" >/dev/null || { echo "$0 needs $tool" >&2; exit 2; }
done
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"

FILES=(src/slot/gate.rs src/slot/mod.rs)
export CARGO_TARGET_DIR="${GATE_MUTATIONS_TARGET_DIR:-${CARGO_TARGET_DIR:-$(.ci/mutation-target-dir gate-mutations)}}"
TIMEOUT="${GATE_MUTATIONS_TIMEOUT:-600}"
# Only the oracle may catch a mutant, not the test's last check on the
# crate's own counts.
export CHAOS_ORACLE_ONLY=1

work="$(mktemp -d "${TMPDIR:-/tmp}/gate-mutations.XXXXXX")"

# The mutants: name, file, what the break is, and the exact text it replaces
# (which must occur exactly once).
cat >"$work/mutate.py" <<'PY'
import sys

MUTANTS = [
    ("limit-off-by-one", "src/slot/gate.rs",
     "admits one more than the limit",
     "if state.in_flight as usize >= limit || delay == Duration::MAX {",
     "if state.in_flight as usize > limit || delay == Duration::MAX {"),
    ("no-delay", "src/slot/gate.rs",
     "ignores the delay between dispatches",
     ".map(|last| crate::time::after(last, state.signals.gap(delay)))",
     ".map(|last| crate::time::after(last, Duration::ZERO))"),
    ("no-retry-after-pause", "src/slot/gate.rs",
     "ignores the Retry-After pause",
     "let paused = state.signals.paused_until();",
     "let paused: Option<Instant> = None;"),
    ("double-release", "src/slot/gate.rs",
     "a permit gives its place back twice",
     "        if !self.released() {\n            self.slot.release();\n        }\n",
     "        if !self.released() {\n            self.slot.release();\n            self.slot.release();\n        }\n"),
    ("never-release", "src/slot/gate.rs",
     "a permit never gives its place back",
     "        if !self.released() {\n            self.slot.release();\n        }\n",
     "        let _ = self.released();\n"),
    ("end-release-then-drop-release", "src/slot/gate.rs",
     "a place given back with the sample is given back again by the drop",
     "        if release {\n            self.seq |= RELEASED;\n        }\n",
     "        let _ = release;\n"),
    ("admit-non-head", "src/slot/gate.rs",
     "any waiter may go, not only the head of the queue",
     "if state.waiters.keys().next() != Some(&ticket) {",
     "if false && state.waiters.keys().next() != Some(&ticket) {"),
    ("quiet-limit-off-by-one", "src/slot/gate.rs",
     "a quiet slot without a delay admits one more than the limit",
     "if (state.in_flight as usize) < state.throttle.concurrency().max(1) {",
     "if (state.in_flight as usize) <= state.throttle.concurrency().max(1) {"),
    ("fast-path-jumps-queue", "src/slot/gate.rs",
     "a new request goes at once when the gate is open, even past waiters",
     "if state.waiters.is_empty() && matches!(open(&state, now), Decision::Admit) {",
     "if matches!(open(&state, now), Decision::Admit) {"),
    ("in-flight-counted-twice", "src/slot/gate.rs",
     "a dispatch takes two places",
     "    state.in_flight += 1;\n    state.dispatched += 1;\n",
     "    state.in_flight += 2;\n    state.dispatched += 1;\n"),
    ("admitted-head-wakes-nobody", "src/slot/gate.rs",
     "the next waiter is not told it is the head",
     "let next = state.take_head_waker();",
     "let next: Option<std::task::Waker> = None;"),
    ("dropped-head-wakes-nobody", "src/slot/gate.rs",
     "a head that gives up does not pass its turn on",
     "            if was_head {\n                state.take_head_waker()",
     "            if was_head && false {\n                state.take_head_waker()"),
    ("release-subtracts-two", "src/slot/mod.rs",
     "a release gives back two places (hidden by saturating_sub)",
     "        self.in_flight = self.in_flight.saturating_sub(1);\n",
     "        self.in_flight = self.in_flight.saturating_sub(2);\n"),
    ("end-never-releases", "src/slot/mod.rs",
     "a place given back with the sample is not given back",
     "                state.give_back(now);\n",
     "                state.last_used = now;\n"),
    ("release-wakes-nobody", "src/slot/mod.rs",
     "a freed place does not wake the head",
     "            state.give_back(Instant::now());\n            state.take_head_waker()\n",
     "            state.give_back(Instant::now());\n            None::<Waker>\n"),
    ("new-throttle-wakes-nobody", "src/slot/mod.rs",
     "a new delay, limit or pause does not wake the head",
     "            let wake = if changed || ended.release {\n",
     "            let wake = if ended.release {\n"),
    ("quiet-new-throttle-wakes-nobody", "src/slot/mod.rs",
     "a new delay or limit on a quiet slot does not wake the head",
     "None if state.signals.is_quiet() && state.throttle == throttle_before => false,",
     "None if state.signals.is_quiet() => false,"),
    ("policy-answer-ignored", "src/slot/mod.rs",
     "the slot keeps its first delay and limit",
     "state.throttle = state.policy.on_sample(&sample);",
     "let _ = state.policy.on_sample(&sample);"),
    ("evict-with-requests-in-flight", "src/slot/mod.rs",
     "a slot with requests in flight may be evicted",
     "let busy = state.in_flight > 0 || !state.waiters.is_empty();",
     "let busy = !state.waiters.is_empty();"),
    ("evict-paused", "src/slot/mod.rs",
     "a slot paused by Retry-After may be evicted",
     "let paused = state.signals.paused_until().is_some_and(|p| p > now);",
     "let paused = false;"),
    ("evict-before-delay-ends", "src/slot/mod.rs",
     "a slot may be evicted before its delay since the last dispatch ran out",
     "(!busy && !paused && !spacing).then_some(state.last_used)",
     "(!busy && !paused).then_some(state.last_used)"),
]

MARK = "// GATE-MUTANT {}: made by .ci/gate-mutations.sh; `git checkout` this file if you see this line\n"

def main():
    cmd = sys.argv[1]
    if cmd == "list":
        for name, path, what, _, _ in MUTANTS:
            print(f"{name}\t{path}\t{what}")
        return 0
    if cmd == "check":
        # Every patch must apply to the unmutated sources.
        bad = 0
        for name, path, _, old, _ in MUTANTS:
            n = open(path, encoding="utf-8").read().count(old)
            if n != 1:
                print(f"{name}: the text to replace occurs {n} times in {path}, not once:\n{old}", file=sys.stderr)
                bad += 1
        return 1 if bad else 0
    if cmd == "apply":
        name = sys.argv[2]
        found = [m for m in MUTANTS if m[0] == name]
        if not found:
            print(f"no mutant {name!r}", file=sys.stderr)
            return 1
        _, path, _, old, new = found[0]
        text = open(path, encoding="utf-8").read()
        n = text.count(old)
        if n != 1:
            print(f"{name}: the text to replace occurs {n} times in {path}, not once:\n{old}", file=sys.stderr)
            return 1
        open(path, "w", encoding="utf-8").write(MARK.format(name) + text.replace(old, new))
        return 0
    print(f"unknown command {cmd!r}", file=sys.stderr)
    return 1

sys.exit(main())
PY

mutate() { python3 "$work/mutate.py" "$@"; }

if [[ "${1:-}" == "--list" ]]; then
    mutate list | while IFS=$'\t' read -r name file what; do
        printf '%-32s %-18s %s\n' "$name" "$file" "$what"
    done
    rm -rf "$work"
    exit 0
fi

for f in "${FILES[@]}"; do
    if grep -q '^// GATE-MUTANT' "$f"; then
        echo "$f still carries a mutant from a run that was killed: restore it (git checkout -- $f) first" >&2
        rm -rf "$work"
        exit 2
    fi
    cp "$f" "$work/$(basename "$f").orig"
done

# Puts the files back (a fresh copy, so that cargo sees them as changed and
# rebuilds) when they differ from what was there at the start.
restore() {
    local f
    for f in "${FILES[@]}"; do
        if ! cmp -s "$work/$(basename "$f").orig" "$f"; then
            cp "$work/$(basename "$f").orig" "$f"
        fi
    done
}
cleanup() {
    local status=$?
    trap - EXIT INT TERM HUP
    restore
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

names=()
if (($#)); then
    names=("$@")
else
    mapfile -t names < <(mutate list | cut -f1)
fi
known="$(mutate list | cut -f1)"
for name in "${names[@]}"; do
    if ! grep -qx -- "$name" <<<"$known"; then
        echo "no mutant $name (see --list)" >&2
        exit 2
    fi
done

if ! mutate check; then
    echo "a patch no longer applies: the gate's source changed; update .ci/gate-mutations.sh" >&2
    exit 2
fi

echo "target dir: $CARGO_TARGET_DIR"
echo "== unmutated"
if ! cargo test -q --all-features --test chaos >"$work/unmutated.log" 2>&1; then
    tail -n 40 "$work/unmutated.log" >&2
    echo "the unmutated chaos test fails: nothing to learn from mutants" >&2
    exit 2
fi
echo "passes"

results=()
missed=0
for name in "${names[@]}"; do
    restore
    echo "== $name"
    if ! mutate apply "$name"; then
        echo "a patch no longer applies: the gate's source changed; update .ci/gate-mutations.sh" >&2
        exit 2
    fi
    log="$work/$name.log"
    if ! cargo test -q --all-features --test chaos --no-run >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        results+=("$name|DOES NOT BUILD|")
        missed=$((missed + 1))
        continue
    fi
    set +e
    timeout "$TIMEOUT" cargo test -q --all-features --test chaos >>"$log" 2>&1
    status=$?
    set -e
    # The test functions that failed, from libtest's summary, named short.
    failed="$(sed -n '/^failures:$/,/^test result/p' "$log" |
        sed -n 's/^    \([a-z_]*\)$/\1/p' | sort -u |
        sed -e 's/^calm_exact_limits_and_delays_while_slots_are_evicted$/calm+evict/' \
            -e 's/^calm_exact_limits_and_delays$/calm/' \
            -e 's/^hostile_no_violation_while_slots_are_evicted$/hostile+evict/' \
            -e 's/^hostile_no_violation$/hostile/' |
        paste -sd' ' -)"
    case "$status" in
        0)
            results+=("$name|MISSED|")
            missed=$((missed + 1))
            ;;
        124)
            results+=("$name|caught (timed out after ${TIMEOUT}s)|")
            ;;
        *)
            results+=("$name|caught|$failed")
            # The first violation the oracle reported, for the record.
            first="$(grep -m1 -A1 'problems; the first ones:' "$log" | tail -n1 || true)"
            [[ -n "$first" ]] && echo "   e.g. $first"
            ;;
    esac
    row="${results[-1]}"
    echo "   -> $(cut -d'|' -f2 <<<"$row") $(cut -d'|' -f3 <<<"$row")"
done
restore

echo
printf '%-32s %-14s %s\n' "mutant" "result" "failing tests"
printf '%-32s %-14s %s\n' "------" "------" "-------------"
for row in "${results[@]}"; do
    IFS='|' read -r name result failed <<<"$row"
    printf '%-32s %-14s %s\n' "$name" "$result" "$failed"
done
if ((missed)); then
    echo
    echo "$missed mutant(s) not caught" >&2
    exit 1
fi
