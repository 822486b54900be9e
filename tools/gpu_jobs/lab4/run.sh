#!/usr/bin/env bash
# Lab 4 on one H100, from the repository root: the lab's kernels through their graders (and the wrong kernels),
# the Lab 3 timeline capture, the setmaxnreg budgets and the early-release corruption. Results in $OUT.
#   bash tools/gpu_jobs/lab4/run.sh [WHEELS_DIR]     (about 3 minutes)
# With WHEELS_DIR, the course's wheels are installed first, as tools/run_on_h100.sh does.
set -u
. tools/gpu_jobs/env.sh "${1:-}"
echo "== Lab 4 kernels through the graders (solutions timed at 4096^3, wrong kernels rejected; lab4_speeds.json)"
timeout 300 python3 tests/labs/gpu_lab4.py "$OUT" > "$OUT/gpu_lab4.log" 2>&1; echo "rc=$?"
grep -E "^(OK|BAD)|timed|target|PROBLEMS|all expectations|Lab 3 kernel" "$OUT/gpu_lab4.log"
echo "== Lab 3 timeline (clock64)"
timeout 120 python3 tools/gpu_jobs/lab4/timeline.py "$OUT" > "$OUT/timeline.log" 2>&1; echo "rc=$?"
tail -8 "$OUT/timeline.log"
echo "== setmaxnreg budgets and the early release"
timeout 200 python3 tools/gpu_jobs/lab4/setmaxnreg.py "$OUT" > "$OUT/setmaxnreg.log" 2>&1; echo "rc=$?"
tail -10 "$OUT/setmaxnreg.log"
