#!/usr/bin/env bash
# One H100 call: Lab 2's race rates, the Lab 4 trace, Labs 1-4's and Labs 5-7's CUDA checks through the run path.
#   OUT=... bash tools/gpu_jobs/lead/runs_a.sh .whl-nb      -> $OUT/a.tgz
set -u
OUT=${OUT:-/tmp/out}; W=$OUT/a
. tools/gpu_jobs/env.sh "${1:-.whl-nb}" "$W"
t() { echo "== $1 ($(date +%T))"; }
t race;   timeout 100 python3 tools/gpu_jobs/lead/race_rates.py "$W" > "$W/race.log" 2>&1; echo "rc=$?"; tail -15 "$W/race.log"
t trace;  OUT=$W timeout 70 python3 tools/gpu_jobs/hazard/trace_h100.py > "$W/trace.log" 2>&1; echo "rc=$?"; tail -8 "$W/trace.log"
t runs14; timeout 150 python3 tools/gpu_jobs/runs14/runs.py "$W" > "$W/runs14.log" 2>&1; echo "rc=$?"; tail -25 "$W/runs14.log"
t lab567; timeout 150 python3 tests/labs/gpu_lab567.py "$W" > "$W/gpu_lab567.log" 2>&1; echo "rc=$?"
grep -E "^(OK|BAD)|timed|TFLOP/s|PROBLEMS|all expectations" "$W/gpu_lab567.log" | tail -30
t done; tar czf "$OUT/a.tgz" -C "$OUT" a
