"""`make lab` from the student's side: the install says what it does, the server keeps the page's kernel through a
busy laptop, and the start ends with one line, the address to open."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from helpers.course import labserver, workspace

ROOT = Path(__file__).resolve().parents[2]


def test_the_server_sends_no_pings_and_keeps_messages_for_a_reconnecting_page(tmp_path):
    """A ping whose answer waited behind a busy core closed the page's socket (cells stuck at ``[*]``); the
    server's pings and Tornado's disagreed (a warning at every start). No pings: a closed tab still closes its
    socket."""
    config = labserver.server_config()["ServerApp"]
    assert config["tornado_settings"]["ws_ping_interval"] == 0
    assert config["kernel_websocket_connection_class"] == "helpers.course.connection.KeptConnection"
    written = workspace.server_settings(tmp_path)
    assert written == tmp_path / "etc" / "jupyter" / "jupyter_server_config.d" / "course.json"
    assert json.loads(written.read_text()) == labserver.server_config()


def test_messages_sent_while_the_socket_closes_are_kept_for_the_replay():
    """Between a socket's closing and the server's noticing, every kernel message raised WebSocketClosedError (a
    traceback each) and was lost; now each is kept and put at the head of the buffer the page gets on reconnecting."""
    from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
    from traitlets.config import LoggingConfigurable

    from helpers.course.connection import KeptConnection

    class Kernels(LoggingConfigurable):
        _kernel_buffers = {"k": {"session_key": "k:s", "buffer": [("iopub", [b"later"])]}}

    class Kernel(LoggingConfigurable):
        kernel_id = "k"

    from jupyter_server.services.kernels.websocket import KernelWebsocketHandler

    page = KernelWebsocketHandler.__new__(KernelWebsocketHandler)
    page.ws_connection = None  # the page's socket: closed
    conn = KeptConnection(parent=Kernel(parent=Kernels()), websocket_handler=page)
    conn.session_key = "k:s"
    conn.handle_outgoing_message("iopub", [b"msg1"])
    conn.handle_outgoing_message("shell", [b"msg2"])
    assert conn._unsent() == [("iopub", [b"msg1"]), ("shell", [b"msg2"])]
    original = ZMQChannelsWebsocketConnection.disconnect
    ZMQChannelsWebsocketConnection.disconnect = lambda self: None  # the server's own buffering, done
    try:
        conn.disconnect()
    finally:
        ZMQChannelsWebsocketConnection.disconnect = original
    assert Kernels._kernel_buffers["k"]["buffer"] == [("iopub", [b"msg1"]), ("shell", [b"msg2"]),
                                                     ("iopub", [b"later"])]


def test_the_server_log_lines_a_student_can_do_nothing_about_are_dropped():
    for noise in ("[W 2026-12-01 ServerApp] No web browser found: could not locate runnable browser.",
                  "The websocket_ping_timeout (90000) cannot be longer than the websocket_ping_interval (30000).",
                  "Kernel is running over TCP without encryption", "tornado.websocket.WebSocketClosedError", ""):
        assert labserver.quiet(noise), noise
    assert not labserver.quiet("[E 2026-12-01 ServerApp] Permission denied: my-work")


def test_the_install_says_what_it_does(tmp_path):
    """`make lab`'s first run installed for two minutes with no output (pip -q): now a line per step."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *--upgrade*) exit 0;; esac\n"
                    "echo 'Obtaining file:///course'\necho 'Collecting numpy>=1.26'\n"
                    "echo '  Downloading numpy-2.1.0-cp311-manylinux.whl (16.3 MB)'\necho 'Collecting plotly'\n"
                    "echo 'Building editable for hopper-course (pyproject.toml): started'\n"
                    "echo 'Installing collected packages: numpy, plotly, hopper-course'\n"
                    "echo 'Successfully installed numpy plotly hopper-course'\n")
    fake.chmod(0o755)
    out = io.StringIO()
    assert labserver.install(str(fake), out=out) == 0
    text = out.getvalue()
    assert "1 collecting numpy>=1.26" in text and "2 collecting plotly" in text
    assert "downloading numpy-2.1.0-cp311-manylinux.whl 16.3 MB" in text
    assert "installing 3 packages" in text and "installed in" in text.splitlines()[-1]


@pytest.mark.timeout(180)
def test_make_lab_ends_with_the_address_to_open(tmp_path):
    """The launcher `make lab` runs: JupyterLab starts with the course's settings, its noise is dropped, and the
    last line is the first lesson's address with the token, which answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "work" / "lessons").mkdir(parents=True)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"), PYTHONPATH=str(ROOT))
    labserver.write_server_config(tmp_path / "config" / "jupyter_server_config.json")
    proc = subprocess.Popen([sys.executable, "-m", "helpers.course.labserver", "run", "--root", str(tmp_path / "work"),
                             "--port", str(port), "--open", "lessons/00_big_picture.ipynb"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    lines = []
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if line.startswith("open "):
                break
        assert lines and lines[-1].startswith(f"open http://localhost:{port}/lab/tree/lessons/00_big_picture"
                                              ".ipynb?token="), lines
        assert lines[:-1] == ["starting JupyterLab…"], lines
        token = lines[-1].split("token=")[1]
        status = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}",
                                                   timeout=10).read())
        assert "started" in status
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
