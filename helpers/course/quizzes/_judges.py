"""Judges shared by the lessons' quizzes: numbers, multiple choice, yes/no, pairs of integers."""

from __future__ import annotations

import re
from collections.abc import Callable

from helpers.course.grading import parse_number

Judge = Callable[[object], tuple[bool, str]]


def number(response: object) -> float | None:
    """A number from a typed answer ('2,048', '2 048', '2048 FLOP/B', '1e3'); None if there is none."""
    return parse_number(response)


def ints(response: object) -> list[int]:
    """Every integer in a typed answer, in order."""
    return [int(x) for x in re.findall(r"-?\d+", str(response).replace("_", ""))]


def near(target: float, rel: float, hint_low: str, hint_high: str) -> Judge:
    """A number within a relative tolerance; a wrong one is told which way it is off."""

    def judge(response: object) -> tuple[bool, str]:
        value = number(response)
        if value is None:
            return False, f"{response!r} is not a number"
        if abs(value - target) <= rel * abs(target):
            return True, ""
        low = value < target
        return False, f"{response} is too {'low' if low else 'high'}: " + (hint_low if low else hint_high)

    return judge


def _plain(text: object) -> str:
    return " ".join(str(text).split()).lower()


def choice(answer: str, why: dict[str, str] | None = None) -> Judge:
    """One option of a multiple-choice quiz (case and spacing ignored), with a reason for each wrong option."""
    reasons = {_plain(k): v for k, v in (why or {}).items()}

    def judge(response: object) -> tuple[bool, str]:
        text = _plain("" if response is None else response)
        if text == _plain(answer):
            return True, ""
        return False, reasons.get(text, f"{response!r} is not it")

    return judge


def yes_no(expected: bool, why_wrong: str) -> Judge:
    """A yes/no answer (also true/false, 1/0)."""
    yes, no = {"1", "true", "yes", "y", "t"}, {"0", "false", "no", "n", "f"}

    def judge(response: object) -> tuple[bool, str]:
        text = str(response).strip().lower()
        if text not in yes | no:
            return False, f"{response!r}: answer yes/true/1 or no/false/0"
        ok = (text in yes) == expected
        return ok, "" if ok else why_wrong

    return judge


def pair(expected: tuple[int, int], mistakes: dict[tuple[int, int], str], what: str) -> Judge:
    """Two integers ('25, 10', '(25, 10)', '25 10'; true/false count as 1/0), with a reason per known mistake."""

    def judge(response: object) -> tuple[bool, str]:
        text = re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", str(response).lower()))
        numbers = ints(text)
        if len(numbers) != 2:
            return False, f"{response!r}: answer with two numbers, {what}"
        got = (numbers[0], numbers[1])
        if got == expected:
            return True, ""
        return False, mistakes.get(got, f"{got} is not it ({what})")

    return judge
