#!/usr/bin/env bash
# One H100 call: every notebook (lessons, solutions, student labs) executed top to bottom with the GPU.
#   OUT=... bash tools/gpu_jobs/lead/runs_b.sh .whl-nb      -> $OUT/b/validate.log
set -u
OUT=${OUT:-/tmp/out}; W=$OUT/b; mkdir -p "$W"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${1:-.whl-nb}"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; date -u; } > "$W/env.txt" 2>&1
cat "$W/env.txt"
timeout "${VALIDATE_S:-520}" python3 -m helpers.labgen validate --jobs 4 > "$W/validate.log" 2>&1; echo "validate rc=$?"
grep -v "over TCP" "$W/validate.log" | cut -c1-600 | tail -60
