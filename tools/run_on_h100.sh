#!/usr/bin/env bash
# One call on the H100 machine (no Jupyter there): install carried wheels, then run everything that needs the GPU
# and leave the logs in $OUT. Used through the device tool, with the wheels directory carried:
#   bash tools/run_on_h100.sh .whl-nb
set -u
WHEELS=${1:-.whl-nb}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD
export PATH=/tmp/site/bin:$PATH
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; python3 -c "import cuda.core, cuda.bindings; print('cuda.core', cuda.core.__version__, 'cuda.bindings', cuda.bindings.__version__)"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
echo "== GPU tests"
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests > "$OUT/gpu-tests.log" 2>&1; echo "gpu tests rc=$?"
tail -3 "$OUT/gpu-tests.log"
echo "== mbarrier capture"
timeout 120 python3 tools/silicon/capture_mbarrier.py "$OUT/mbarrier_h100.json" > "$OUT/mbarrier.log" 2>&1; echo "rc=$?"
tail -2 "$OUT/mbarrier.log"
echo "== notebooks (lessons, solutions, labs) with the GPU"
timeout 400 python3 -m helpers.labgen validate --jobs 3 > "$OUT/validate.log" 2>&1; echo "validate rc=$?"
cat "$OUT/validate.log"
