"""Graders behind the labs' check cells: one module per lab (``lab1``, ``lab2``, …), one function per check.

Each grader draws fresh random inputs where the exercise allows, prints a ✅ / ❌ report through
:mod:`helpers.course.grading` and raises :class:`helpers.course.grading.CheckFailed` on failure.
"""
