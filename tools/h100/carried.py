"""A lab's kernel as the notebook grades it, on one H100 (no Jupyter needed): writes $OUT/labN_carried_h100.json.

From Lab 5 on, the notebook's kernel is the course's kernel of the lab before (the student's wrappers of Labs 1 and 2,
``kslice_desc``) with the lab's change; ``bench/kernels/`` holds the course's measured version of each (the same
schedule and epilogue, the mainloop in the header's helpers). For each lab named, this capture

1. grades the notebook's kernel through the lab's kernel check on the solutions' wrappers (random shapes on the H100
   and a small one on the executor, timed beside cuBLAS and the course's kernel: the speed floor);
2. times it and the course's measured kernel beside cuBLAS, in the same run (Labs 5-8 at 4096³ and 8192³, Lab 9 on
   its two wave-quantized shapes, beside Lab 7 too);
3. times the two against each other, interleaved (``gpu.interleave_kernels``: 9 rounds in turns, the same inputs).

    python tools/h100/carried.py LAB [LAB ...] [OUT]      # LAB: 5, 6, 7, 8 or 9
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402
from helpers.course import carry, grading  # noqa: E402
from helpers.course.checks import _common as C  # noqa: E402
from helpers.course.checks import lab5, lab6, lab7, lab8, lab9  # noqa: E402

SQUARES = (4096, 8192)


@dataclass(frozen=True)
class Lab:
    """One lab's notebook kernel: its cell, the course's measured kernel, the check, the launch."""

    number: int
    notebook: str
    module: Any
    check: Callable[[str, str], None]  # (cell, wrappers) -> raises CheckFailed
    bench: str = ""  # bench/kernels/<bench>: the course's measured kernel (Labs 5-8)

    @property
    def variable(self) -> str:
        return f"LAB{self.number}_SRC"


LABS = {
    5: Lab(5, "lab5_epilogue.ipynb", lab5, lambda cell, w: lab5.check_epilogue_kernel(cell, wrappers=w, sizes=(4096,)),
           "lab5_epilogue.cu"),
    6: Lab(6, "lab6_persistent.ipynb", lab6,
           lambda cell, w: lab6.check_persistent_kernel(cell, wrappers=w, sizes=(4096,)), "lab6_persistent.cu"),
    7: Lab(7, "lab7_clusters.ipynb", lab7, lambda cell, w: lab7.check_cluster_kernel(cell, wrappers=w, sizes=(4096,)),
           "lab7_clusters.cu"),
    8: Lab(8, "lab8_pingpong.ipynb", lab8, lambda cell, w: lab8.check_pingpong_kernel(cell, wrappers=w),
           "lab8_pingpong.cu"),
    9: Lab(9, "lab9_streamk.ipynb", lab9, lambda cell, w: lab9.check_streamk_kernel(cell, wrappers=w)),
}


def _solution(notebook: str, variable: str) -> str:
    _, text, why = C.saved_variable(notebook, variable, ROOT / "solutions")
    if text is None:
        raise SystemExit(why)
    return text


def _wrappers() -> str:
    """The wrappers of Labs 1 and 2, as the solutions write them."""
    return (_solution("lab1_tma.ipynb", "TMA_LOAD") + _solution("lab2_mbarrier.ipynb", "MBAR_INIT_ARRIVE")
            + _solution("lab2_mbarrier.ipynb", "MBAR_TX_WAIT"))


def _interleaved(make_nb: Any, make_course: Any, shape: tuple[int, int, int]) -> dict:
    r = gpu.interleave_kernels(make_nb, make_course, *shape, out_dtype=gpu.bfloat16, labels=("notebook", "course"))
    lo, hi = r.ratio_range
    print(f"{'×'.join(map(str, shape))} interleaved: notebook {r.ratio:.3f}× the course's [{lo:.3f}–{hi:.3f}]")
    return {"notebook_vs_course": round(r.ratio, 3), "rounds": r.rounds, "range": [round(lo, 3), round(hi, 3)],
            "summary": r.summary("notebook", "course")}


def _squares(lab: Lab, source: str) -> dict:
    """Labs 5-8: the notebook's kernel and the course's at 4096³ and 8192³ beside cuBLAS, then interleaved."""
    mod = lab.module
    course = (ROOT / "bench" / "kernels" / lab.bench).read_text()
    rows = {}
    for size, (bench, clock, ref) in zip(SQUARES, C.time_gemm(source, mod.LAUNCH, list(SQUARES), reference=course,
                                                              what=f"the notebook's Lab {lab.number} kernel"),
                                         strict=True):
        rows[str(size)] = {"notebook_tflops": round(bench.tflops, 1), "course_tflops": round(ref.tflops, 1),
                           "cublas_tflops": round(bench.cublas_tflops or 0.0, 1),
                           "notebook_vs_course": round(bench.tflops / ref.tflops, 3), "clock": str(clock)}
        print(f"{size}³: notebook {bench.tflops:.0f} TFLOP/s, course {ref.tflops:.0f} TFLOP/s "
              f"({bench.tflops / ref.tflops:.3f}×), cuBLAS {bench.cublas_tflops or 0:.0f}; {clock}")
    k_nb, k_course = gpu.compile(source, mod.KERNEL_NAME), gpu.compile(course, mod.KERNEL_NAME)
    for size in SQUARES:
        rows[str(size)]["interleaved"] = _interleaved(lambda a, b, c: mod.LAUNCH.launcher(k_nb, a, b, c),
                                                      lambda a, b, c: mod.LAUNCH.launcher(k_course, a, b, c),
                                                      (size, size, size))
    return rows


def _lab9_launch(source: str) -> Any:
    """A maker of launches of ``source``'s lab9_gemm on every co-resident cluster, its own workspace and flags."""
    kernel = gpu.compile(source, lab9.KERNEL_NAME)
    clusters, ws, flags = lab9._workspace(kernel)
    return lambda a, b, c: lab9._lab9_launcher(kernel, a, b, c, ws, flags, clusters)


