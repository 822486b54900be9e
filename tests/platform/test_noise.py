"""Set-up and validation say what matters and nothing else: no setuptools deprecation notices when the course is
installed, no "Kernel is running over TCP" lines in `make validate`."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_uses_the_license_string_and_a_setuptools_that_reads_it():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["license"] == "MIT"  # an SPDX string: the TOML table form is deprecated
    assert "setuptools>=77" in data["build-system"]["requires"]  # the first setuptools that reads the string
    assert data["tool"]["setuptools"]["package-dir"] == {"": "."}  # a plain .pth: no notice about same-named dirs


def _quiet(text: str) -> list[str]:
    """Lines of pip's output that come from the course, not from this machine's pip configuration."""
    return [ln for ln in text.splitlines() if ln.strip() and not re.match(r"WARNING: Location '.*' is ignored", ln)]


@pytest.mark.slow
def test_installing_the_course_prints_no_warnings():
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "-q", "--no-deps",
                           "-e", str(ROOT)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    noise = _quiet(done.stdout + done.stderr)
    assert not noise, "pip install -e . printed:\n" + "\n".join(noise[:40])


@pytest.mark.slow
def test_validate_prints_one_line_per_notebook_and_nothing_else():
    done = subprocess.run([sys.executable, "-m", "helpers.course.labgen", "validate", "--only", "00_"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 0, lines
    assert "without encryption" not in done.stderr
    assert len(lines) == 2 and lines[0].startswith("ok   lessons/00_") and lines[1] == "1 passed, 0 failed", lines
