#!/usr/bin/env bash
# Set up a JupyterHub on this machine for a class: the course installed for every user, real Unix accounts for
# the instructor and the students, nbgrader's exchange, and autograding as an unprivileged account.
# Run as root; `make hub` runs it, then hub/start.sh. Safe to run again (it updates what is there).
#
# Settings (environment variables):
#   HOPPER_HUB_ROOT       where the hub lives                      /srv/hopper-hub
#   HOPPER_HUB_PORT       the port on 127.0.0.1                    8000
#   HOPPER_HUB_INSTRUCTOR the instructor's account                 instructor
#   HOPPER_HUB_STUDENTS   the students' accounts                   "student1 student2"
#   HOPPER_HUB_GRADER     the account autograding runs as          hopper-grader
#   HOPPER_HUB_PASSWORDS  a file of "account:password" lines; without it, passwords are made up and written to
#                         $HOPPER_HUB_ROOT/state/passwords.txt (readable by root only)
#   HOPPER_HUB_PYTHON     the Python (>= 3.11) the hub's venv is made from; every account must be able to run
#                         it                                       /usr/bin/python3 if there is one, else python3
#   HOPPER_HUB_LABS       the labs every student gets a copy of at first login; the others come as the instructor
#                         releases them (a later lab gives the earlier labs' answers)       lab1_tma
#   HOPPER_HUB_DOMAIN     open the hub to a class at https://<domain>:<port>, every user's server on its own origin
#                         https://<user>.<domain> (a wildcard DNS record); with HOPPER_HUB_TLS_CERT and
#                         HOPPER_HUB_TLS_KEY, a certificate for <domain> and *.<domain>     (none: 127.0.0.1 only)
#   HOPPER_HUB_TEST=1     also expose JupyterLab's app object to the browser (the hub test drives it)
set -euo pipefail

ROOT=${HOPPER_HUB_ROOT:-/srv/hopper-hub}
PORT=${HOPPER_HUB_PORT:-8000}
INSTRUCTOR=${HOPPER_HUB_INSTRUCTOR:-instructor}
STUDENTS=${HOPPER_HUB_STUDENTS:-student1 student2}
GRADER=${HOPPER_HUB_GRADER:-hopper-grader}
CLONE=$(cd "$(dirname "$0")/.." && pwd)
BASE_PY=${HOPPER_HUB_PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3 )}
COURSE_ID=hopper-gemm

