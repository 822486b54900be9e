"""No answer on a student's machine: the course a class installs, and every grading jail, are searched for every
solution region of every lab, in plain text and in every string's base64 decoding.

A region counts as revealed by a file when all its lines that could give it away (``hints.leaked_lines``' rule:
seven characters or more, comments aside) are in that file, for a region of two such lines or more, or its one
line of 24 characters or more.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from helpers.course import answerkey, hints, labgen

ROOT = Path(__file__).resolve().parents[2]
HELPERS = ROOT / "helpers"
#: solution regions the course's own code shows as it teaches or checks (the model of a cluster, the checks' own
#: expected values): the graders' and the model's code, not data; docs/hub.md says what a class can do about them
TEACHING_CODE = {"course/checks/lab1.py": {"lab1_tma.ipynb#6"}, "course/checks/lab3.py": {"lab3_wgmma.ipynb#15"},
                 "hopper/cluster.py": {"lab7_clusters.ipynb#14", "lab7_clusters.ipynb#19"},
                 "hopper/striped.py": {"lab9_streamk.ipynb#28"}}


def _regions() -> list[tuple[str, int, list[str]]]:
    out = []
    for path in sorted((ROOT / "solutions").glob("lab*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        lab = int(re.match(r"lab(\d+)", path.name).group(1))
        for i, cell in enumerate(nb.cells):
            if labgen.BEGIN not in cell.source:
                continue
            for region in labgen.regions(cell.source, f"{path.name}#{i}", cell.cell_type == "markdown"):
                lines = hints._solution_lines(region.solution)
                if len(lines) >= 2 or (lines and len(lines[0]) >= 24):
                    out.append((f"{path.name}#{i}", lab, lines))
    return out


REGIONS = _regions()


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(k) + _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _decodings(text: str) -> list[str]:
    out = [text]
    for token in re.findall(r"[A-Za-z0-9+/]{24,}={0,2}", text):
        try:
            out.append(base64.b64decode(token, validate=True).decode("utf-8"))
        except (binascii.Error, ValueError):
            continue
    return out


def revealed(top: Path) -> dict[str, set[str]]:
    """file (relative to ``top``) → the solution regions it reveals."""
    found: dict[str, set[str]] = {}
    for path in sorted(top.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        texts = [text]
        if path.suffix in (".json", ".ipynb"):
            try:
                texts += _strings(json.loads(text))
            except ValueError:
                pass
        flat = hints._normalised("\n".join(t for s in texts for t in _decodings(s)))
        hit = {where for where, _, lines in REGIONS if all(line in flat for line in lines)}
        if hit:
            found[str(path.relative_to(top))] = hit
    return found


@pytest.fixture(scope="module")
def class_package(tmp_path_factory) -> tuple[Path, Path]:
    """A copy of ``helpers`` as deploy/install-course.sh installs it for a class, and the answer key it kept."""
    top = tmp_path_factory.mktemp("class")
    shutil.copytree(HELPERS, top / "helpers", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    answerkey.strip_package(top / "helpers", top / "key.json")
    return top / "helpers", top / "key.json"


def test_the_search_finds_what_a_clone_for_self_study_reveals():
    """The same search over a clone's own data finds every region: it would see an answer that is there."""
    assert len(REGIONS) > 60
    found = revealed(HELPERS / "course" / "data")
    assert found["labs.json"] == {where for where, _, _ in REGIONS}


def test_the_course_a_class_installs_reveals_no_answer_in_any_encoding(class_package):
    package, key = class_package
    found = revealed(package)
    data = {f: w for f, w in found.items() if not f.endswith((".py", ".cuh"))}
    assert not data, f"answers in the installed course's data: {data}"
    code = {f: w - TEACHING_CODE.get(f, set()) for f, w in found.items() if f not in data}
    assert not {f: w for f, w in code.items() if w}, "answers in the installed course's code beyond the known ones"
    stored = json.loads((package / answerkey.DATA_FILE).read_text())
    assert stored["kernels"] == {} and all("answer" not in r for e in stored["exercises"].values()
                                           for r in e["regions"])
    assert key.stat().st_mode & 0o777 == 0o600 and revealed(key.parent)["key.json"] == {w for w, _, _ in REGIONS}


def test_the_course_a_class_installs_lets_students_start_from_lab_1_only():
    """The labs a class gets at first login: Lab 1 alone, as hub/setup.sh and the image install it (a later lab's
    starting code is the earlier labs' answers)."""
    lab1 = revealed_in_notebooks([ROOT / "labs" / "lab1_tma.ipynb"])
    assert not lab1, lab1
    later = revealed_in_notebooks(sorted((ROOT / "labs").glob("lab[5-9]*.ipynb")))
    assert later, "the later labs give earlier answers: the reason they are released, not installed"
    setup = (ROOT / "hub" / "setup.sh").read_text()
    assert '--labs "${HOPPER_HUB_LABS:-lab1_tma}"' in setup and "--answer-key" in setup
    assert "--labs lab1_tma" in (ROOT / "deploy" / "Dockerfile").read_text()


