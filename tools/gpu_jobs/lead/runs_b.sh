#!/usr/bin/env bash
# One H100 call: every notebook (lessons, solutions, student labs) executed top to bottom with the GPU.
#   OUT=... bash tools/gpu_jobs/lead/runs_b.sh .whl-nb      -> $OUT/b/validate.log
set -u
OUT=${OUT:-/tmp/out}; W=$OUT/b
. tools/gpu_jobs/env.sh "${1:-.whl-nb}" "$W"
timeout "${VALIDATE_S:-520}" python3 -m helpers.labgen validate --jobs 4 > "$W/validate.log" 2>&1; echo "validate rc=$?"
grep -v "over TCP" "$W/validate.log" | cut -c1-600 | tail -60
