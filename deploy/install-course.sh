#!/usr/bin/env bash
# Install the course for every user of a Python environment: the course package (not editable, no solutions, no
# answer key: helpers.course.answerkey),
# JupyterLab, nbgrader and JupyterHub's single-user server; the lessons and student labs; nbgrader set up for
# students (no formgrader), with the exchange directory and course id.
#
# The container image runs it into the image's environment (deploy/Dockerfile); `make hub` runs it into a fresh
# venv (hub/setup.sh); the test suite runs it too (tests/hub/test_deploy.py).
#
#   deploy/install-course.sh [--venv DIR] [--python PY] [--exchange DIR] [--extras gpu] [--answer-key FILE]
#                            [--labs "lab1_tma ..."|all] SOURCE
#
# SOURCE is a checkout of the course (its solutions/ are never copied). Without --venv it installs with the
# `python3` on PATH; with --venv it makes the venv from PY (default python3). The answers, solved kernels and
# kernel skeletons of the course's data are taken out of what is installed; --answer-key keeps them in FILE (the
# instructor's, mode 0600). --labs names the labs every user gets a copy of (default all; a class gets the others
# as the instructor releases them, since a later lab gives the earlier labs' answers as its starting code).
set -euo pipefail

VENV="" BASE_PY=python3 EXCHANGE="/srv/nbgrader/exchange" EXTRAS="" KEY="" LABS=all
while [ $# -gt 1 ]; do
  case "$1" in
    --venv) VENV=$2; shift 2 ;;
    --python) BASE_PY=$2; shift 2 ;;
    --exchange) EXCHANGE=$2; shift 2 ;;
    --extras) EXTRAS="[$2]"; shift 2 ;;
    --answer-key) KEY=$2; shift 2 ;;
    --labs) LABS=$2; shift 2 ;;
    *) echo "install-course.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
SOURCE=$(cd "${1:?usage: install-course.sh [--venv DIR] [--python PY] [--exchange DIR] [--extras gpu] SOURCE}" && pwd)
COURSE_ID=hopper-gemm

if [ -n "$VENV" ]; then
  [ -x "$VENV/bin/python" ] || "$BASE_PY" -m venv "$VENV"
  PY="$VENV/bin/python"
else
  PY=python3
fi
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "the course needs Python >= 3.11"'
PREFIX=$("$PY" -c 'import sys; print(sys.prefix)')
BIN="$PREFIX/bin"
echo "== installing the course into $PREFIX"

# 1. the packages. The course is built from a copy of its package files, so nothing else of SOURCE (solutions/,
#    .git) can end up in the environment.
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
cp -r "$SOURCE/pyproject.toml" "$SOURCE/README.md" "$SOURCE/helpers" "$BUILD/"
find "$BUILD" -name __pycache__ -prune -exec rm -rf {} +
"$PY" -I "$BUILD/helpers/course/answerkey.py" strip "$BUILD/helpers" ${KEY:+--key "$KEY"}
"$PY" -m pip install --disable-pip-version-check -q --upgrade pip
"$PY" -m pip install --disable-pip-version-check -q "$BUILD$EXTRAS" -r "$SOURCE/deploy/requirements.txt"

# 2. the kernel every notebook uses
"$PY" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)" >/dev/null

# 3. what students start from: lessons and generated labs (copied into each home by hopper-course-home)
SHARE="$PREFIX/share/hopper-gemm/course"
rm -rf "$SHARE" && mkdir -p "$SHARE/lessons" "$SHARE/labs"
cp "$SOURCE"/lessons/*.ipynb "$SHARE/lessons/"
for lab in "$SOURCE"/labs/*.ipynb; do
  name=$(basename "$lab" .ipynb)
  case "$lab" in *.new.ipynb) continue ;; esac
  if [ "$LABS" = all ] || [[ " $LABS " == *" $name "* ]]; then cp "$lab" "$SHARE/labs/"; fi
done
chmod -R a+rX "$SHARE"
install -m 0755 "$SOURCE/deploy/hopper-course-home" "$BIN/hopper-course-home"

# 4. nbgrader for students: the assignment list and validation, not the instructor's tools (an instructor enables
#    those for themselves, see docs/hub.md); the course id and the exchange directory for everyone
"$BIN/jupyter" labextension disable --level=sys_prefix @jupyter/nbgrader:formgrader \
  @jupyter/nbgrader:create-assignment @jupyter/nbgrader:course-list >/dev/null 2>&1
# an instructor may switch them back on for themselves (a first disable also locks the plugin: undo that)
"$BIN/jupyter" labextension unlock --level=sys_prefix @jupyter/nbgrader:formgrader >/dev/null 2>&1
# no "news" pop-up fetched from the internet in a classroom
"$BIN/jupyter" labextension disable --level=sys_prefix @jupyterlab/apputils-extension:announcements >/dev/null 2>&1
"$BIN/jupyter" server extension disable --sys-prefix nbgrader.server_extensions.formgrader \
  nbgrader.server_extensions.course_list >/dev/null 2>&1
mkdir -p "$PREFIX/etc/jupyter"
cat > "$PREFIX/etc/jupyter/nbgrader_config.py" <<CONFIG
# Written by deploy/install-course.sh: every user of this environment takes part in the same nbgrader course.
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "$COURSE_ID"
c.Exchange.root = "$EXCHANGE"
CONFIG

# 5. a smoke test of what was installed
"$PY" -I - <<'CHECK'  # -I: the installed course, whatever PYTHONPATH says
import importlib, pathlib, sys
for name in ("helpers.course.checks.lab1", "helpers.course.autograde", "helpers.gpu.gpulock", "nbgrader", "jupyterhub", "jupyterlab"):
    importlib.import_module(name)
import helpers
pkg = pathlib.Path(helpers.__file__).parent
assert (pkg / "include" / "hopper.cuh").is_file(), "the device header was not installed"
assert not list(pathlib.Path(sys.prefix).rglob("solutions")), "solutions/ must not be installed"
import json
data = json.loads((pkg / "course" / "data" / "labs.json").read_text())
assert not data["kernels"] and not any("answer" in r for e in data["exercises"].values() for r in e["regions"]), \
    "the answer key must not be installed"
print(f"course {helpers.__version__} installed in {sys.prefix}")
CHECK