def revealed_in_notebooks(paths: list[Path]) -> dict[str, set[str]]:
    found = {}
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        flat = hints._normalised("\n".join(c.source for c in nb.cells))
        hit = {where for where, _, lines in REGIONS if all(line in flat for line in lines)}
        if hit:
            found[path.name] = hit
    return found


@pytest.mark.parametrize("lab", [1, 6, 9])
def test_a_grading_jail_holds_only_what_its_lab_gives(lab, tmp_path):
    """The sandbox's copy of the graders (what every jail of a grading sees) is stripped whatever the grader's install
    holds (here: a clone, with every answer), and gets back only what the graded lab gives its students: the kernels
    of the labs up to it, solved for the labs before it."""
    from helpers.course.autograde.sandbox import Sandbox

    key = answerkey.read_key(HELPERS / answerkey.DATA_FILE)
    box = Sandbox(None, carried=answerkey.carried_kernels(key, lab))
    try:
        found = revealed(box.grader / "helpers")
        data = json.loads((box.grader / "helpers" / answerkey.DATA_FILE).read_text())
    finally:
        box.close()
    assert set(data["kernels"]) == {f"lab{n}" for n in range(1, lab + 1)}
    assert {k for k, v in data["kernels"].items() if "solved" in v} == {f"lab{n}" for n in range(1, lab)}
    assert all("answer" not in r for e in data["exercises"].values() for r in e["regions"])
    # what the lab's release shows its students anyway: its notebook, and the earlier labs' kernels beside it
    notebook = next((ROOT / "labs").glob(f"lab{lab}_*.ipynb"))
    (tmp_path / notebook.stem).mkdir()
    answerkey.write_release_kernels(key, tmp_path)
    given = set().union(*revealed_in_notebooks([notebook]).values(), *revealed(tmp_path).values())
    labs = {where: n for where, n, _ in REGIONS}
    beyond = {f: {w for w in hit - TEACHING_CODE.get(f, set()) - given if labs[w] >= lab} for f, hit in found.items()}
    assert not {f: w for f, w in beyond.items() if w}, f"a Lab {lab} jail holds answers of Lab {lab} or later"
    assert not {w for w in given if labs[w] > lab}, "a lab's release shows a later lab's answer"


def test_asking_for_an_answer_in_a_class_says_where_it_is(class_package):
    package, _ = class_package
    data = package / answerkey.DATA_FILE
    text = hints.answer_text("lab1-tile-coords", sure=True, path=data)
    assert "not on this machine" in text and "instructor" in text
    assert "Hint 1" in hints.hint_text("lab1-tile-coords", 1, path=data)
    full = hints.answer_text("lab1-tile-coords", sure=True)  # self-study: a clone keeps its answers
    assert "The answer" in full


def test_a_released_lab_brings_the_kernels_it_gives(tmp_path):
    key = answerkey.read_key(HELPERS / answerkey.DATA_FILE)
    for name in ("lab1_tma", "lab6_persistent"):
        (tmp_path / name).mkdir()
    written = answerkey.write_release_kernels(key, tmp_path)
    assert [p.parent.name for p in written] == ["lab1_tma", "lab6_persistent"]
    six = json.loads((tmp_path / "lab6_persistent" / answerkey.RELEASE_FILE).read_text())["kernels"]
    assert set(six) == {f"lab{n}" for n in range(1, 7)} and "solved" not in six["lab6"] and "solved" in six["lab5"]
    assert "solved" not in json.loads((tmp_path / "lab1_tma" / answerkey.RELEASE_FILE).read_text())["kernels"]["lab1"]


# a submission that takes its answer from the course's data where grading runs: the attack that scored full marks
STEAL = ("from helpers.course import hints\n"
         "def tile_coords(tile_row, tile_col, box_rows, box_cols):\n"
         "    body = hints.exercises()['lab1-tile-coords'].regions[0].answer\n"
         "    space = dict(tile_row=tile_row, tile_col=tile_col, box_rows=box_rows, box_cols=box_cols)\n"
         "    exec('def f():\\n' + body, space)\n"
         "    return space['f']()\n")


def test_a_submission_that_reads_the_answer_where_it_is_graded_finds_none(tmp_path):
    from test_attacks import _bwrap_missing, grade_class
    from test_autograde import ANSWER, CHECK, TILE_CHECK, TILE_SETUP, make_notebook

    if _bwrap_missing():
        pytest.skip(_bwrap_missing())
    space: dict = {}
    exec(STEAL, space)  # noqa: S102 - on a clone (self-study) the answer is there, and the attack would pass
    assert space["tile_coords"](2, 5, 16, 64) == (5 * 64, 2 * 16)
    path = make_notebook(tmp_path / "attack", [(TILE_SETUP, None), (STEAL, ANSWER), (TILE_CHECK, CHECK)])
    bad, _ = grade_class(path, tmp_path)
    (cell,) = bad.cells
    assert cell.points == 0 and "IndentationError" in cell.error, bad.summary()  # the answer it found: none
