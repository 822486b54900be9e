"""The hub tests: one environment installed by deploy/install-course.sh, shared by the install test and the hub."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "hub"


def pytest_configure(config):
    config.addinivalue_line("markers", "hub: sets up a JupyterHub for a class on this machine (needs root)")


def system_python() -> str:
    """A Python every account can run (the hub's students must): $HOPPER_HUB_PYTHON, /usr/bin/python3, or ours."""
    return os.environ.get("HOPPER_HUB_PYTHON") or ("/usr/bin/python3" if Path("/usr/bin/python3").exists()
                                                   else sys.executable)


@pytest.fixture(scope="session")
def hub_base():
    """A folder every account can enter, removed at the end; the hub lives in <base>/hub."""
    base = Path(tempfile.mkdtemp(prefix="hopper-hub-test-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def course_env(hub_base):
    """deploy/install-course.sh run into a fresh venv, as the image build and `make hub` run it."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env_dir = hub_base / "hub" / "env"
    done = subprocess.run([str(ROOT / "deploy" / "install-course.sh"), "--venv", str(env_dir), "--python",
                           system_python(), "--exchange", str(hub_base / "hub" / "exchange"), str(ROOT)],
                          capture_output=True, text=True, timeout=1200, cwd="/")
    (ARTIFACTS / "install-course.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"install-course.sh failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return env_dir
