"""Lab 9's kernel as the notebook grades it, on one H100 (no Jupyter needed): writes $OUT/lab9_carried_h100.json.

The notebook's Lab 9 kernel is the course's Lab 7 kernel (the student's wrappers of Labs 1 and 2, ``kslice_desc``)
with Stream-K put into it; ``bench/kernels/lab9_streamk.cu`` is the course's measured version of it (the same work
list and fix-up, the mainloop in the header's helpers, what ``gpu.matmul`` runs). This capture

1. grades the notebook's kernel through ``lab9.check_streamk_kernel`` on the solutions' wrappers (random shapes on
   the H100 and on the executor, timed beside Lab 7, the course's Lab 9 kernel (the speed floor) and cuBLAS);
2. times it, the course's Lab 7 and the course's Lab 9 kernels at the two wave-quantized shapes, each beside cuBLAS,
   in the same run (``lab9.gpu_speed``);
3. times the notebook's and the course's Lab 9 kernels against each other, interleaved (``gpu.interleave_kernels``:
   9 rounds in turns, the same inputs): the ratio the test holds, since the beside-cuBLAS runs above follow each
   other and drift with the clock.

    python tools/h100/lab9_carried.py [OUT]
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402
from helpers.course import carry, grading  # noqa: E402
from helpers.course.checks import _common as C  # noqa: E402
from helpers.course.checks import lab5, lab9  # noqa: E402


def _solution(notebook: str, variable: str) -> str:
    _, text, why = C.saved_variable(notebook, variable, ROOT / "solutions")
    if text is None:
        raise SystemExit(why)
    return text


def _launch(source: str) -> object:
    """A maker of launches of ``source``'s lab9_gemm on every co-resident cluster, its own workspace and flags."""
    kernel = gpu.compile(source, lab9.KERNEL_NAME)
    clusters, ws, flags = lab9._workspace(kernel)
    return lambda a, b, c: lab9._lab9_launcher(kernel, a, b, c, ws, flags, clusters)


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    info = gpu.device_info()
    if not gpu.hopper_available() or info is None:
        print(f"no Hopper GPU ({gpu.no_hopper_reason()}): nothing to measure")
        return 0
    wrappers = (_solution("lab1_tma.ipynb", "TMA_LOAD") + _solution("lab2_mbarrier.ipynb", "MBAR_INIT_ARRIVE")
                + _solution("lab2_mbarrier.ipynb", "MBAR_TX_WAIT"))
    cell = _solution("lab9_streamk.ipynb", "LAB9_SRC")
    source = lab5.HEADER + wrappers + carry.code_lines(cell)
    course = lab9.lab9_reference_source()

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            lab9.check_streamk_kernel(cell, wrappers=wrappers)
            check = "passed"
        except grading.CheckFailed as exc:
            check = str(exc)
    print(buf.getvalue())

    rows = {}
    for s in lab9.gpu_speed(source, lab9.lab7_source(), lab9.QUANTIZED, 20, course):
        m, n, k = s["shape"]
        key = f"{m}x{n}x{k}"
        if "error" in s:
            rows[key] = {"error": s["error"]}
            print(f"{key}: {s['error']}")
            continue
        rows[key] = {"notebook_tflops": round(s["lab9"], 1), "course_tflops": round(s["course"], 1),
                     "lab7_tflops": round(s["lab7"], 1), "cublas_tflops": round(s["cublas"], 1),
                     "notebook_vs_course": round(s["lab9"] / s["course"], 3), "clock": s["clock"]}
        print(f"{key}: notebook {s['lab9']:.0f} TFLOP/s, course {s['course']:.0f} "
              f"({s['lab9'] / s['course']:.3f}×), Lab 7 {s['lab7']:.0f}, cuBLAS {s['cublas']:.0f}; {s['clock']}")
    make_nb, make_course = _launch(source), _launch(course)
    for m, n, k in lab9.QUANTIZED:
        r = gpu.interleave_kernels(make_nb, make_course, m, n, k, out_dtype=gpu.bfloat16, labels=("notebook", "course"))
        lo, hi = r.ratio_range
        rows.setdefault(f"{m}x{n}x{k}", {})["interleaved"] = {
            "notebook_vs_course": round(r.ratio, 3), "rounds": r.rounds, "range": [round(lo, 3), round(hi, 3)],
            "summary": r.summary("notebook", "course")}
        print(f"{m}×{n}×{k} interleaved: notebook {r.ratio:.3f}× the course's [{lo:.3f}–{hi:.3f}]")
    meta = {"gpu": info.name, "driver": ".".join(map(str, info.driver_version)),
            "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC", "script": "tools/h100/lab9_carried.py"}
    (out / "lab9_carried_h100.json").write_text(json.dumps({"meta": meta, "check": check, "shapes": rows}, indent=1)
                                                + "\n")
    return 0 if check == "passed" else 1


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "out"))
