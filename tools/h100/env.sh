# Sourced by tools/h100/run.sh, from the repository root: `. tools/h100/env.sh [WHEELS_DIR] [ENV_DIR]`.
# Installs the course's carried wheels into /tmp/site when WHEELS_DIR is given (the H100 machine has no Jupyter),
# puts the repository (and /tmp/site) on PYTHONPATH, and writes the GPU, its driver, clocks and the date to
# ENV_DIR/env.txt (default $OUT), echoing them.
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -n "${1:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$1"/*.whl \
    || exit 1
  export PYTHONPATH=/tmp/site:$PWD
  export PATH=/tmp/site/bin:$PATH
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
mkdir -p "${2:-$OUT}"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; date -u; } \
  > "${2:-$OUT}/env.txt" 2>&1
cat "${2:-$OUT}/env.txt"
