#!/usr/bin/env bash
# Breaks the lazy policy state (src/policy/lazy.rs) on purpose, one way at
# a time, and checks that its tests catch every break: they compare it,
# answer by answer, with a state kept from the start, which is independent
# of the replay.
#
# Usage, from anywhere in the repository:  .ci/lazy-mutations.sh
# Environment: LAZY_MUTATIONS_TARGET_DIR (else CARGO_TARGET_DIR, else
# $TMPDIR/tower-autothrottle-lazy-mutations-N, N a checksum of the
# checkout's path).
#
# Exit status: 0 when the unmutated tests pass and every mutant is caught;
# 1 when a mutant is missed; 2 when the tests fail unmutated or a patch no
# longer applies (update the patch here rather than test nothing).
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
export CARGO_TARGET_DIR="${LAZY_MUTATIONS_TARGET_DIR:-${CARGO_TARGET_DIR:-$(.ci/mutation-target-dir lazy-mutations)}}"
FILE=src/policy/lazy.rs
saved="$(mktemp)"
cp "$FILE" "$saved"
trap 'cp "$saved" "$FILE"; rm -f "$saved"' EXIT

run() { cargo test -q --lib policy::lazy >/dev/null 2>&1; }

if ! run; then
    echo "the lazy policy's tests fail unmutated" >&2
    exit 2
fi

missed=0
mutant() {
    local name="$1" from="$2" to="$3"
    cp "$saved" "$FILE"
    python3 .ci/replace-once.py "$FILE" "$from" "$to" || exit 2
    if run; then
        echo "MISSED  $name"
        missed=1
    else
        echo "caught  $name"
    fi
}

mutant "replay-skips-the-first-answer" \
    "for answer in answers {" "for answer in answers.iter().skip(1) {"
mutant "new-answer-not-kept" \
    "answers.push(answer);" "let _ = answer;"
mutant "state-made-one-answer-late" \
    "Some(answer) if answers.len() < EARLY =>" "Some(answer) if answers.len() <= EARLY =>"
mutant "kept-answer-loses-its-pause" \
    "pause: self.pause," "pause: 0.0,"
mutant "kept-answer-loses-its-end-time" \
    "timed: self.timed," "timed: false,"
mutant "warm-start-dropped" \
    "state.warm(learned, latency);
        self.stage" "self.stage"
exit "$missed"
