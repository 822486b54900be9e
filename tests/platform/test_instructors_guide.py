"""docs/instructors.md must work as written: every Python block in it runs, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "instructors.md"
BLOCKS = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)


def test_the_guide_has_examples():
    assert len(BLOCKS) >= 3


def test_every_python_block_runs(capsys):
    namespace: dict = {}
    for i, block in enumerate(BLOCKS):
        try:
            exec(compile(block, f"{GUIDE.name} block {i}", "exec"), namespace)
        except Exception as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"block {i} of docs/instructors.md fails: {type(exc).__name__}: {exc}\n{block}")
    out = capsys.readouterr().out
    assert "✅ Lab 1 · bytes of a TMA box" in out and "❌ Lab 1 · bytes of a TMA box" in out


def test_the_guide_names_only_real_make_targets():
    makefile = (GUIDE.parents[1] / "Makefile").read_text()
    for target in set(re.findall(r"`make (\w[\w-]*)", GUIDE.read_text())):
        assert re.search(rf"^{target}:", makefile, flags=re.M), f"make {target} is not in the Makefile"