say() { printf '== %s\n' "$*"; }
die() { printf 'hub/setup.sh: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (it creates accounts): sudo make hub"
for tool in python3 node npm sudo useradd chpasswd runuser bwrap setpriv; do
  command -v "$tool" >/dev/null || die "needs $tool (Debian: apt-get install sudo nodejs npm bubblewrap)"
done

runuser -u nobody -- "$BASE_PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null \
  || die "$BASE_PY must be a Python >= 3.11 that every account can run (not one in a private home): set HOPPER_HUB_PYTHON"
install -d -m 0755 "$ROOT" "$ROOT/bin"
install -d -m 0700 "$ROOT/state"

say "the course, JupyterLab, nbgrader and the single-user server in $ROOT/env"
# the course's answer key stays out of the environment (helpers.course.answerkey); it goes to the instructor below
"$CLONE/deploy/install-course.sh" --venv "$ROOT/env" --python "$BASE_PY" --exchange "$ROOT/exchange" \
  --answer-key "$ROOT/state/answer-key.json" --labs "${HOPPER_HUB_LABS:-lab1_tma}" "$CLONE"
chmod -R a+rX "$ROOT/env"
PY="$ROOT/env/bin/python"

say "configurable-http-proxy (npm) in $ROOT/node"
if [ ! -x "$ROOT/node/node_modules/.bin/configurable-http-proxy" ]; then
  npm install --silent --no-audit --no-fund --prefix "$ROOT/node" configurable-http-proxy@5 >/dev/null
fi
chmod -R a+rX "$ROOT/node"

say "accounts: instructor $INSTRUCTOR, students $STUDENTS, grader $GRADER"
for user in "$INSTRUCTOR" $STUDENTS; do
  id -u "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
  chmod 0700 "$(getent passwd "$user" | cut -d: -f6)"  # nobody else may read a home
done
id -u "$GRADER" >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /nonexistent \
  --shell /usr/sbin/nologin "$GRADER"
usermod -a -G "$GRADER" "$INSTRUCTOR"  # the grader shares its sandboxes with the grading account's group

# each submission's jail makes its control group under hopper-grading/, handed to the grading account
# (helpers.course.autograde.jail); where no hierarchy is writable, RLIMIT_NPROC of the account stands in
CG=/sys/fs/cgroup
if [ -f "$CG/cgroup.controllers" ]; then
  mkdir -p "$CG/hopper-grading" 2>/dev/null && chown -R "$GRADER" "$CG/hopper-grading" || true
else
  for c in memory pids cpu; do
    [ -d "$CG/$c" ] && mkdir -p "$CG/$c/hopper-grading" 2>/dev/null && chown -R "$GRADER" "$CG/$c/hopper-grading" || true
  done
fi

PASSWORDS=${HOPPER_HUB_PASSWORDS:-$ROOT/state/passwords.txt}
if [ ! -f "$PASSWORDS" ]; then
  for user in "$INSTRUCTOR" $STUDENTS; do
    printf '%s:%s\n' "$user" "$(head -c 12 /dev/urandom | base64 | tr -d '/+=')"
  done > "$PASSWORDS"
  chmod 0600 "$PASSWORDS"
  say "passwords made up: $PASSWORDS"
fi
chpasswd < "$PASSWORDS"

say "nbgrader exchange in $ROOT/exchange"
# world-writable like /tmp, and sticky: nobody can rename or delete the course's folder but its owner
install -d -m 1777 "$ROOT/exchange"
install -d -m 0755 -o "$INSTRUCTOR" -g "$INSTRUCTOR" "$ROOT/exchange/$COURSE_ID"
# one lock file per GPU for the whole class (helpers.gpu.gpulock), in a folder only root writes: every account
# queues on the same read-only files, and nobody can put a file of their own (a private one, a link) there
GPU_KEYS=0
if command -v nvidia-smi >/dev/null 2>&1; then
  GPU_KEYS="$GPU_KEYS $(nvidia-smi --query-gpu=index,uuid --format=csv,noheader 2>/dev/null | tr ', ' '\n\n' || true)"
fi
(cd / && "$PY" -c 'import sys; from helpers.gpu import gpulock; gpulock.prepare(sys.argv[1], sys.argv[2:])' \
  "$ROOT/gpu-locks" $GPU_KEYS)

HOME_I=$(getent passwd "$INSTRUCTOR" | cut -d: -f6)
COURSE="$HOME_I/$COURSE_ID-grading"
say "the instructor's nbgrader course in $COURSE"
# every run lays solutions/ out again and regenerates the assignments, the gradebook kept: a corrected check or
# an exercise added to a lab nobody has submitted reaches the class; a lab with submissions keeps its cells
# (nbgrader refuses to add or remove them), said in one line (docs/hub.md, "Changes during the term")
(cd / && "$PY" -c 'import sys; from pathlib import Path; from helpers.course import labgen
sys.exit(labgen.nbgrader_layout(root=Path(sys.argv[1]), target=Path(sys.argv[2])))' "$CLONE" "$COURSE") \
  || say "some assignments kept as graded (above): the others are up to date"
for user in $STUDENTS; do
  (cd "$COURSE" && "$PY" -m nbgrader db student add "$user" >/dev/null 2>&1)
done
# the answer key: the instructor's alone; each released lab brings what it gives (the earlier labs' kernels)
install -m 0600 "$ROOT/state/answer-key.json" "$COURSE/answer-key.json"
for folder in source release; do
  if [ -d "$COURSE/$folder" ]; then
    (cd / && "$PY" -I -m helpers.course.answerkey release "$COURSE/answer-key.json" "$COURSE/$folder")
  fi
done
cat > "$COURSE/nbgrader_config_hub.py" <<CONFIG
# Written by hub/setup.sh: autograding runs each submission in a sandboxed kernel as $GRADER (docs/hub.md).
from helpers.course.autograde import autograde_preprocessors, formgrader, gradebook

c = get_config()  # noqa: F821
c.Autograde.autograde_preprocessors = autograde_preprocessors()
c.Autograde.pre_convert_hook = gradebook.forget_earlier_grades  # a re-grade that fails leaves no earlier score
formgrader.configure(c)  # Manual Grading shows students' HTML and JavaScript as text, never runs it
c.IsolatedExecute.run_as = "$GRADER"
c.IsolatedExecute.answer_key = "$COURSE/answer-key.json"  # only what the graded lab gives reaches its jail
c.IsolatedExecute.timeout = 300
c.IsolatedExecute.notebook_seconds = 1200
c.ExchangeFactory.collect = "helpers.course.autograde.exchange.OwnerCheckedCollect"
CONFIG
grep -q nbgrader_config_hub "$COURSE/nbgrader_config.py" || cat >> "$COURSE/nbgrader_config.py" <<'CONFIG'
load_subconfig("nbgrader_config_hub.py")  # noqa: F821
CONFIG
install -d "$HOME_I/.jupyter/labconfig"
cat > "$HOME_I/.jupyter/nbgrader_config.py" <<CONFIG
c = get_config()  # noqa: F821
c.CourseDirectory.root = "$COURSE"
load_subconfig("$COURSE/nbgrader_config_hub.py")  # noqa: F821
CONFIG
cat > "$HOME_I/.jupyter/jupyter_server_config.json" <<'CONFIG'
{"ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.formgrader": true,
                                       "nbgrader.server_extensions.course_list": true}}}
