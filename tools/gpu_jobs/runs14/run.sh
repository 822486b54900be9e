#!/usr/bin/env bash
# Labs 1-4's CUDA checks on one H100, from the repository root, through the one run path: the solutions (Lab 3 and
# Lab 4 timed beside cuBLAS) and the named wrong kernels, each line saying whether the run or the PTX rejected it.
#   bash tools/gpu_jobs/runs14/run.sh [WHEELS_DIR]     (about 2-3 minutes; results in $OUT/runs14.json and .log)
# With WHEELS_DIR, the course's wheels are installed first, as tools/gpu_jobs/lab4/run.sh does.
set -u
. tools/gpu_jobs/env.sh "${1:-}"
timeout 420 python3 tools/gpu_jobs/runs14/runs.py "$OUT" 2>&1 | tee "$OUT/runs14.log"; echo "rc=${PIPESTATUS[0]}"
