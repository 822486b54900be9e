"""A student's workflow: their work lives in my-work/, and the course's commands never fail or nag because of it.

`make lab` fills my-work/ (helpers.course.workspace.prepare); `make test`, `make labs`, `make validate` and `make strip`
look only at lessons/, solutions/ and labs/ (helpers.course.labgen), so a saved lab with outputs changes nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from test_labgen import make_course

from helpers.course import labgen, workspace

ROOT = Path(__file__).resolve().parents[2]


def _course(tmp_path: Path) -> Path:
    make_course(tmp_path)
    lesson = nbformat.v4.new_notebook()
    lesson.cells = [nbformat.v4.new_markdown_cell("# Lesson"), nbformat.v4.new_code_cell("print(6 * 7)")]
    nbformat.write(lesson, tmp_path / "lessons" / "00_tiny.ipynb")
    assert labgen.generate(root=tmp_path) == 0
    return tmp_path


def _save_work(path: Path) -> None:
    """What JupyterLab writes when a student runs and saves a notebook: code, outputs, execution counts."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.source = cell.source.replace("# YOUR CODE HERE", "return x + x")
        cell.execution_count = i + 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="✓ my answer\n")]
    nbformat.write(nb, path)


def test_make_lab_copies_the_lessons_and_labs_into_my_work(tmp_path, capsys):
    root = _course(tmp_path)
    said = workspace.prepare(root=root)
    assert sorted(said) == ["copied labs/lab0_tiny.ipynb to my-work/labs/lab0_tiny.ipynb",
                            "copied lessons/00_tiny.ipynb to my-work/lessons/00_tiny.ipynb"]
    for rel in ("labs/lab0_tiny.ipynb", "lessons/00_tiny.ipynb"):
        assert (root / "my-work" / rel).read_bytes() == (root / rel).read_bytes()
    assert workspace.prepare(root=root) == []  # nothing to do the second time


def test_saved_work_never_makes_the_course_commands_fail_or_nag(tmp_path, capsys):
    root = _course(tmp_path)
    workspace.prepare(root=root)
    mine = root / "my-work" / "labs" / "lab0_tiny.ipynb"
    _save_work(mine)
    _save_work(root / "my-work" / "lessons" / "00_tiny.ipynb")
    saved = mine.read_bytes()
    capsys.readouterr()
    assert labgen.check(root=root) == 0  # make check-labs (part of make test)
    assert labgen.generate(root=root) == 0  # make labs
    assert labgen.strip(root=root) == 0  # make strip
    out, err = capsys.readouterr()
    assert err == "" and "my-work" not in out and not list(root.rglob("*.new.ipynb"))
    assert mine.read_bytes() == saved  # the student's outputs are theirs
    course = [p.relative_to(root).parts[0] for p, _ in labgen.notebooks(root=root)]  # make validate, hygiene test
    assert sorted(set(course)) == ["labs", "lessons", "solutions"]


def test_a_course_update_refreshes_untouched_copies_and_keeps_the_students(tmp_path):
    root = _course(tmp_path)
    workspace.prepare(root=root)
    _save_work(root / "my-work" / "labs" / "lab0_tiny.ipynb")
    mine = (root / "my-work" / "labs" / "lab0_tiny.ipynb").read_bytes()
    # the course changes both notebooks (a `git pull`)
    sol = root / "solutions" / "lab0_tiny.ipynb"
    sol.write_text(sol.read_text().replace("Write `double`.", "Write `double`, please."))
    labgen.generate(root=root)
    lesson = root / "lessons" / "00_tiny.ipynb"
    lesson.write_text(lesson.read_text().replace("# Lesson", "# Lesson, revised"))
    said = workspace.prepare(root=root)
    assert "updated my-work/lessons/00_tiny.ipynb (you had not changed it)" in said
    assert any(s.startswith("kept your my-work/labs/lab0_tiny.ipynb") for s in said)
    assert "revised" in (root / "my-work" / "lessons" / "00_tiny.ipynb").read_text()
    assert (root / "my-work" / "labs" / "lab0_tiny.ipynb").read_bytes() == mine
    assert workspace.prepare(root=root) == []  # said once, not at every start
    (root / "my-work" / "labs" / "lab0_tiny.ipynb").unlink()  # start over: delete the copy
    assert workspace.prepare(root=root) == ["copied labs/lab0_tiny.ipynb to my-work/labs/lab0_tiny.ipynb"]
    assert "please" in (root / "my-work" / "labs" / "lab0_tiny.ipynb").read_text()


def test_jupyterlab_settings_turn_off_the_news_and_keep_other_settings(tmp_path):
    path = tmp_path / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"},
                                "@jupyterlab/apputils-extension:notification": {"doNotDisturbMode": True}}))
    assert workspace.jupyterlab_settings(tmp_path) == path
    settings = json.loads(path.read_text())
    assert settings["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}
    assert settings["@jupyterlab/apputils-extension:notification"] == {
        "doNotDisturbMode": True, "fetchNews": "false", "checkForUpdates": False}


def test_the_news_setting_is_one_jupyterlab_knows():
    schema = Path(workspace.sys.prefix) / "share/jupyter/lab/schemas/@jupyterlab/apputils-extension/notification.json"
    if not schema.exists():
        pytest.skip("JupyterLab's schemas are not installed here")
    props = json.loads(schema.read_text())["properties"]
    values = workspace.LAB_OVERRIDES["@jupyterlab/apputils-extension:notification"]
    assert {c["const"] for c in props["fetchNews"]["oneOf"]} >= {values["fetchNews"]}
    assert props["checkForUpdates"]["type"] == "boolean"


def test_my_work_is_ignored_by_git():
    if not shutil.which("git") or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "check-ignore", "-q", "my-work/labs/lab1_tma.ipynb"], cwd=ROOT)
    assert done.returncode == 0


def test_make_lab_opens_jupyterlab_on_my_work():
    makefile = (ROOT / "Makefile").read_text()
    lab = makefile[makefile.index("\nlab:"):].split("\n\n")[0]
    assert "helpers.course.workspace" in lab and 'root_dir="$(CURDIR)/$(WORK)"' in lab
    assert "WORK   := my-work" in makefile
    assert "my-work/" in (ROOT / "README.md").read_text()