CONFIG
cat > "$HOME_I/.jupyter/labconfig/page_config.json" <<'CONFIG'
{"disabledExtensions": {"@jupyter/nbgrader:formgrader": false, "@jupyter/nbgrader:create-assignment": false,
                        "@jupyter/nbgrader:course-list": false}}
CONFIG
chown -R "$INSTRUCTOR:$INSTRUCTOR" "$COURSE" "$HOME_I/.jupyter"
chmod 0700 "$COURSE"

say "sudo rule: $INSTRUCTOR may start grading kernels as $GRADER"
SUDOERS=/etc/sudoers.d/hopper-hub-$GRADER
cat > "$SUDOERS" <<RULE
# Written by hub/setup.sh: autograding starts each submission's kernel as $GRADER (helpers.course.autograde).
$INSTRUCTOR ALL=($GRADER) NOPASSWD: $ROOT/env/bin/python
RULE
chmod 0440 "$SUDOERS"
visudo -cf "$SUDOERS" >/dev/null

if [ -n "${HOPPER_HUB_DOMAIN:-}" ]; then
  [ -r "${HOPPER_HUB_TLS_CERT:-}" ] && [ -r "${HOPPER_HUB_TLS_KEY:-}" ] \
    || die "HOPPER_HUB_DOMAIN needs HOPPER_HUB_TLS_CERT and HOPPER_HUB_TLS_KEY (a certificate for it and *.$HOPPER_HUB_DOMAIN)"
fi
say "the hub's files in $ROOT"
install -m 0755 "$CLONE/hub/singleuser.sh" "$ROOT/bin/hopper-singleuser"
install -m 0644 "$CLONE/hub/jupyterhub_config.py" "$ROOT/jupyterhub_config.py"
"$PY" - "$ROOT/state/hub.json" <<PYTHON
import json, sys
json.dump({"root": "$ROOT", "port": $PORT, "instructor": "$INSTRUCTOR", "students": "$STUDENTS".split(),
           "test": "${HOPPER_HUB_TEST:-0}" == "1", "domain": "${HOPPER_HUB_DOMAIN:-}",
           "tls_cert": "${HOPPER_HUB_TLS_CERT:-}", "tls_key": "${HOPPER_HUB_TLS_KEY:-}"}, open(sys.argv[1], "w"), indent=1)
PYTHON

if [ -n "$(find "$CLONE/solutions" -maxdepth 0 -perm -o+r 2>/dev/null)" ] \
   && runuser -u nobody -- test -r "$CLONE/solutions" 2>/dev/null; then
  printf 'warning: %s/solutions is readable by every account of this machine; keep the clone in a private\n' \
    "$CLONE" >&2
  printf '         folder (chmod 700 its parent): students must not read the solutions\n' >&2
fi
say "done: start the hub with hub/start.sh (or make hub), then open http://127.0.0.1:$PORT"
