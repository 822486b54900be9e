#!/usr/bin/env bash
# On the H100 machine: the ladder (correctness + speed beside cuBLAS, SM clock) and the GPU runtime tests.
#   bash tools/gpu_jobs/lead/ladder.sh [ladder args...]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; date -u;
  python3 -c "import cuda.core, cuda.bindings, numpy; print('cuda.core', cuda.core.__version__, 'cuda.bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout 420 python3 bench/ladder.py --write "$OUT/ladder" "$@" 2>&1 | tee "$OUT/ladder.log" | grep -v "^|"
echo "== GPU runtime tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu > "$OUT/gpu-tests.log" 2>&1; echo "rc=$?"
tail -5 "$OUT/gpu-tests.log"
