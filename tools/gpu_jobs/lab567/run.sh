#!/usr/bin/env bash
# Labs 5-7 on one H100, from the repository root: each solution kernel through its grader (random non-square shapes
# against fp64, Lab 5 and Lab 6 timed at 4096^3 beside cuBLAS, Lab 7 beside Lab 6 and cuBLAS on its two quantized
# shapes), then the wrong kernels only a run can catch, which the graders must reject on the GPU too.
#   OUT=/some/dir bash tools/gpu_jobs/lab567/run.sh      (about 2-3 minutes)
# Produces $OUT/gpu_lab567.json (every expectation, its outcome and the grader's output), gpu_lab567.log, env.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; date -u; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout 240 python3 tests/labs/gpu_lab567.py "$OUT" > "$OUT/gpu_lab567.log" 2>&1; echo "rc=$?"
grep -E "^(OK|BAD)|timed|TFLOP/s|PROBLEMS|all expectations" "$OUT/gpu_lab567.log"
