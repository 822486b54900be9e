#!/bin/sh
# A user's server, started by JupyterHub as that user: their own copy of the course, then JupyterLab.
set -e
"$HOPPER_HUB_ENV/bin/hopper-course-home"
exec "$HOPPER_HUB_ENV/bin/jupyterhub-singleuser" "$@"
