"""The course's speed ladder: every lab's GEMM beside cuBLAS, as measured on an H100 by `bench/ladder.py`.

The figures live in ``bench/results/ladder.json`` (GPU, driver, clocks and date included); lessons and labs quote
them through this module, never by hand. A rung not measured yet says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Rung", "load", "rungs", "show", "figure", "stored_key", "LADDER_FILE", "STEPS", "LAB_NUMBERING",
           "FORMER_KEYS"]

LADDER_FILE = Path(__file__).resolve().parents[2] / "bench" / "results" / "ladder.json"

#: The ladder's steps in course order: (key in ladder.json, lab, what the kernel is).
STEPS = [
    ("lab3", "Lab 3", "one warpgroup per 64×64 tile, TMA + 4 × wgmma m64n64k16 per K step"),
    ("lab4a", "Lab 4 · a", "128×128 tile, a ring of 4 stages, producer + 2 consumer warpgroups"),
    ("lab4b", "Lab 4 · b", "128×256 tiles, m64n256k16, setmaxnreg 24/240, 4 stages"),
    ("lab5", "Lab 5", "TMA-store epilogue, bf16 C"),
    ("lab6", "Lab 6", "persistent blocks, one per SM, tiles in a grouped raster order"),
    ("lab7", "Lab 7", "2-block clusters multicasting B, on Lab 6's persistent kernel"),
    ("lab8", "Lab 8", "ping-pong: two consumers with their own 128×128 tiles, in turns"),
    ("lab9", "Lab 9", "Stream-K over the last waves (whole tiles before)"),
]

#: The lab numbering a results file uses: files written by bench/ladder.py carry ``"lab_numbering": 2``. Files
#: recorded before persistence and clusters became two labs (no such field) use the earlier keys: their "lab6" is
#: the clustered kernel (today's Lab 7), their "lab7" the Stream-K kernel (today's Lab 9), and today's Lab 6 (the
#: persistent kernel without clusters) is not in them.
LAB_NUMBERING = 2
FORMER_KEYS: dict[str, str | None] = {"lab6": None, "lab7": "lab6", "lab9": "lab7"}


def stored_key(key: str, data: dict[str, Any]) -> str | None:
    """The key under which results file ``data`` holds today's rung ``key`` (None: that file has no such rung)."""
    if int(data.get("lab_numbering", 1)) >= LAB_NUMBERING:
        return key
    return FORMER_KEYS.get(key, key)


@dataclass(frozen=True)
class Rung:
    """One step of the ladder at one size (None where not measured)."""

    key: str
    lab: str
    kernel: str
    shape: tuple[int, int, int]
    tflops: float | None
    cublas_tflops: float | None
    ratio: float | None
    sm_clock_mhz: float | None
    out_dtype: str | None
    source: str | None

    def __str__(self) -> str:
        m, n, k = self.shape
        if self.tflops is None:
            return f"{self.lab:10} {m}×{n}×{k}: not measured yet"
        return (f"{self.lab:10} {m}×{n}×{k}: {self.tflops:4.0f} TFLOP/s, cuBLAS {self.cublas_tflops:4.0f} "
                f"({self.ratio:.2f}×), {self.out_dtype} C, SM clock {self.sm_clock_mhz or '?'} MHz")


def load(path: Path | None = None) -> dict[str, Any]:
    """The raw ladder.json (an empty ladder when the file is missing)."""
    p = path or LADDER_FILE
    return json.loads(p.read_text()) if p.exists() else {"rungs": {}}


def rungs(shape: tuple[int, int, int] = (4096, 4096, 4096), data: dict[str, Any] | None = None) -> list[Rung]:
    """Every step of the ladder at one problem shape, in course order."""
    data = data if data is not None else load()
    out = []
    for key, lab, kernel in STEPS:
        stored = stored_key(key, data)
        e = data.get("rungs", {}).get(stored, {}) if stored else {}
        s = next((s for s in e.get("speed", []) if tuple(s["shape"]) == tuple(shape)), None)
        out.append(Rung(key, lab, kernel, tuple(shape), s and s["tflops"], s and s["cublas_tflops"],
                        s and s["ratio"], s and s.get("sm_clock_mhz"), e.get("out_dtype"), e.get("source")))
    return out


def show(shapes: tuple[tuple[int, int, int], ...] = ((4096, 4096, 4096), (8192, 8192, 8192))) -> None:
    """Print the ladder with the GPU and date it was measured on."""
    data = load()
    if data.get("gpu"):
        print(f"measured on {data['gpu']}, driver CUDA {'.'.join(map(str, data.get('driver_cuda', [])))}, "
              f"cuBLAS {data.get('cublas')}, {data.get('date')}")
    for shape in shapes:
        for r in rungs(shape, data):
            print(r)


def figure(shape: tuple[int, int, int] = (4096, 4096, 4096), mine: dict[str, float] | None = None) -> Any:
    """A plotly bar chart of the ladder at `shape` (TFLOP/s, with cuBLAS of the same run as a marker); `mine`
    adds the student's own measured figures by step key."""
    import plotly.graph_objects as go

    rs = rungs(shape)
    labs = [r.lab for r in rs]
    fig = go.Figure()
    fig.add_bar(x=labs, y=[r.tflops or 0 for r in rs], name="course kernel", marker_color="#4C78A8",
                text=[f"{r.tflops:.0f}" if r.tflops else "not measured" for r in rs], textposition="outside")
    fig.add_scatter(x=labs, y=[r.cublas_tflops for r in rs], mode="markers", name="cuBLAS (same run)",
                    marker={"symbol": "line-ew-open", "size": 28, "color": "#E45756", "line": {"width": 3}})
    if mine:
        fig.add_scatter(x=[r.lab for r in rs if r.key in mine], y=[mine[r.key] for r in rs if r.key in mine],
                        mode="markers", name="your kernel", marker={"size": 12, "color": "#54A24B"})
    m, n, k = shape
    fig.update_layout(title=f"The ladder at {m}×{n}×{k} (H100, TFLOP/s)", width=860, height=420,
                      yaxis_title="TFLOP/s", margin={"t": 60, "l": 60, "r": 20, "b": 60},
                      legend={"orientation": "h", "y": -0.18})
    from helpers.course.widgets import figure as style

    return style.styled(fig)
