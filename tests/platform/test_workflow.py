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


def _run_in_jupyterlab(path: Path, python: str = "3.11.2") -> None:
    """What JupyterLab saves after a student only ran a notebook: outputs, counts, the kernel's language_info."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.execution_count = i + 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    nb.metadata["language_info"] = {"name": "python", "version": python, "mimetype": "text/x-python"}
    nbformat.write(nb, path)


def test_a_notebook_the_student_only_ran_is_still_the_courses(tmp_path):
    """Running a lesson (outputs, the kernel's metadata) does not make it "yours": after a course update it is
    refreshed, not kept with a notice."""
    root = _course(tmp_path)
    workspace.prepare(root=root)
    ran = root / "my-work" / "lessons" / "00_tiny.ipynb"
    _run_in_jupyterlab(ran)
    _save_work(root / "my-work" / "labs" / "lab0_tiny.ipynb")  # a lab with the student's answer: theirs
    # a course change to metadata only (not a cell): nothing to say, the run's outputs stay
    lesson = root / "lessons" / "00_tiny.ipynb"
    nb = nbformat.read(lesson, as_version=4)
    nb.metadata["kernelspec"] = dict(labgen.KERNELSPEC)
    nbformat.write(nb, lesson)
    assert workspace.prepare(root=root) == []
    assert "42" in ran.read_text()
    # a change to a cell: the copy the student only ran takes it; the lab they wrote in is kept
    lesson.write_text(lesson.read_text().replace("# Lesson", "# Lesson, revised"))
    sol = root / "solutions" / "lab0_tiny.ipynb"
    sol.write_text(sol.read_text().replace("Write `double`.", "Write `double`, please."))
    labgen.generate(root=root)
    said = workspace.prepare(root=root)
    assert "updated my-work/lessons/00_tiny.ipynb (you had not changed it)" in said
    assert any(s.startswith("kept your my-work/labs/lab0_tiny.ipynb") for s in said), said
    assert "revised" in ran.read_text()


def test_a_manifest_of_file_digests_still_tells_an_untouched_copy(tmp_path):
    """my-work/ prepared by an earlier course version (its manifest records the file's bytes) is read too."""
    root = _course(tmp_path)
    workspace.prepare(root=root)
    manifest = root / "my-work" / workspace.MANIFEST
    old = {rel: {"copied": workspace._digest((root / rel).read_bytes())}
           for rel in json.loads(manifest.read_text())}
    manifest.write_text(json.dumps(old))
    lesson = root / "lessons" / "00_tiny.ipynb"
    lesson.write_text(lesson.read_text().replace("# Lesson", "# Lesson, revised"))
    assert workspace.prepare(root=root) == ["updated my-work/lessons/00_tiny.ipynb (you had not changed it)"]


def test_course_notebooks_ship_the_kernel_make_lab_installs():
    """Opening a notebook in JupyterLab does not rename its kernel (which would change the file at once)."""
    makefile = (ROOT / "Makefile").read_text()
    spec = labgen.KERNELSPEC
    assert f'--name {spec["name"]} --display-name "{spec["display_name"]}"' in makefile
    for path, _ in labgen.notebooks():
        assert nbformat.read(path, as_version=4).metadata.get("kernelspec") == spec, path.name


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


def _target(makefile: str, name: str) -> str:
    return makefile[makefile.index(f"\n{name}:"):].split("\n\n")[0]


def test_make_lab_opens_jupyterlab_on_my_work():
    makefile = (ROOT / "Makefile").read_text()
    lab = _target(makefile, "lab")
    assert "helpers.course.workspace" in lab and '--root "$(CURDIR)/$(WORK)"' in lab
    # the launcher's last line is the first lesson's address, with the token
    assert "helpers.course.labserver run" in lab and "--open $(FIRST_LESSON)" in lab
    assert "WORK   := my-work" in makefile
    assert "my-work/" in (ROOT / "README.md").read_text()


def test_the_students_environment_has_no_instructor_tools():
    """`make lab`'s .venv installs the course alone; nbgrader, pytest and Playwright go into `make test`'s own
    environment (JupyterLab would otherwise show nbgrader's menu and panels to the student)."""
    makefile = (ROOT / "Makefile").read_text()
    course = _target(makefile, "$(VENV)/.course-installed")
    assert "labserver install" in course and "[dev" not in course and "$(DEV_VENV)" not in course
    assert "DEV_VENV ?= .venv-dev" in makefile
    for name in ("lint", "labs", "check-labs", "validate", "strip", "nbgrader", "gpu-test", "bench"):
        recipe = _target(makefile, name)
        assert "$(DEV_VENV)" in recipe and "$(VENV)/" not in recipe.replace("$(DEV_VENV)/", ""), name
    assert "$(DPY) -m pytest" in _target(makefile, "test")
    assert "(VENV)/.dev-installed" not in makefile.replace("$(DEV_VENV)/.dev-installed", "")
    done = subprocess.run(["git", "check-ignore", "-q", ".venv-dev/bin/python"], cwd=ROOT)
    assert done.returncode == 0


def test_every_test_has_a_time_limit(pytestconfig):
    """pytest-timeout is on with a default limit, and the browser test leaves no Playwright step without one
    (``page.evaluate`` has no limit of its own: scripts go through ``_js``; pages come from ``_fresh_page``)."""
    assert pytestconfig.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed (make test installs it)"
    assert 0 < float(pytestconfig.getini("timeout")) <= 600
    browser = (ROOT / "tests" / "platform" / "test_browser.py").read_text()
    assert "page.evaluate(" not in browser and ".new_page(" not in browser.replace("context.new_page(", "")
    assert "set_default_timeout(STEP_MS)" in browser
