"""The referee judges as IPython would: an honest answer that uses IPython's syntax (a magic, ``display``) passes
grading as it passes in JupyterLab, and an attack through IPython's own machinery still fails.

Runs the real sandbox (bubblewrap, the control group), as tests/hub/test_attacks.py does.
"""

from __future__ import annotations

import pytest
from test_attacks import _bwrap_missing
from test_autograde import ANSWER, CHECK, TILE_CHECK, TILE_SETUP, TILE_WRONG, make_notebook

from helpers.course.autograde import grade_notebook

pytestmark = [pytest.mark.slow, pytest.mark.skipif(_bwrap_missing() is not None, reason=str(_bwrap_missing()))]

IPYTHON_ANSWER = ("%time scale = 1\n"
                  "def tile_coords(tile_row, tile_col, box_rows, box_cols):\n"
                  "    return (tile_col * box_cols * scale, tile_row * box_rows * scale)\n"
                  "display(tile_coords(1, 2, 3, 4))\n")
IPYTHON_MORE = "%%capture\nprint('quiet')\nimport numpy as np\nx = np.arange(3)\ndisplay(x)\n"


def test_an_honest_answer_in_ipython_syntax_passes(tmp_path):
    path = make_notebook(tmp_path, [(TILE_SETUP, None), (IPYTHON_MORE, None), (IPYTHON_ANSWER, ANSWER),
                                    (TILE_CHECK, CHECK)])
    report = grade_notebook(path, timeout=60, notebook_seconds=300)
    assert report.points == 1, report.summary()


def test_a_wrong_answer_in_ipython_syntax_still_fails(tmp_path):
    path = make_notebook(tmp_path, [(TILE_SETUP, None), ("%time " + TILE_WRONG.splitlines()[0][:0] + "pass", None),
                                    (TILE_WRONG, ANSWER), (TILE_CHECK, CHECK)])
    report = grade_notebook(path, timeout=60, notebook_seconds=300)
    assert report.points == 0, report.summary()
