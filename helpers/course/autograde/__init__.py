"""Autograding untrusted submissions: each notebook runs in its own sandboxed kernel, graded by the course's own
read-only copy of the checks, with tampering caught.

nbgrader keeps the books (release, collect, autograde, the gradebook); this package replaces the one step where a
student's code runs, nbgrader's ``Execute`` preprocessor, with :class:`IsolatedExecute`:

- **its own process, with limits**: the notebook runs in a fresh IPython kernel with a memory limit, a CPU-time
  limit, a file-size limit, a time limit per cell and one for the whole notebook. A cell that loops forever, a
  kernel that deadlocks or dies costs that submission the checks it had not passed yet; the grading run goes on
  to the next submission.
- **the grader's own checks**: the kernel imports ``helpers`` from a read-only copy the grader made of its own
  installation (not the student's environment, not files submitted beside the notebook); after the run the copy
  is hashed again, so a submission that edited it fails.
- **tampering caught**: :mod:`helpers.course.autograde.guard` fingerprints the graders, numpy and the builtins before
  the first cell and compares around every graded cell (a redefined check function, a monkeypatched
  ``numpy.allclose``); a graded cell run on a tampered kernel gets ``TamperingDetected`` and no points.
- **another user** (``IsolatedExecute.run_as``): on a shared machine the kernel runs as an unprivileged account
  through ``sudo``, so a submission cannot read the instructor's files or the gradebook (see docs/hub.md).

nbgrader configuration (``nbgrader_config.py`` of the course)::

    from helpers.course.autograde import autograde_preprocessors
    c.Autograde.autograde_preprocessors = autograde_preprocessors()
    c.IsolatedExecute.memory_mb = 4096

Without nbgrader: ``python -m helpers.course.autograde grade lab1_tma.ipynb`` prints the points of each graded cell.
"""

from __future__ import annotations

from typing import Any

__all__ = ["IsolatedExecute", "autograde_preprocessors", "grade_notebook", "GradeReport", "CellGrade"]


def __getattr__(name: str) -> Any:  # nbgrader loads only when asked for: the grading kernel boots from here
    if name in __all__:
        from . import execute

        return getattr(execute, name)
    raise AttributeError(f"module 'helpers.course.autograde' has no attribute {name!r}")
