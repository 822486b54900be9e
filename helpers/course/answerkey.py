"""The answer key kept apart from the course a class installs.

``helpers/course/data/labs.json`` (written by ``make labs``) holds, beside each exercise's hints, what gives answers
away: every exercise's answer (``answer``, encoded), each lab's kernel solved (``solved``, encoded; the next lab's
stand-in where a student's own does not pass) and each lab's kernel skeleton (a later lab's skeleton holds the
earlier labs' answers as given code). A clone used for self-study keeps them all. For a class they are split off:

- :func:`strip_package` rewrites the ``labs.json`` of a copy of the package without them and writes them, as the
  *answer key*, to a file of the instructor's (``deploy/install-course.sh --answer-key``; ``make hub`` puts it in
  the instructor's private course folder). The course installed for students carries no answer in any encoding.
- Where grading runs, the sandbox strips its own copy of the graders the same way, whatever the grader's install
  holds, and adds back only what the graded lab gives (:func:`carried_kernels`): the kernel skeletons of the labs up
  to it and the solved kernels of the labs *before* it, the stand-ins its checks build on. The answer of the lab
  being graded, and anything of a later lab, is never in a grading jail.
- A lab released to a class carries the same beside its notebook (``course-kernels.json``, written into the
  instructor's source folder by :func:`write_release_kernels`); the checks read it there.

This file uses the standard library only: ``install-course.sh`` runs it with a bare Python on the package it is
about to install (``python answerkey.py strip PACKAGE_DIR --key FILE``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["split", "strip_package", "carried_kernels", "graded_lab", "write_release_kernels", "RELEASE_FILE",
           "DATA_FILE"]

#: where the course's data lies in the ``helpers`` package
DATA_FILE = Path("course") / "data" / "labs.json"
#: the file beside a released notebook with the stand-in kernels of the labs before it
RELEASE_FILE = "course-kernels.json"


def split(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the data without answers, the answer key): exercises' ``answer`` and every lab's kernel entry (its skeleton
    shows the earlier labs' answers as given code, its ``solved`` its own) move to the key."""
    student: dict[str, Any] = {k: v for k, v in data.items() if k not in ("exercises", "kernels")}
    key: dict[str, Any] = {"version": data.get("version", 1), "exercises": {},
                           "kernels": dict(data.get("kernels", {}))}
    student["exercises"] = {}
    for ex_id, ex in data.get("exercises", {}).items():
        key["exercises"][ex_id] = [r.get("answer", "") for r in ex.get("regions", [])]
        student["exercises"][ex_id] = {**ex, "regions": [{k: v for k, v in r.items() if k != "answer"}
                                                         for r in ex.get("regions", [])]}
    student["kernels"] = {}
    return student, key


def _lab_number(lab: str) -> int | None:
    m = re.fullmatch(r"lab(\d+)", lab)
    return int(m.group(1)) if m else None


def carried_kernels(key: dict[str, Any], lab: int | None) -> dict[str, dict[str, Any]]:
    """The kernel entries a grading (or the release) of Lab ``lab`` may hold: the skeletons of the labs up to it
    (for its diffs), solved only for the labs before it (the stand-ins its checks build on). None (a notebook of no
    lab): none."""
    if lab is None:
        return {}
    out = {}
    for name, entry in key.get("kernels", {}).items():
        n = _lab_number(name)
        if n is not None and n <= lab:
            out[name] = {k: v for k, v in entry.items() if k != "solved" or n < lab}
    return out


def graded_lab(modules: list[str]) -> int | None:
    """The lab a notebook is graded as, from the course modules its graded cells call (``lab6`` → 6): the lowest,
    so a cell added for a later lab never widens what a grading holds."""
    numbers = [n for m in modules if (n := _lab_number(m)) is not None]
    return min(numbers) if numbers else None


def read_key(path: Path) -> dict[str, Any]:
    """The answer key in ``path``: a key file, or a ``labs.json`` that still holds its answers (self-study)."""
    data = json.loads(Path(path).read_text())
    if "exercises" in data and any(isinstance(v, dict) for v in data["exercises"].values()):
        return split(data)[1]  # a labs.json that still holds its answers
    return data


def strip_package(package: Path, key_out: Path | None = None) -> dict[str, Any]:
    """Take the answers out of ``package``'s (a copy of ``helpers``) course data, in place; write them to
    ``key_out`` when given (mode 0600). Returns the key."""
    path = Path(package) / DATA_FILE
    if not path.exists():
        return {"version": 1, "exercises": {}, "kernels": {}}
    mode = path.stat().st_mode & 0o777
    student, key = split(json.loads(path.read_text()))
    path.chmod(mode | 0o200)
    path.write_text(json.dumps(student, indent=1, ensure_ascii=False) + "\n")
    path.chmod(mode)
    if key_out is not None and (key["exercises"] or key["kernels"]):
        key_out = Path(key_out)
        key_out.parent.mkdir(parents=True, exist_ok=True)
        key_out.touch(mode=0o600)
        key_out.chmod(0o600)
        key_out.write_text(json.dumps(key, indent=1, ensure_ascii=False) + "\n")
    return key


def add_carried(package: Path, kernels: dict[str, dict[str, Any]]) -> None:
    """Put the given kernel entries (:func:`carried_kernels`) into ``package``'s course data."""
    path = Path(package) / DATA_FILE
    if not kernels or not path.exists():
        return
    data = json.loads(path.read_text())
    data.setdefault("kernels", {}).update(kernels)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def write_release_kernels(key: dict[str, Any], source: Path) -> list[Path]:
    """Beside each lab's notebook in an nbgrader ``source/`` folder, what that lab gives (``course-kernels.json``:
    :func:`carried_kernels`); the files written."""
    written = []
    for folder in sorted(p for p in Path(source).iterdir() if p.is_dir()):
        lab = _lab_number(folder.name.split("_")[0])
        kernels = carried_kernels(key, lab)
        if kernels:
            target = folder / RELEASE_FILE
            target.write_text(json.dumps({"kernels": kernels}, indent=1) + "\n")
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="answerkey", description="split the answer key off the course's data")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("strip", help="take the answers out of a copy of the helpers package, in place")
    s.add_argument("package", type=Path, help="the helpers folder of the copy")
    s.add_argument("--key", type=Path, default=None, help="write the answer key here (the instructor's file)")
    r = sub.add_parser("release", help="write each lab's stand-in kernels beside it in an nbgrader source folder")
    r.add_argument("key", type=Path)
    r.add_argument("source", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "strip":
        key = strip_package(args.package, args.key)
        print(f"answer key: {len(key['exercises'])} exercises, {len(key['kernels'])} lab kernels taken out of "
              f"{args.package / DATA_FILE}" + (f", kept in {args.key}" if args.key else ""))
    else:
        for path in write_release_kernels(read_key(args.key), args.source):
            print(f"stand-in kernels: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
