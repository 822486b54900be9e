"""No earlier score stands in the gradebook for a submission that was not graded.

nbgrader writes a notebook's automatic scores at the very end of autograding (``SaveAutoGrades``). When a
re-grade fails (a re-submitted notebook that cannot be read, a sandbox that refuses the submission, a grader
stopped halfway) nbgrader removes the autograded notebook but leaves the scores of the earlier run, which then
stand for a submission nobody graded. Likewise when collect refuses a student's newer submission, nbgrader has
already removed the earlier one from ``submitted/``, and the earlier scores stay.

:func:`forget_earlier_grades` (nbgrader's ``Autograde.pre_convert_hook``, which runs before each submission is
graded) and :class:`~helpers.course.autograde.exchange.OwnerCheckedCollect` (on a refusal) call :func:`forget`: the
submission's automatic scores are cleared (its score is 0) and every graded cell is marked for manual grading, so
formgrader lists it as needing a look. A re-grade that succeeds writes the scores again. Manual scores, the
instructor's own, are kept, as nbgrader keeps them on a successful re-grade.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["forget", "forget_earlier_grades"]

log = logging.getLogger(__name__)


def _course_ids(db_file: Path) -> list[str]:
    with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True) as db:
        return [row[0] for row in db.execute("SELECT id FROM course")]


def forget(db_file: Path | str, assignment: str, student: str, notebooks: Iterable[str] | None = None) -> int:
    """Clear the automatic scores of ``student``'s submission of ``assignment`` (only of ``notebooks``, names
    without ``.ipynb``, when given) and mark them for manual grading; how many grades were cleared."""
    from nbgrader.api import Gradebook, MissingEntry

    db_file = Path(db_file)
    if not db_file.is_file():
        return 0
    only = set(notebooks) if notebooks is not None else None
    cleared = 0
    for course in _course_ids(db_file):
        with Gradebook(f"sqlite:///{db_file}", course) as gb:
            try:
                submission = gb.find_submission(assignment, student)
            except MissingEntry:
                continue
            for notebook in submission.notebooks:
                if only is not None and notebook.name not in only:
                    continue
                for grade in notebook.grades:
                    if grade.auto_score is not None or not grade.needs_manual_grade:
                        grade.auto_score = None
                        grade.needs_manual_grade = True
                        cleared += 1
            gb.db.commit()
    return cleared


def forget_earlier_grades(assignment: str = "", student: str = "", notebooks: Iterable[str] = (),
                          **_: Any) -> None:
    """nbgrader's ``pre_convert_hook`` for autograding: before a submission is graded, forget its earlier scores.

    nbgrader passes the submitted notebooks' paths (``<course>/submitted/<student>/<assignment>/<name>.ipynb``,
    its default layout); the student and assignment are read from them (the ``assignment`` and ``student`` it
    passes may be patterns such as ``*``) and the gradebook is the course's ``gradebook.db``.
    """
    by_submission: dict[tuple[Path, str, str], list[str]] = {}
    for path in map(Path, notebooks):
        if len(path.parents) < 4 or path.parents[2].name != "submitted":
            log.warning("not in nbgrader's default layout, its earlier scores are kept: %s", path)
            continue
        key = (path.parents[3] / "gradebook.db", path.parents[1].name, path.parent.name)
        by_submission.setdefault(key, []).append(path.stem)
    for (db_file, who, what), names in by_submission.items():
        cleared = forget(db_file, what, who, names)
        if cleared:
            log.info("cleared %d earlier scores of %s's %s until it is graded again", cleared, who, what)
