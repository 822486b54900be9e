#!/usr/bin/env bash
# Lessons 05-06 / Labs 5-6 on one H100 (about 3 minutes): the silicon capture, the GPU tests of both labs (their
# graders run the solution kernels on random shapes and time them beside cuBLAS at 4096³ and 8192³), and, when
# Jupyter wheels are carried (as for tools/run_on_h100.sh), the four notebooks executed with the GPU.
#   bash tools/gpu_jobs/lab56/run.sh [WHEELS_DIR]
# Output in $OUT: env.txt, lab56_h100.json (copy to tests/data/), capture.log, gpu-tests.log, validate.log.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
WHEELS=${1:-}
if [ -n "$WHEELS" ] && ls "$WHEELS"/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$WHEELS"/*.whl && export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
fi
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u;
  python3 -c "import cuda.core, cuda.bindings, numpy; print('cuda.core', cuda.core.__version__, 'cuda.bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
echo "== capture"
timeout 120 python3 tools/gpu_jobs/lab56/capture.py "$OUT" > "$OUT/capture.log" 2>&1; echo "rc=$?"
cat "$OUT/capture.log"
echo "== GPU tests: Labs 5 and 6, Lessons 05-06"
timeout 300 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/labs/test_lab5.py tests/labs/test_lab6.py \
  tests/lessons/test_lesson05_06.py > "$OUT/gpu-tests.log" 2>&1; echo "rc=$?"
grep -E "timed:|passed|failed|❌|Error" "$OUT/gpu-tests.log" | head -40
if python3 -c "import nbclient" 2> /dev/null; then
  echo "== notebooks with the GPU"
  timeout 400 python3 -m helpers.labgen validate --jobs 2 --only 5_ > "$OUT/validate.log" 2>&1; echo "rc=$?"
  timeout 400 python3 -m helpers.labgen validate --jobs 2 --only 6_ >> "$OUT/validate.log" 2>&1; echo "rc=$?"
  cat "$OUT/validate.log"
else
  echo "(no nbclient: notebooks not executed; pass the Jupyter wheels directory to run them)"
fi
