#!/usr/bin/env bash
# One H100 call: every GPU test (pytest -m gpu), then how long the graded checks hold the GPU (docs/hub.md).
#   OUT=... bash tools/gpu_jobs/lead/runs_c.sh .whl-nb      -> $OUT/c.tgz
set -u
OUT=${OUT:-/tmp/out}; W=$OUT/c
. tools/gpu_jobs/env.sh "${1:-.whl-nb}" "$W"
echo "== gpu tests ($(date +%T))"

timeout 330 python3 -m pytest -m gpu -q -p no:cacheprovider tests > "$W/gpu-tests.log" 2>&1; echo "rc=$?"
grep -E "passed|failed|FAILED|ERROR" "$W/gpu-tests.log" | tail -25
echo "== time checks ($(date +%T))"
OUT=$W timeout 200 python3 tools/gpu_jobs/hub/time_checks.py > "$W/time_checks.log" 2>&1; echo "rc=$?"
tail -30 "$W/time_checks.log"
tar czf "$OUT/c.tgz" -C "$OUT" c
