"""The speed floor's noise: each speed lab's course kernel timed against itself on an H100, as the graders time it.

    python tools/h100/speed_floor.py OUT                         (from the repository root)
    SPEED_FLOOR_LABS="lab6 lab7" python tools/h100/speed_floor.py OUT       (some labs only)

A speed lab's grader times the student's kernel and the course's kernel in the same run and fails a kernel under
``_common.SPEED_FLOOR`` of the course's. Here the student's kernel IS the course's, so every ratio is noise: the
floor must sit below the lowest of them. For each lab, ROUNDS rounds (SPEED_FLOOR_ROUNDS, 15 unless set) at 4096³
and 8192³ (Lab 8 also on its two short-K shapes, Lab 9 on its two wave-quantized shapes, where their graders time
them), each round through the graders'
own timing function:

* lab4a, lab4b: the solution kernels of Lab 4 (course wrappers, as the grader compiles them), ``lab4.gpu_benchmark``
  twice (Lab 4's timing beside cuBLAS), the first as the student's, the second as the course's;
* lab5, lab6, lab7: ``bench/kernels/lab5_epilogue.cu``, ``lab6_persistent.cu``, ``lab7_clusters.cu`` through
  ``_common.gemm_speed_child`` with the same source as the reference (the student's beside cuBLAS, then the course's
  beside cuBLAS);
* lab8: ``bench/kernels/lab8_pingpong.cu`` through ``lab8._speed_child`` with itself as the course's kernel (Lab 8,
  Lab 7, the course's Lab 8, each beside cuBLAS), at 4096³, 8192³ and the two short-K shapes its grader times;
* lab9: ``bench/kernels/lab9_streamk.cu`` through ``lab9.gpu_speed`` with itself as the course's kernel (Lab 9, Lab 7,
  the course's Lab 9, each beside cuBLAS).

Per round: the ratio (student TFLOP/s over the course's), both speeds, the SM clock. Per lab and shape: the ratios'
min, median and max. Writes OUT/speed_floor_h100.json after each lab (meta: GPU, driver, date); copy it to
tests/data/ (tests/labs/test_speed_floor.py reads it). Labs not measured in this call are carried over from
tests/data/speed_floor_h100.json when it is there, so the labs can be measured in several calls. Each lab takes a few
minutes (8192³ dominates): SPEED_FLOOR_LABS splits the work across calls. Without a Hopper GPU it compiles every
kernel and exits 0.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
HERE = str(Path(__file__).resolve())
FIXTURE = ROOT / "tests" / "data" / "speed_floor_h100.json"

ROUNDS = int(os.environ.get("SPEED_FLOOR_ROUNDS", "15"))
SIZES = [(4096, 4096, 4096), (8192, 8192, 8192)]
LABS = ["lab4a", "lab4b", "lab5", "lab6", "lab7", "lab8", "lab9"]


def sources() -> dict[str, tuple[str, str]]:
    """Per lab: (the course kernel's whole source as the grader compiles it, where it comes from)."""
    from helpers.course import labgen
    from helpers.course.checks import lab4

    sol = ROOT / "solutions"
    s1 = labgen.solution_namespace(sol / "lab1_tma.ipynb")
    s2 = labgen.solution_namespace(sol / "lab2_mbarrier.ipynb")
    s4 = labgen.solution_namespace(sol / "lab4_pipeline.ipynb")
    wrappers = s1["TMA_LOAD"] + s2["MBAR_INIT_ARRIVE"] + s2["MBAR_TX_WAIT"]
    kernels = ROOT / "bench" / "kernels"
    return {
        "lab4a": (lab4.HEADER + wrappers + s4["PC_KERNEL"], "solutions/lab4_pipeline.ipynb PC_KERNEL"),
        "lab4b": (lab4.HEADER + wrappers + lab4.step8_kernel(s4["PC_KERNEL"], s4["LAB4_KERNEL"]),
                  "solutions/lab4_pipeline.ipynb LAB4_KERNEL"),  # step 7 carried into step 8
        "lab5": ((kernels / "lab5_epilogue.cu").read_text(), "bench/kernels/lab5_epilogue.cu"),
        "lab6": ((kernels / "lab6_persistent.cu").read_text(), "bench/kernels/lab6_persistent.cu"),
        "lab7": ((kernels / "lab7_clusters.cu").read_text(), "bench/kernels/lab7_clusters.cu"),
        "lab8": ((kernels / "lab8_pingpong.cu").read_text(), "bench/kernels/lab8_pingpong.cu"),
        "lab9": ((kernels / "lab9_streamk.cu").read_text(), "bench/kernels/lab9_streamk.cu"),
    }


TIMING = {
    "lab4a": "lab4.gpu_benchmark, twice per round (the Lab 4 grader's timing beside cuBLAS)",
    "lab4b": "lab4.gpu_benchmark, twice per round (the Lab 4 grader's timing beside cuBLAS)",
    "lab5": "_common.gemm_speed_child with the same source as the reference (the Lab 5 grader's)",
    "lab6": "_common.gemm_speed_child with the same source as the reference (the Lab 6 grader's)",
    "lab7": "_common.gemm_speed_child with the same source as the reference (the Lab 7 grader's)",
    "lab8": "lab8._speed_child with the same source as the course's Lab 8 kernel (the Lab 8 grader's)",
    "lab9": "lab9.gpu_speed with the same source as the course's Lab 9 kernel (the Lab 9 grader's)",
}


def shapes_of(lab: str) -> list[tuple[int, int, int]]:
    from helpers.course.checks import lab8, lab9

    if lab == "lab8":
        return [tuple(s) for s in lab8.SQUARE + lab8.SHORT_K]
    return SIZES + ([tuple(s) for s in lab9.QUANTIZED] if lab == "lab9" else [])


def one_round(lab: str, source: str, shape: tuple[int, int, int]) -> dict:
    """(In the child.) One round at one shape: the kernel as the student's and as the course's, the graders' way."""
    from helpers import gpu
    from helpers.course.checks import _common as C
    from helpers.course.checks import lab4, lab5, lab6, lab7, lab8, lab9

    m, n, k = shape
    if lab in ("lab4a", "lab4b"):
        spec = lab4.PC if lab == "lab4a" else lab4.WS
        with gpu.sm_clock() as clk:
            mine = lab4.gpu_benchmark(source, spec.name, m)
            course = lab4.gpu_benchmark(source, spec.name, m)
        return {"student": mine.tflops, "course": course.tflops, "cublas": mine.cublas_tflops,
                "clock_mhz": clk.median, "clock": clk.summary()}
    if lab in ("lab5", "lab6", "lab7"):
        spec = {"lab5": lab5.LAUNCH, "lab6": lab6.LAUNCH, "lab7": lab7.LAUNCH}[lab]
        ((mine, clock, course),) = C.gemm_speed_child(source, spec, [shape], reference=source)
        return {"student": mine.tflops, "course": course.tflops, "cublas": mine.cublas_tflops,
                "clock_mhz": None, "clock": clock}
    if lab == "lab8":
        with gpu.sm_clock() as clk:
            (s,) = lab8._speed_child(source, [shape], 30, source)
        return {"student": s["lab8"], "course": s["course"], "cublas": s["cublas8"], "lab7": s["lab7"],
                "clock_mhz": clk.median, "clock": clk.summary()}
    (s,) = lab9.gpu_speed(source, lab9.lab7_source(), [shape], 20, source)
    if "error" in s:
        raise RuntimeError(f"lab9 at {shape}: {s['error']}")
    return {"student": s["lab9"], "course": s["course"], "cublas": s["cublas"], "lab7": s["lab7"],
            "clock_mhz": None, "clock": s["clock"]}


def rounds(lab: str, source: str, shapes: list[tuple[int, int, int]], count: int) -> dict:
    """(In the child, one per lab.) ``count`` rounds at each shape."""
    out: dict = {}
    for shape in shapes:
        key = "×".join(map(str, shape))
        runs = [one_round(lab, source, shape) for _ in range(count)]
        ratios = [r["student"] / r["course"] for r in runs]
        out[key] = {"ratios": [round(x, 4) for x in ratios], "min": round(min(ratios), 4),
                    "median": round(statistics.median(ratios), 4), "max": round(max(ratios), 4),
                    "student_tflops": [round(r["student"], 1) for r in runs],
                    "course_tflops": [round(r["course"], 1) for r in runs],
                    "cublas_tflops": [round(r["cublas"] or 0.0, 1) for r in runs],
                    "clock": [r["clock"] for r in runs]}
        print(f"{lab} {key}: ratio {out[key]['min']:.3f}–{out[key]['max']:.3f} (median {out[key]['median']:.3f}) over "
              f"{count} rounds; {runs[-1]['clock']}", flush=True)
    return out


def main(argv: list[str]) -> int:
    from helpers import gpu
    from helpers.course.checks import _common as C

    out = Path(argv[0]) if argv else Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    labs = os.environ.get("SPEED_FLOOR_LABS", "").split() or LABS
    unknown = [lab for lab in labs if lab not in LABS]
    if unknown:
        print(f"unknown lab(s) {unknown}: choose from {LABS}")
        return 2
    srcs = sources()
    names = {"lab4a": "lab4_pc_gemm", "lab4b": "lab4_ws_gemm", "lab5": "lab5_gemm", "lab6": "lab6_gemm",
             "lab7": "lab7_gemm", "lab8": "lab8_gemm",
             "lab9": "lab9_gemm"}
    kernels = {lab: gpu.compile(srcs[lab][0], names[lab]) for lab in labs}
    for lab, kernel in kernels.items():
        print(f"{lab}: {kernel.report.summary()}")
    if gpu.skip_without_hopper(kernels[labs[0]], checked="every course kernel compiles", timing=True):
        return 0
    info = gpu.device_info()
    meta = {"gpu": info.name, "sm_count": info.sm_count, "driver": ".".join(map(str, info.driver_version)),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "script": "tools/h100/speed_floor.py",
            "rounds": ROUNDS, "speed_floor": C.SPEED_FLOOR}
    result: dict = {"meta": meta, "labs": {}}
    if FIXTURE.exists():  # labs measured in an earlier call, not measured again now
        earlier = json.loads(FIXTURE.read_text())
        result["labs"] = {k: v for k, v in earlier.get("labs", {}).items() if k not in labs}
    path = out / "speed_floor_h100.json"
    for lab in labs:
        t0 = time.time()
        source, origin = srcs[lab]
        shapes = shapes_of(lab)
        try:
            got = gpu.run_isolated(f"{HERE}:rounds", lab, source, shapes, ROUNDS, timeout=3000)
        except gpu.GpuError as exc:
            print(f"{lab}: FAILED: {exc}")
            return 1
        result["labs"][lab] = {"kernel": origin, "timing": TIMING[lab], "gpu": meta["gpu"], "driver": meta["driver"],
                               "date": meta["date"], "rounds": ROUNDS, "shapes": got,
                               "seconds": round(time.time() - t0, 1)}
        lows = [(v["min"], lab_, k) for lab_, e in result["labs"].items() for k, v in e["shapes"].items()]
        result["lowest"] = dict(zip(("ratio", "lab", "shape"), min(lows), strict=True))
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"{lab}: {time.time() - t0:.0f} s; written {path}", flush=True)
    low = result["lowest"]
    print(f"lowest self-ratio so far: {low['ratio']:.3f} ({low['lab']} at {low['shape']}); SPEED_FLOOR = "
          f"{C.SPEED_FLOOR}; labs in the file: {sorted(result['labs'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
