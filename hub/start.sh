#!/usr/bin/env bash
# Start the hub that hub/setup.sh prepared, in the foreground (Ctrl-C stops it and every user's server).
set -euo pipefail
ROOT=${HOPPER_HUB_ROOT:-/srv/hopper-hub}
[ "$(id -u)" = 0 ] || { echo "hub/start.sh: run as root (the hub starts each user's server as that user)" >&2; exit 1; }
[ -f "$ROOT/state/hub.json" ] || { echo "hub/start.sh: run hub/setup.sh first" >&2; exit 1; }
cd "$ROOT/state"
export HOPPER_HUB_ROOT=$ROOT
exec "$ROOT/env/bin/jupyterhub" -f "$ROOT/jupyterhub_config.py"
