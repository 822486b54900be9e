#!/usr/bin/env bash
# Labs 1-3 on one H100, run from the repo root (no Jupyter there; nbclient and friends come as carried wheels):
#   bash tools/gpu_jobs/labs123/run.sh .whl-nb
# Writes into $OUT: env.txt, gpu-tests.log (the labs' GPU tests: solutions run, wrong kernels rejected),
# validate.log + executed/ (the three solution notebooks and the three student labs, executed with the GPU),
# labs123.json + measure.log (Lab 2 and Lab 3 at 4096³ beside cuBLAS, Lab 3 at 8192³, the bug hunt's race rate
# over 20 runs, the fixed kernel's 20 runs, a .3d load on a rank-2 map). About 3 minutes.
set -u
WHEELS=${1:-.whl-nb}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD
export PATH=/tmp/site/bin:$PATH
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; date -u;
  python3 -c "import cuda.core, cuda.bindings; print('cuda.core', cuda.core.__version__, 'cuda.bindings', cuda.bindings.__version__)"; } \
  > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
echo "== the labs' GPU tests"
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests/labs > "$OUT/gpu-tests.log" 2>&1; echo "gpu tests rc=$?"
tail -5 "$OUT/gpu-tests.log"
echo "== measurements"
timeout 400 python3 tools/gpu_jobs/labs123/measure.py "$OUT" > "$OUT/measure.log" 2>&1; echo "measure rc=$?"
cat "$OUT/measure.log"
echo "== Labs 1-3 notebooks (solutions and student labs) with the GPU"
timeout 500 python3 -m helpers.labgen validate --kind solution --kind lab --only lab --jobs 3 \
  --save-executed "$OUT/executed" > "$OUT/validate.log" 2>&1; echo "validate rc=$?"
grep -v "Kernel is running over TCP" "$OUT/validate.log"
