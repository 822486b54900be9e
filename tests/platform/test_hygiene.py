"""The course's own rules: clean notebooks, generated labs up to date, environments that agree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml

from helpers.course import labgen

ROOT = Path(__file__).resolve().parents[2]
# the course's own notebooks (lessons/, solutions/, labs/): a student's saved copies in my-work/ are theirs
NOTEBOOKS = [path for path, _ in labgen.notebooks()]


def _req(spec: str) -> tuple[str, str]:
    m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*(?:>=\s*([0-9][^,\s]*))?\s*", spec)
    assert m, f"cannot read requirement {spec!r}"
    return m.group(1).lower().replace("_", "-"), m.group(2) or ""


def test_there_are_notebooks():
    assert any(p.parent.name == "lessons" for p in NOTEBOOKS)
    assert any(p.parent.name == "solutions" for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_committed_without_outputs(path: Path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, (f"{path.relative_to(ROOT)} has outputs in cells {dirty}: run `make strip` (students: your "
                       f"work belongs in my-work/, see the README)")


def test_labs_are_generated_from_solutions(capsys):
    assert labgen.check() == 0, capsys.readouterr().err


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.name)
def test_solution_notebook_has_sound_nbgrader_metadata(path: Path):
    nb = nbformat.read(path, as_version=4)
    ids = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        text = cell.source
        if labgen.BEGIN in text:
            assert meta and meta.get("solution"), f"a solution region without solution metadata:\n{text[:200]}"
        if meta:
            ids.append(meta.get("grade_id"))
            if meta.get("grade"):
                assert meta.get("points", 0) > 0, f"graded cell {meta.get('grade_id')} gives no points"
    assert all(ids) and len(ids) == len(set(ids)), f"grade ids must be present and unique: {ids}"


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = dict(_req(s) for s in project["dependencies"] + project["optional-dependencies"]["dev"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    listed = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for spec in dep["pip"]:
                if not spec.startswith("-e"):
                    listed.update([_req(spec)])
        elif not dep.startswith(("python", "pip")):
            listed.update([_req(dep)])
    assert listed == wanted


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.name)
def test_nbgrader_accepts_the_solution_metadata(path: Path):
    from nbgrader.nbgraderformat import MetadataValidator

    MetadataValidator().validate_nb(nbformat.read(path, as_version=4))


#: Words about how the course was made, not about what it teaches: none may appear in code, comments, tests,
#: notebooks or docs (measured results and H100 fixtures keep the names of the scripts that made them).
MAKING_OF = re.compile(r"\bthe lead('s)?\b|\bissues? #?\d+|\bplaceholder\b(?!=)|\bsession \d+\b|\bclosing note", re.I)
#: Technical uses of the word that are not about the course's making: ipywidgets' and the hub chart's own names.
MAKING_OF_ALLOWED = re.compile(r"placeholder=|userPlaceholder|placeholder pods")


def _own_text_files() -> list[Path]:
    import subprocess

    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.split()
    skip = ("tests/data/", "bench/results/", "tests/hub/data/")
    return [ROOT / f for f in listed if not f.startswith(skip) and Path(f).suffix in
            (".py", ".ipynb", ".md", ".cu", ".cuh", ".sh", ".toml", ".yml", ".yaml", ".cfg", "")]


def test_the_project_speaks_of_itself_only():
    found = []
    for path in _own_text_files():
        if not path.is_file():
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if MAKING_OF.search(MAKING_OF_ALLOWED.sub("", line)):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert found == [], "words about how the course was made:\n" + "\n".join(found)
