"""The ladder at the end of a lab: the course's kernels as the H100 measured them (``bench/results/ladder.json``),
then the student's own kernel as the lab's check timed it in this session, beside the course's kernel timed in the
same run. Each kernel's timings are kept by its name (:func:`timed`), filled by the kernel checks on an H100."""

from __future__ import annotations

from typing import Any

__all__ = ["TIMED", "timed", "shape_words", "lab_ladder_rows", "show_rows"]

#: each kernel's timings of this session (kernel name -> size -> (the student's kernel, the course's kernel in the
#: same run)), filled by the kernel checks on an H100
TIMED: dict[str, dict[Any, tuple[Any, Any]]] = {}


def timed(kernel: str) -> dict[Any, tuple[Any, Any]]:
    """This session's timings of the kernel named ``kernel`` (size -> (yours, the course's in the same run))."""
    return TIMED.setdefault(kernel, {})


def _shape(size: Any) -> tuple[int, int, int]:
    return (size, size, size) if isinstance(size, int) else tuple(size)


def shape_words(size: Any) -> str:
    """4096 → "4096³"; (1024, 1024, 16384) → "1024×1024×16384"."""
    return f"{size}³" if isinstance(size, int) else "×".join(map(str, size))


def lab_ladder_rows(size: Any, lab: str, keys: dict[str, str], kernel: str) -> list[dict[str, Any]]:
    """The ladder at ``size`` (an int for size³, or (M, N, K)) for ``lab`` ("Lab 6"): the course's kernels ``keys``
    (ladder key -> step name) as measured on an H100 (bench/results/ladder.json, "not measured yet" where there is
    none), then the student's own kernel ``kernel`` as the check timed it in this session, beside the course's kernel
    timed in the same run."""
    from helpers.course import ladder

    data = ladder.load()
    rows = []
    for r in ladder.rungs(_shape(size), data):
        if r.key in keys:
            where = f"{data.get('gpu', 'H100')}, {r.source or ladder.LADDER_FILE.name}" if r.tflops else \
                "not measured yet"
            rows.append({"step": keys[r.key], "tflops": r.tflops, "cublas_tflops": r.cublas_tflops, "where": where})
    mine = timed(kernel)
    if size in mine:
        bench, ref = mine[size]
        rows.append({"step": f"{lab} · your kernel", "tflops": bench.tflops, "cublas_tflops": bench.cublas_tflops,
                     "where": "this notebook, just now"})
        if ref is not None:
            rows.append({"step": f"{lab} · the course's kernel, same run", "tflops": ref.tflops,
                         "cublas_tflops": None, "where": "this notebook, just now"})
    else:
        rows.append({"step": f"{lab} · your kernel", "tflops": None, "cublas_tflops": None,
                     "where": "not timed in this session (the check times it on an H100)"})
    return rows


def show_rows(rows: list[dict[str, Any]], size: Any) -> None:
    """Ladder rows as a table (Markdown in a notebook, text elsewhere): TFLOP/s beside cuBLAS in the same run, and
    the ratio."""
    lines = [f"| {shape_words(size)} | TFLOP/s | cuBLAS TFLOP/s (same run) | ratio | measured |",
             "|---|---:|---:|---:|---|"]
    for r in rows:
        t, cb = r["tflops"], r["cublas_tflops"]
        ratio = f"{t / cb:.2f}" if t and cb else "–"
        lines.append(f"| {r['step']} | {f'{t:.0f}' if t else '–'} | {f'{cb:.0f}' if cb else '–'} | {ratio} | "
                     f"{r['where']} |")
    table = "\n".join(lines)
    try:
        from IPython.display import Markdown, display

        display(Markdown(table))
    except ImportError:  # pragma: no cover - IPython is always there in the course's environment
        print(table)
