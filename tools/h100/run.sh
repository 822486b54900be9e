#!/usr/bin/env bash
# One call on a machine with an H100, from the repository root: the named captures, each into $OUT, with the GPU,
# driver, clocks and date in $OUT/env.txt. The table in tools/README.md says which fixture each one writes.
#   bash tools/h100/run.sh [--wheels DIR] NAME...
# NAME: a script of this folder (race_rates, pipeline_trace, executor_vs_h100, ...), or gpu-tests, validate, ladder,
# shapes, shapes-small, matmul, lab4, lab5679. --wheels installs carried wheels first (the H100 machine has no Jupyter).
set -u
WHEELS=""
if [ "${1:-}" = "--wheels" ]; then WHEELS=$2; shift 2; fi
. tools/h100/env.sh "$WHEELS"
status=0
for name in "$@"; do
  echo "== $name ($(date -u +%T))"
  case $name in
    gpu-tests) cmd=(python3 -m pytest -m gpu -q -p no:cacheprovider tests --ignore=tests/hub) ;;  # the hub needs nbgrader
    validate) cmd=(python3 -m helpers.course.labgen validate --jobs 3) ;;
    ladder) cmd=(python3 bench/ladder.py --write "$OUT/ladder") ;;
    shapes) cmd=(python3 bench/shapes.py --write "$OUT/shapes") ;;
    shapes-small) cmd=(python3 bench/shapes.py --only small --write "$OUT/shapes-small") ;;
    matmul) cmd=(python3 -m pytest -m gpu -v -p no:cacheprovider tests/gpu/test_matmul.py tests/gpu/test_interleave.py) ;;
    lab4) cmd=(python3 tests/labs/gpu_lab4.py "$OUT") ;;
    lab5679) cmd=(python3 tests/labs/gpu_lab5679.py "$OUT") ;;
    mbarrier) cmd=(python3 tools/h100/mbarrier.py "$OUT/mbarrier_h100.json") ;;
    tma_wgmma | streamk) cmd=(python3 "tools/h100/$name.py" --out "$OUT") ;;
    lab[5-9]_carried) cmd=(python3 tools/h100/carried.py "${name:3:1}" "$OUT") ;;
    *)
      if [ ! -f "tools/h100/$name.py" ]; then echo "no capture named $name (see tools/README.md)"; status=2; continue; fi
      cmd=(python3 "tools/h100/$name.py" "$OUT") ;;
  esac
  timeout "${TIMEOUT_S:-500}" "${cmd[@]}" > "$OUT/$name.log" 2>&1
  rc=$?
  echo "rc=$rc"
  tail -"${TAIL:-15}" "$OUT/$name.log"
  [ $rc -ne 0 ] && status=$rc
done
exit $status
