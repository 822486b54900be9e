"""Every speed, ratio or time the lessons and labs quote in their text comes from a committed results or fixture file.

A quoted figure is a number followed by ``TFLOP/s``, ``×`` (a ratio), ``ms``, ``µs`` or ``ns`` in a markdown cell.
It passes when a results or fixture file (``bench/results/``, ``tests/data/``) that the same cell names holds a value
that rounds to it at the precision the text gives. Figures that are not one value of a file (a datasheet's, a
model's prediction, a grader's threshold, a ratio of two measured values) are listed in ``DERIVED`` with the
computation that gives them, from the file or the code they come from.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted([*ROOT.glob("lessons/*.ipynb"), *ROOT.glob("solutions/*.ipynb"), *ROOT.glob("labs/*.ipynb")])
FILES = sorted([*ROOT.glob("bench/results/*.json"), *ROOT.glob("bench/results/*.md"), *ROOT.glob("tests/data/*.json")])

_NUM = r"\d[\d,]*(?:\.\d+)?"
#: a figure, or a range of two, with its unit; a ratio's × must not start a shape (128×256) or a product (2×(...))
QUOTED = re.compile(rf"(?<![\w.·/×-])({_NUM})(?:\s*[–-]\s*({_NUM}))?(?:\s*(TFLOP/s|ms|µs|ns)\b|(×)(?![\w(]))")
_UNIT_SCALE = {"ms": 1e-3, "µs": 1e-6, "ns": 1e-9}

def _tune_run2(kernel: str, shape: tuple[int, int, int]) -> float:
    run = json.loads((ROOT / "bench/results/2026-11-22-tune-run2.json").read_text())
    return next(x["tflops"] for x in run["rungs"][kernel]["speed"] if tuple(x["shape"]) == shape)


def _predicted_gain(shape: tuple[int, int, int]) -> float:
    from helpers.hopper import streamk

    split, whole = (streamk.predict(*shape, schedule=s).tflops for s in ("stream-k", "data-parallel"))
    return split / whole


def _hybrid_gain(shape: tuple[int, int, int]) -> float:
    return _tune_run2("lab7-hybrid", shape) / _tune_run2("lab6-g8-zero", shape)  # the file's names: Lab 9, Lab 7


def _speed_floor() -> float:
    from helpers.course.checks import _common

    return _common.SPEED_FLOOR


def _lab9_target() -> float:
    from helpers.course.checks import lab9

    return lab9.TARGET


_SHORT_1 = (1024, 1024, 16384)
_SHORT_2 = (1024, 4352, 8192)
#: figures that are not one value of a file: (notebook stem, figure as written) -> the computation that gives it
DERIVED: dict[tuple[str, str], Callable[[], float]] = {
    ("00_big_picture", "989 TFLOP/s"): lambda: 989,                   # H100 SXM datasheet, dense bf16
    ("00_big_picture", "1.1 ms"): lambda: 2 * 8192**3 / 989e12 * 1e3,  # 8192³ at the datasheet's peak
    ("05_kernel_design", "989 TFLOP/s"): lambda: 989,
    ("05_kernel_design", "67 TFLOP/s"): lambda: 67,                   # H100 SXM datasheet, FP32 on CUDA cores
    ("04_pipelines", "1.5×"): lambda: (128 + 256) / (128 + 128),      # a 128×256 stage against a 128×128 one
    ("lab4_pipeline", "1.5×"): lambda: (128 + 256) / (128 + 128),
    ("07_sequence_barriers", "1.9×"): lambda: _hybrid_gain(_SHORT_1),
    ("07_sequence_barriers", "1.7×"): lambda: _hybrid_gain(_SHORT_2),
    ("07_sequence_barriers", "2.1×"): lambda: _predicted_gain(_SHORT_1),
    ("07_sequence_barriers", "1.8×"): lambda: _predicted_gain(_SHORT_2),
    ("lab8_pingpong", "0.8×"): _speed_floor,
    ("lab9_streamk", "1.2×"): _lab9_target,
}


def _values(obj) -> list[float]:
    if isinstance(obj, bool):
        return []
    if isinstance(obj, (int, float)):
        return [float(obj)]
    if isinstance(obj, dict):
        return [v for x in obj.values() for v in _values(x)] + [v for k in obj for v in _values_of_text(str(k))]
    if isinstance(obj, list):
        return [v for x in obj for v in _values(x)]
    if isinstance(obj, str):
        return _values_of_text(obj)
    return []


def _values_of_text(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in re.findall(_NUM, text)]


@functools.cache
def _file_values(path: Path) -> frozenset[float]:
    text = path.read_text()
    vals = _values(json.loads(text)) if path.suffix == ".json" else _values_of_text(text)
    return frozenset(vals)


def _matches(quoted: str, unit: str, values: frozenset[float]) -> bool:
    q = float(quoted.replace(",", ""))
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    tol = 0.5 * 10**-decimals + 1e-9
    scales = [1.0]
    if unit in _UNIT_SCALE:  # a time may be stored in s, ms, µs or ns
        scales = [_UNIT_SCALE[unit] / s for s in (1.0, 1e-3, 1e-6, 1e-9)]
    return any(abs(v / s - q) <= tol for v in values for s in scales if math.isfinite(v))


def _named_files(text: str) -> list[Path]:
    names = set(re.findall(r"[\w.-]+\.(?:json|md)", text))
    return [f for f in FILES if f.name in names or f.stem in {n.rsplit(".", 1)[0] for n in names}]


def _quoted(path: Path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        text = re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), cell.source)  # code spans are formulas
        for m in QUOTED.finditer(text):
            unit = m.group(3) or m.group(4)
            for number in filter(None, (m.group(1), m.group(2))):
                yield cell.get("id"), number, unit, _named_files(cell.source)


def _figures():
    for path in NOTEBOOKS:
        for cid, number, unit, files in _quoted(path):
            name = f"{path.parent.name}/{path.stem}:{cid}:{number}{unit}"
            yield pytest.param(path, cid, number, unit, files, id=name)


@pytest.mark.parametrize(("path", "cid", "number", "unit", "files"), list(_figures()))
def test_a_quoted_figure_is_in_a_file_its_cell_names(path, cid, number, unit, files):
    key = (path.stem, f"{number}{'' if unit == '×' else ' '}{unit}")
    if key in DERIVED:
        decimals = len(number.split(".")[1]) if "." in number else 0
        assert round(DERIVED[key](), decimals) == float(number), key
        return
    where = f"{path.relative_to(ROOT)} cell {cid}: {number} {unit}"
    assert files, f"{where}: the cell names no results or fixture file"
    assert any(_matches(number, unit, _file_values(f)) for f in files), f"{where}: in none of {[f.name for f in files]}"


def test_the_scan_finds_the_figures_it_should():
    lab9 = [n for _, n, *_ in _quoted(ROOT / "solutions/lab9_streamk.ipynb")]
    assert "1.12" in lab9 and "0.94" in lab9 and "0.96" in lab9     # a bold ratio and both ends of a range
    shapes = [n for _, n, *_ in _quoted(ROOT / "lessons/03_wgmma.ipynb")]
    assert "64" not in shapes                                         # 64×N is a shape, not a ratio
