"""Messages point to the right place: a stub carried from an earlier lab says where its text is."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

from helpers.course.checks import lab4

ROOT = Path(__file__).resolve().parents[2]


def test_a_stub_carried_from_lab1_points_to_lab1_not_above(tmp_path, monkeypatch):
    """Lab 4 built on an unwritten Lab 1 wrapper: the carried #error keeps its hint, but "the instruction above" is
    in Lab 1's notebook, and the hint says so."""
    for name in ("lab1_tma.ipynb", "lab2_mbarrier.ipynb"):
        shutil.copyfile(ROOT / "labs" / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()):
        wrappers = lab4.carry_wrappers()
    errors = re.findall(r'^#error "not written yet \(in (Lab \d)\): (.*)"$', wrappers, re.M)
    assert {lab for lab, _ in errors} == {"Lab 1", "Lab 2"}, wrappers
    for _, hint in errors:
        assert not re.search(r"\babove\b", hint), hint
    tma = next(hint for lab, hint in errors if lab == "Lab 1" and "asm volatile" in hint)
    assert "the instruction shown in Lab 1" in tma
