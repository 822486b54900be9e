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
    assert "✓ Lab 1 · bytes of a TMA box: all 8 checks passed" in out and "✗ Lab 1 · bytes of a TMA box" in out


def test_the_guide_names_only_real_make_targets():
    makefile = (GUIDE.parents[1] / "Makefile").read_text()
    for target in set(re.findall(r"`make (\w[\w-]*)", GUIDE.read_text())):
        assert re.search(rf"^{target}:", makefile, flags=re.M), f"make {target} is not in the Makefile"


def test_the_guide_names_the_cell_metadata_editor_as_jupyterlab_4_does():
    text = GUIDE.read_text()
    assert "Common Tools → Cell Metadata" not in text
    assert "Advanced Tools →\nCell Metadata" in text or "Advanced Tools → Cell Metadata" in text
    assert "python -m helpers.course.author mark" in text


def test_the_guides_author_commands_run(tmp_path):
    """The guide's `python -m helpers.course.author` lines, in order: `list` and `mark` on a notebook whose cells
    fit their examples; the scaffolds and `check` in a copy of the course (after `new-exercise`, `make labs`)."""
    import shlex
    import shutil

    import nbformat

    from helpers.course import author, labgen

    lines = [ln.split("  #")[0] for ln in GUIDE.read_text().splitlines() if "-m helpers.course.author" in ln]
    assert len(lines) >= 8
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"spec {i}") for i in range(7)] + [
        nbformat.v4.new_code_cell("def box_bytes(r, c, s):\n    ### BEGIN SOLUTION\n    # HINT: r·c·s\n"
                                  "    return r * c * s\n    ### END SOLUTION\n"),
        nbformat.v4.new_code_cell("lab1.check_box_bytes(box_bytes)"),
        nbformat.v4.new_markdown_cell("Why is the box 8 KiB?\n### BEGIN SOLUTION\n64·64·2\n### END SOLUTION"),
    ]
    (tmp_path / "solutions").mkdir()
    nbformat.write(nb, tmp_path / "solutions" / "lab1_tma.ipynb")
    course = tmp_path / "course"
    for part in ("solutions", "labs", "lessons", "helpers/course/checks", "helpers/course/data",
                 "tests/labs/test_lab1.py", "tests/platform/widgets.json"):
        if (labgen.ROOT / part).is_dir():
            shutil.copytree(labgen.ROOT / part, course / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (course / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(labgen.ROOT / part, course / part)
    (course / "helpers" / "course" / "widgets").mkdir()
    for line in lines:
        args = shlex.split(line)[3:]  # after `.venv/bin/python -m helpers.course.author`
        if args[0] in ("new-exercise", "new-widget", "check"):
            assert author.main([*args, "--root", str(course)]) == 0, line
            if args[0] == "new-exercise":
                assert labgen.generate(root=course) == 0
            continue
        args = [str(tmp_path / a) if a.startswith("solutions/") else a for a in args]
        assert author.main(args) == 0, line
    roles = [author.role_of(c) for c in nbformat.read(tmp_path / "solutions" / "lab1_tma.ipynb", 4).cells[7:]]
    assert roles == ["answer", "plain", "written"]
    assert {"new-exercise", "new-widget", "check"} <= {shlex.split(line)[3] for line in lines}
