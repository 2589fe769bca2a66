#!/usr/bin/env bash
# Breaks the simulator's nginx-style server models (limit-req, limit-conn)
# on purpose, one way at a time, and checks that their tests in
# tests/simulator.rs catch each break.
#
# Usage, from anywhere in the repository:
#   .ci/sim-model-breaks.sh
#
# Each mutant is an exact-text patch of examples/simulate/sim.rs (the text
# must occur exactly once: if the source changed, update the patch here
# rather than test nothing). The file is put back after each mutant and on
# any exit. Exit status: 0 when the unmutated tests pass and every mutant is
# caught; 1 when one is missed; 2 when a patch no longer applies or the
# unmutated tests fail.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
export CARGO_TARGET_DIR="${SIM_BREAKS_TARGET_DIR:-${CARGO_TARGET_DIR:-$(.ci/mutation-target-dir sim-breaks)}}"
python3 - <<'PY'
import shutil, subprocess, sys

FILE = "examples/simulate/sim.rs"
TESTS = [
    "limit_req_answers_503_without_retry_after_beyond_its_rate",
    "limit_conn_refuses_beyond_its_workers_and_queues_nothing",
]
MUTANTS = [
    ("limit-req-admits-beyond-its-rate",
     "                        if s.tokens >= 1.0 {",
     "                        if true {"),
    ("limit-req-sends-retry-after",
     "                        } else if retry_after {",
     "                        } else if true {"),
    ("limit-conn-queues",
     "} else if max_queue.is_some_and(|m| s.queue.len() >= m) {",
     "} else if max_queue.is_some_and(|m| m > 0 && s.queue.len() >= m) {"),
]

def passes():
    for t in TESTS:
        r = subprocess.run(["cargo", "test", "-q", "--release", "--test", "simulator", t],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r.returncode != 0:
            return False
    return True

original = open(FILE).read()
try:
    if not passes():
        print("the unmutated tests fail", file=sys.stderr)
        sys.exit(2)
    missed = 0
    for name, old, new in MUTANTS:
        if original.count(old) != 1:
            print(f"{name}: the patch no longer applies", file=sys.stderr)
            sys.exit(2)
        open(FILE, "w").write(original.replace(old, new))
        caught = not passes()
        print(f"{name}: {'caught' if caught else 'MISSED'}")
        missed += not caught
    sys.exit(1 if missed else 0)
finally:
    open(FILE, "w").write(original)
PY
