"""``make lab`` from the student's side: the install's progress, JupyterLab's server settings for a busy laptop, and
a start that ends with one line, the address to open.

    python -m helpers.course.labserver install          # pip install -e . with a line per step, not two silent minutes
    python -m helpers.course.labserver run --root my-work --port 8888 --open lessons/00_big_picture.ipynb

The server's settings (:func:`server_config`, written into the environment by ``python -m helpers.course.workspace``,
so they hold for a ``jupyter lab`` started by hand too):

- no WebSocket pings: the browser and the server are on the same machine, a closed tab closes its socket, and a
  ping whose answer waited behind a busy core cut the page from its kernel (``WebSocket ping timeout``: cells stuck
  at ``[*]``, the kernel "Unknown") — and the server's pings and Tornado's no longer disagree (the warning that the
  ping timeout is longer than the ping interval);
- the kernel connection of :mod:`helpers.course.connection`: messages sent while a socket was closing are kept for
  the page's reconnection, without a traceback each;
- no browser opened from the server (the student opens the printed address), and a Ctrl-C that stops the server
  without asking.

Only the standard library at import: ``install`` runs before the course's packages are there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["server_config", "write_server_config", "NOISE", "quiet", "install", "run", "main"]

#: what the server logs that a student can do nothing about (dropped from the terminal)
NOISE = (
    re.compile(r"No web browser found"),
    re.compile(r"websocket_ping_timeout .* cannot be longer"),
    re.compile(r"Setting websocket_ping_timeout="),
    re.compile(r"running over TCP without encryption|without encryption", re.I),
    re.compile(r"WebSocketClosedError|Stream is closed|zmq message arrived on closed channel"),
    re.compile(r"Could not determine jupyterlab build status"),
    re.compile(r"^\s*$"),
)


def server_config() -> dict[str, Any]:
    """JupyterLab's server settings for the course (see the module's notes)."""
    return {
        "ServerApp": {
            "tornado_settings": {"ws_ping_interval": 0},
            "kernel_websocket_connection_class": "helpers.course.connection.KeptConnection",
            "open_browser": False,
            "answer_yes": True,
        },
    }


def write_server_config(path: Path) -> Path:
    """Write :func:`server_config` as a JSON config file at ``path`` (e.g. an environment's
    ``etc/jupyter/jupyter_server_config.d/course.json``); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(server_config(), indent=2) + "\n")
    return path


def quiet(line: str) -> bool:
    """Whether a server log line is noise the student should not see."""
    return any(p.search(line) for p in NOISE)


def _elapsed(t0: float) -> str:
    s = time.monotonic() - t0
    return f"{s:.0f} s" if s < 90 else f"{s // 60:.0f} min {s % 60:02.0f} s"


def install(python: str = sys.executable, target: str = ".", out: Any = None) -> int:
    """``pip install -e target`` (pip upgraded first) with a line for each thing it does: what it collects, what
    it downloads, when it installs; pip's own output in full only when it fails. Returns pip's exit code."""
    out = out or sys.stdout
    t0 = time.monotonic()
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    upgrade = subprocess.run([*pip, "install", "-q", "--upgrade", "pip"], capture_output=True, text=True)
    if upgrade.returncode:
        print(upgrade.stdout + upgrade.stderr, file=out)
        return upgrade.returncode
    proc = subprocess.Popen([*pip, "install", "--progress-bar", "off", "-e", target], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1, cwd=ROOT)
    lines: list[str] = []
    collected = 0
    for line in proc.stdout:
        lines.append(line)
        line = line.strip()
        if line.startswith("Collecting "):
            collected += 1
            print(f"  {collected:3d} collecting {line.split()[1]}", file=out, flush=True)
        elif line.startswith("Downloading ") and "MB" in line:
            print(f"      downloading {line.split()[1].rsplit('/', 1)[-1]} {line.split('(')[-1].rstrip(')')}",
                  file=out, flush=True)
        elif line.startswith("Installing collected packages"):
            count = len(line.split(":", 1)[1].split(","))
            print(f"  installing {count} packages ({_elapsed(t0)} so far; a minute or two more)…", file=out,
                  flush=True)
        elif line.startswith("Building editable") or line.startswith("Building wheel"):
            print("  building the course's own package…", file=out, flush=True)
    code = proc.wait()
    if code:
        print("".join(lines[-60:]), file=out)
        print(f"the install failed (pip exit code {code}); pip's last lines are above", file=out)
    else:
        print(f"  installed in {_elapsed(t0)}", file=out, flush=True)
    return code


def _server_info(pid: int) -> dict | None:
    from jupyter_core.paths import jupyter_runtime_dir

    path = Path(jupyter_runtime_dir()) / f"jpserver-{pid}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run(root: Path, port: int, first: str, extra: list[str] = (), out: Any = None) -> int:
    """Start JupyterLab on ``root``: its noise dropped, what it says otherwise passed on, and, once it answers, one
    line: the address of ``first`` to open. Returns the server's exit code (Ctrl-C stops it)."""
    out = out or sys.stdout
    args = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}", f"--ServerApp.port={port}",
            f"--LabApp.default_url=/lab/tree/{first}", "--log-level=WARN", *extra]
    if hasattr(os, "getuid") and os.getuid() == 0:
        args.append("--allow-root")
    print("starting JupyterLab…", file=out, flush=True)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    started = threading.Event()
    startup: list[str] = []  # the server's start-up lines (its banner of addresses among them): shown if it fails

    def relay() -> None:
        for line in proc.stdout:
            if not started.is_set():
                startup.append(line)
            elif not quiet(line):
                out.write(line)
                out.flush()

    threading.Thread(target=relay, daemon=True).start()
    signal.signal(signal.SIGINT, lambda *_: proc.send_signal(signal.SIGINT))
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    while proc.poll() is None:
        info = _server_info(proc.pid)
        if info:
            time.sleep(0.5)  # the rest of the banner, which follows the file
            started.set()
            url = f"http://localhost:{info['port']}/lab/tree/{first}?token={info['token']}"
            print(f"open {url}", file=out, flush=True)
            break
        time.sleep(0.25)
    code = proc.wait()
    if not started.is_set():
        time.sleep(0.2)
        out.write("".join(line for line in startup if not quiet(line)))
        print(f"JupyterLab did not start (exit code {code}); its messages are above", file=out, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.course.labserver", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("install", help="install the course's environment, one line per step")
    start = sub.add_parser("run", help="start JupyterLab; the last line is the address to open")
    start.add_argument("--root", type=Path, required=True)
    start.add_argument("--port", type=int, default=8888)
    start.add_argument("--open", default="lessons/00_big_picture.ipynb")
    args, extra = parser.parse_known_args(argv)
    if args.what == "install":
        return install()
    return run(args.root, args.port, args.open, extra)


if __name__ == "__main__":
    sys.exit(main())