def _quantized(source: str) -> dict:
    """Lab 9: the notebook's kernel, the course's, Lab 7 and cuBLAS on the wave-quantized shapes, then interleaved."""
    course = lab9.lab9_reference_source()
    rows: dict[str, dict] = {}
    for s in lab9.gpu_speed(source, lab9.lab7_source(), lab9.QUANTIZED, 20, course):
        key = "x".join(map(str, s["shape"]))
        if "error" in s:
            rows[key] = {"error": s["error"]}
            print(f"{key}: {s['error']}")
            continue
        rows[key] = {"notebook_tflops": round(s["lab9"], 1), "course_tflops": round(s["course"], 1),
                     "lab7_tflops": round(s["lab7"], 1), "cublas_tflops": round(s["cublas"], 1),
                     "notebook_vs_course": round(s["lab9"] / s["course"], 3), "clock": s["clock"]}
        print(f"{key}: notebook {s['lab9']:.0f} TFLOP/s, course {s['course']:.0f} "
              f"({s['lab9'] / s['course']:.3f}×), Lab 7 {s['lab7']:.0f}, cuBLAS {s['cublas']:.0f}; {s['clock']}")
    make_nb, make_course = _lab9_launch(source), _lab9_launch(course)
    for shape in lab9.QUANTIZED:
        rows.setdefault("x".join(map(str, shape)), {})["interleaved"] = _interleaved(make_nb, make_course, shape)
    return rows


def capture(lab: Lab, out: Path, info: Any) -> bool:
    """One lab: check, timings, interleaved ratio, into ``out``/labN_carried_h100.json; whether the check passed."""
    wrappers = _wrappers()
    cell = _solution(lab.notebook, lab.variable)
    source = lab5.HEADER + wrappers + carry.code_lines(cell)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            lab.check(cell, wrappers)
            check = "passed"
        except grading.CheckFailed as exc:
            check = str(exc)
    print(buf.getvalue())
    rows, key = (_quantized(source), "shapes") if lab.number == 9 else (_squares(lab, source), "sizes")
    name = f"lab{lab.number}_carried"
    meta = {"gpu": info.name, "driver": ".".join(map(str, info.driver_version)),
            "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC", "script": "tools/h100/carried.py",
            "lab": lab.number}
    (out / f"{name}_h100.json").write_text(json.dumps({"meta": meta, "check": check, key: rows}, indent=1) + "\n")
    return check == "passed"


def main(argv: list[str]) -> int:
    labs = [LABS[int(a)] for a in argv if a.isdigit()]
    out = next((Path(a) for a in argv if not a.isdigit()), ROOT / "out")
    out.mkdir(parents=True, exist_ok=True)
    info = gpu.device_info()
    if not gpu.hopper_available() or info is None:
        print(f"no Hopper GPU ({gpu.no_hopper_reason()}): nothing to measure")
        return 0
    passed = [capture(lab, out, info) for lab in labs]
    return 0 if all(passed) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
