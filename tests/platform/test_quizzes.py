"""Every lesson quiz accepts its right answer and rejects each of its plausible wrong ones."""

from __future__ import annotations

import pytest

from helpers.course.quizzes import all_quizzes

QUIZZES = all_quizzes()


def test_every_lesson_has_quizzes():
    lessons = {key.split(".")[0] for key in QUIZZES}
    assert lessons, "no quiz found in helpers/course/quizzes"


@pytest.mark.parametrize("key", sorted(QUIZZES))
def test_quiz_right_and_wrong(key: str, capsys):
    quiz = QUIZZES[key]
    ok, msg = quiz.judge(quiz.right)
    assert ok, f"{key}: its own right answer {quiz.right!r} fails: {msg}"
    for wrong in quiz.wrong:
        ok, _ = quiz.judge(wrong)
        assert not ok, f"{key} accepts the wrong answer {wrong!r}"
    assert quiz.grade(quiz.wrong[0]) is False
    assert "✗" in capsys.readouterr().out


NUMERIC = sorted(k for k, q in QUIZZES.items() if q._judge is None and isinstance(q.right, int | float)
                 and not isinstance(q.right, bool))


@pytest.mark.parametrize("key", NUMERIC)
def test_numeric_quizzes_accept_the_answer_as_students_type_it(key: str):
    quiz = QUIZZES[key]
    value = quiz.right
    typed = [f"{value:,}", f" {value} ", f"{value} units"]
    if isinstance(value, int) and value >= 1000:
        typed.append(f"{value:,}".replace(",", " "))
    for text in typed:
        assert quiz.judge(text)[0], f"{key} rejects {text!r}"
