"""Lab 8's kernel as the notebook grades it, on one H100 (no Jupyter needed): writes $OUT/lab8_carried_h100.json.

The notebook's Lab 8 kernel is the course's Lab 7 kernel (the student's wrappers of Labs 1 and 2, ``kslice_desc``) in
ping-pong: 128×128 tiles, one per consumer warpgroup, taking turns through an ordered sequence barrier;
``bench/kernels/lab8_pingpong.cu`` is the course's measured version of it (the same schedule, barriers and epilogue,
the mainloop in the header's helpers). This capture

1. grades the notebook's kernel through ``lab8.check_pingpong_kernel`` on the solutions' wrappers (random shapes on
   the H100 and a small one on the executor, timed beside Lab 7, cuBLAS and the course's kernel: the speed floor);
2. times it and ``bench/kernels/lab8_pingpong.cu`` at 4096³ and 8192³, each beside cuBLAS, in the same run;
3. times the two against each other, interleaved (``gpu.interleave_kernels``: 9 rounds in turns, the same inputs):
   the ratio the test holds, since the two beside-cuBLAS runs above follow each other and drift with the clock.

    python tools/h100/lab8_carried.py [OUT]
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
from helpers.course.checks import lab5, lab8  # noqa: E402

SIZES = (4096, 8192)


def _solution(notebook: str, variable: str) -> str:
    _, text, why = C.saved_variable(notebook, variable, ROOT / "solutions")
    if text is None:
        raise SystemExit(why)
    return text


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    info = gpu.device_info()
    if not gpu.hopper_available() or info is None:
        print(f"no Hopper GPU ({gpu.no_hopper_reason()}): nothing to measure")
        return 0
    wrappers = (_solution("lab1_tma.ipynb", "TMA_LOAD") + _solution("lab2_mbarrier.ipynb", "MBAR_INIT_ARRIVE")
                + _solution("lab2_mbarrier.ipynb", "MBAR_TX_WAIT"))
    cell = _solution("lab8_pingpong.ipynb", "LAB8_SRC")
    source = lab5.HEADER + wrappers + carry.code_lines(cell)
    course = (ROOT / "bench" / "kernels" / "lab8_pingpong.cu").read_text()

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            lab8.check_pingpong_kernel(cell, wrappers=wrappers)
            check = "passed"
        except grading.CheckFailed as exc:
            check = str(exc)
    print(buf.getvalue())

    rows = {}
    for size, (bench, clock, ref) in zip(SIZES, C.time_gemm(source, lab8.LAUNCH, list(SIZES),
                                                            what="the notebook's Lab 8 kernel", reference=course),
                                         strict=True):
        rows[str(size)] = {"notebook_tflops": round(bench.tflops, 1), "course_tflops": round(ref.tflops, 1),
                           "cublas_tflops": round(bench.cublas_tflops or 0.0, 1),
                           "notebook_vs_course": round(bench.tflops / ref.tflops, 3), "clock": str(clock)}
        print(f"{size}³: notebook {bench.tflops:.0f} TFLOP/s, course {ref.tflops:.0f} TFLOP/s "
              f"({bench.tflops / ref.tflops:.3f}×), cuBLAS {bench.cublas_tflops or 0:.0f}; {clock}")
    k_nb, k_course = gpu.compile(source, lab8.KERNEL_NAME), gpu.compile(course, lab8.KERNEL_NAME)
    for size in SIZES:
        r = gpu.interleave_kernels(lambda a, b, c: lab8.LAUNCH.launcher(k_nb, a, b, c),
                                   lambda a, b, c: lab8.LAUNCH.launcher(k_course, a, b, c), size, size, size,
                                   out_dtype=gpu.bfloat16, labels=("notebook", "course"))
        lo, hi = r.ratio_range
        rows[str(size)]["interleaved"] = {"notebook_vs_course": round(r.ratio, 3), "rounds": r.rounds,
                                          "range": [round(lo, 3), round(hi, 3)],
                                          "summary": r.summary("notebook", "course")}
        print(f"{size}³ interleaved: notebook {r.ratio:.3f}× the course's [{lo:.3f}–{hi:.3f}]")
    meta = {"gpu": info.name, "driver": ".".join(map(str, info.driver_version)),
            "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC", "script": "tools/h100/lab8_carried.py"}
    (out / "lab8_carried_h100.json").write_text(json.dumps({"meta": meta, "check": check, "sizes": rows}, indent=1)
                                                + "\n")
    return 0 if check == "passed" else 1


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "out"))
