"""JupyterHub for a class on one machine (written by hub/setup.sh into $HOPPER_HUB_ROOT, read by hub/start.sh).

- Accounts are real Unix accounts; people log in with their Unix password (PAM). Each user's server runs as that
  account (LocalProcessSpawner), so file permissions keep students out of each other's homes and out of the
  instructor's course; no password shared between accounts, nothing to add to the hub's own database.
- When a user's server stops, every process of that account ends with it (:class:`ClassSpawner`), however it was
  started (``setsid``, a double fork): nothing a student left running outlives their server.
- The proxy is configurable-http-proxy from npm; the hub listens on 127.0.0.1 only, over plain HTTP: for this
  machine's own use and tests. To open it to a class, set ``HOPPER_HUB_DOMAIN`` (with a wildcard DNS record) and a
  wildcard certificate (``HOPPER_HUB_TLS_CERT``, ``HOPPER_HUB_TLS_KEY``): the hub then serves TLS on every address
  and gives each user's server its own origin (JupyterHub's ``subdomain_host``).
"""

import asyncio
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner

c = get_config()  # noqa: F821

ROOT = Path(os.environ.get("HOPPER_HUB_ROOT", "/srv/hopper-hub"))
settings = json.loads((ROOT / "state" / "hub.json").read_text())
ENV = ROOT / "env"

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = settings["port"]
if settings.get("domain"):
    # a class opened beyond this machine: TLS, and every user's server on its own origin (<user>.<domain>, a wildcard
    # DNS record and certificate), so no page of a student's shares an origin, or cookies, with another's server
    c.JupyterHub.ip = ""
    c.JupyterHub.subdomain_host = f"https://{settings['domain']}"
    c.JupyterHub.ssl_cert = settings["tls_cert"]
    c.JupyterHub.ssl_key = settings["tls_key"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = settings["port"] + 1  # the hub's own API, and the proxy's below: beside the public port
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings['port'] + 2}"
c.JupyterHub.db_url = f"sqlite:///{ROOT / 'state' / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(ROOT / "state" / "jupyterhub_cookie_secret")
c.JupyterHub.cleanup_servers = True  # stopping the hub stops every user's server

# who may log in: the class list written by hub/setup.sh, with the Unix password of each account
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False
c.Authenticator.allowed_users = set(settings["students"]) | {settings["instructor"]}
# The instructor is not a hub admin (an admin may open anyone's server and read their files). This role lets them
# see the class on the hub's admin page and start or stop a student's server, without opening it.
c.JupyterHub.load_roles = [{"name": "instructor", "description": "start and stop students' servers, not open them",
                            "scopes": ["admin-ui", "list:users", "admin:servers"], "users": [settings["instructor"]]}]



def end_every_process_of(user: str) -> None:
    """SIGKILL every process of a (non-root) account: ``kill(-1)`` sent by a process of that account, which the
    kernel delivers to all of its processes in one pass, so a process that forks meanwhile cannot slip past."""
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        return
    if account.pw_uid == 0:
        return
    for _ in range(2):  # a second pass for a process that was being created as the first ran
        subprocess.run([sys.executable, "-I", "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"],
                       user=account.pw_uid, group=account.pw_gid, extra_groups=[], env={}, cwd="/",
                       capture_output=True, timeout=60, check=False)


class ClassSpawner(LocalProcessSpawner):
    """LocalProcessSpawner whose stop also ends every process of the user's account (as systemd's
    ``KillUserProcesses`` does at logout): LocalProcessSpawner signals only the server's own process."""

    async def stop(self, now: bool = False) -> None:
        try:
            await super().stop(now=now)
        finally:
            await asyncio.to_thread(end_every_process_of, self.user.name)


# each user's server runs as that user, from the course's environment
c.JupyterHub.spawner_class = ClassSpawner
c.Spawner.cmd = [str(ROOT / "bin" / "hopper-singleuser")]
c.Spawner.environment = {
    "HOPPER_HUB_ENV": str(ENV),
    "PATH": f"{ENV / 'bin'}:/usr/local/bin:/usr/bin:/bin",
    "HELPERS_GPU_LOCK_DIR": str(ROOT / "gpu-locks"),  # one graded GPU run per GPU, for the whole class
}
c.Spawner.default_url = "/lab/tree/course/labs/lab1_tma.ipynb"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
if settings.get("test"):
    c.Spawner.args = ["--LabApp.expose_app_in_browser=True"]

c.ConfigurableHTTPProxy.command = [str(ROOT / "node" / "node_modules" / ".bin" / "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(ROOT / "state" / "jupyterhub-proxy.pid")
