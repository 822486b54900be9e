#!/usr/bin/env bash
# On the H100 machine, from the repository root: Lab 7's check on the solution kernel and the fix-up experiments
# (determinism, wrong fix-ups at run time, residency, a message-passing litmus test). About 1-2 minutes.
#   OUT=/some/dir bash tools/gpu_jobs/lab7/run.sh
# Produces $OUT/streamk_h100.json (copy it to tests/data/ for the lesson), $OUT/grader.txt, $OUT/lab7.log, env.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u;
  python3 -c "import cuda.core, cuda.bindings, numpy; print('cuda.core', cuda.core.__version__, 'cuda.bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout 175 python3 tools/gpu_jobs/lab7/lab7_gpu.py --out "$OUT" 2>&1 | tee "$OUT/lab7.log"
echo "rc=${PIPESTATUS[0]}"
