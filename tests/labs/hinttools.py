"""Checks of a lab's tiered hints, shared by the lab tests: every region has a tier 0 and a tier 1, neither holds a
line of the region's solution, the student notebook shows tier 0 only (with how to ask for more) and no line of an
answer, and the kernel's header comments (outside the regions) do not describe a region's solution."""

from __future__ import annotations

import json
import re

import nbformat
from labtools import ROOT

from helpers.course import hints


def lab_exercises(lab: str) -> dict[str, hints.Exercise]:
    """The exercises of one lab, by id, as the students read them (helpers/course/data/labs.json)."""
    return {k: v for k, v in hints.exercises().items() if v.lab == lab}


def solution_notebook(lab: str) -> str:
    """The file name of a lab's solution notebook (``lab6`` -> ``lab6_persistent.ipynb``)."""
    (found,) = sorted((ROOT / "solutions").glob(f"{lab}_*.ipynb"))
    return found.name


def notebook_exercises(notebook: str) -> list[str]:
    """The exercises of a solution notebook, in order: the ids of its answer cells without '-answer'. Tests read them
    from the notebook, so an exercise an instructor adds is covered without editing the tests."""
    nb = nbformat.read(ROOT / "solutions" / notebook, as_version=4)
    gids = [c.metadata.get("nbgrader", {}).get("grade_id", "") for c in nb.cells if c.cell_type == "code"]
    return [hints.exercise_id(g) for g in gids if g.endswith("-answer")]


def graded_ids(notebook: str) -> list[str]:
    """The grade ids of a solution notebook's graded cells, in order."""
    nb = nbformat.read(ROOT / "solutions" / notebook, as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def notebook_regions(notebook: str) -> int:
    """The number of code solution regions in a solution notebook's answer cells."""
    nb = nbformat.read(ROOT / "solutions" / notebook, as_version=4)
    return sum(c.source.count("### BEGIN SOLUTION") for c in nb.cells if c.cell_type == "code"
               and c.metadata.get("nbgrader", {}).get("grade_id", "").endswith("-answer"))


def assert_in_order(found: list[str], steps: list[str]) -> None:
    """``steps`` all appear in ``found`` in this order (other entries, such as an added exercise, may sit between)."""
    at = [found.index(s) if s in found else -1 for s in steps]
    assert -1 not in at and at == sorted(at), (found, steps)


def assert_tiered(lab: str) -> None:
    """The lab's exercises, as its solution notebook has them; every region has tiers 0 and 1, and neither gives a
    line of its solution away."""
    table = lab_exercises(lab)
    assert sorted(table) == sorted(notebook_exercises(solution_notebook(lab)))
    for ex in table.values():
        for region in ex.regions:
            assert len(region.hints) >= 2, (ex.id, region.hints[0])
            for tier in region.hints[:2]:  # the generator's rule, asserted on the data the students read
                assert not hints.leaked_lines(tier, region.answer), (ex.id, tier)


def stub_texts(cell_source: str) -> list[str]:
    """The hint texts of a student cell's stubs, in order (Python's NotImplementedError, CUDA's #error)."""
    found = re.findall(r"raise NotImplementedError\((.*)\)\s*$", cell_source, re.M)
    texts = [eval(t) for t in found]  # noqa: S307 - the generator's own repr() of a string
    texts += [t.replace('\\"', '"') for t in re.findall(r'#error "not written yet: (.*)"\s*$', cell_source, re.M)]
    return texts


def given_lines(notebook: str) -> set[str]:
    """The stripped lines of a solution notebook outside its solution regions: code the student gets anyway."""
    out, inside = set(), False
    for cell in nbformat.read(ROOT / "solutions" / notebook, as_version=4).cells:
        for line in cell.source.split("\n"):
            if "### BEGIN SOLUTION" in line:
                inside = True
            elif "### END SOLUTION" in line:
                inside = False
            elif not inside:
                out |= {line.strip(), line.split("//", 1)[0].strip()}  # with and without a trailing comment
    return out


def assert_stubs_show_tier_0_only(notebook: str, lab: str) -> int:
    """Every region of the student notebook shows exactly its tier-0 hint and how to ask for more; no tier 1 or 2
    and no line of an answer (20 characters or more, not one the notebook gives anyway, like a loop head written
    twice) anywhere in the notebook. Returns the number of regions."""
    path = ROOT / "labs" / notebook
    text = path.read_text()
    given = given_lines(notebook)
    table = hints.exercises()
    regions = 0
    for cell in nbformat.read(path, as_version=4).cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if not gid.endswith("-answer"):
            continue
        ex = table[hints.exercise_id(gid)]
        assert stub_texts(cell.source) == [f"{r.hints[0]} (stuck? {lab}.hint('{ex.id}', 1))" for r in ex.regions]
        for region in ex.regions:
            regions += 1
            for later in region.hints[1:]:
                assert later not in text and json.dumps(later)[1:-1] not in text, (ex.id, later)
            for line in region.answer.split("\n"):
                if len(line.strip()) >= 20 and not line.strip().startswith(("//", "#")) and line.strip() not in given:
                    assert json.dumps(line.strip())[1:-1] not in text, (ex.id, line)
    return regions


def comments_outside_regions(source: str) -> str:
    """The ``//`` comments of a CUDA source that are not inside a solution region (what a student reads)."""
    out, inside = [], False
    for line in source.split("\n"):
        if "### BEGIN SOLUTION" in line:
            inside = True
        elif "### END SOLUTION" in line:
            inside = False
        elif not inside and "//" in line:
            out.append(line.split("//", 1)[1].strip())
    return "\n".join(out)


def code_of(source: str) -> str:
    """A CUDA source without its comments and blank lines (solution markers and hints are comments too)."""
    lines = (re.sub(r"\s*//.*$", "", line) for line in source.split("\n"))
    return "\n".join(line for line in lines if line.strip())
