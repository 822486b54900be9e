"""The lessons' quick checks: one module per lesson (``lesson00``, ``lesson01``, …).

Each module defines :class:`helpers.course.grading.Quiz` objects at top level; a lesson cell shows one with
``from helpers.course.quizzes import lesson00; lesson00.blocks`` (the quiz draws itself as a widget). Tests find
every quiz through :func:`all_quizzes` and check that the right answer passes and wrong answers fail.
"""

from __future__ import annotations

import importlib
import pkgutil

from helpers.course.grading import Quiz


def all_quizzes() -> dict[str, Quiz]:
    """Every quiz of every lesson module, keyed ``"lesson00.blocks"``."""
    found: dict[str, Quiz] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, Quiz):
                found[f"{info.name}.{name}"] = value
    return found
