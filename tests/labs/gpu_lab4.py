"""Lab 4 on an H100, through its graders: the two solution kernels checked on random non-square shapes and timed at
4096³ beside cuBLAS, the Lab 3 kernel timed the same way (the ladder), then the wrong kernels the graders must
reject, including the ones only a run can catch.

Usage (no pytest or Jupyter needed): ``python tests/labs/gpu_lab4.py [OUT_DIR]``. Writes ``lab4_speeds.json`` (the
lab's solution kernels and the Lab 3 kernel it starts from, at 4096³ beside cuBLAS; the course's ladder itself is
bench/ladder.py's) and ``gpu_lab4.json`` (every expectation and its outcome) into OUT_DIR; exit status 0 when every
expectation held. ``test_lab4.py`` uses the same wrong kernels.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
SOLUTION = SOLUTIONS / "lab4_pipeline.ipynb"
HEADER = "#include <hopper.cuh>\n"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402


def course_sources() -> dict[str, str]:
    """The course's own code the Lab 4 kernels build on, from the solution notebooks: WRAPPERS (Lab 1's
    my_tma_load_2d, Lab 2's mbarrier wrappers and wait loop, as lab4.carry_wrappers reads them from a student's
    notebooks), Lab 3's WGMMA and LAB3_KERNEL, and LAB3 (Lab 3's whole kernel source, ready to compile)."""
    from helpers.course import labgen

    sol1 = labgen.solution_namespace(SOLUTIONS / "lab1_tma.ipynb")
    sol2 = labgen.solution_namespace(SOLUTIONS / "lab2_mbarrier.ipynb")
    sol3 = labgen.solution_namespace(SOLUTIONS / "lab3_wgmma.ipynb")
    wrappers = sol1["TMA_LOAD"] + sol2["MBAR_INIT_ARRIVE"] + sol2["MBAR_TX_WAIT"]
    return {"WRAPPERS": wrappers, "WGMMA": sol3["WGMMA"], "LAB3_KERNEL": sol3["LAB3_KERNEL"],
            "LAB3": HEADER + wrappers + sol3["WGMMA"] + sol3["LAB3_KERNEL"]}


def solution_namespace() -> dict:
    """The solution notebook's definitions: every code cell except the graded checks, in order (stops before the
    first cell that runs a pipeline or draws, which the kernels do not need), and the course's WRAPPERS in place of
    the ones a student's notebooks would give. ``LAB4_KERNEL`` is step 8's whole kernel: the step 8 cell (kept as
    ``LAB4_CELL``) with step 7's kernel carried into it, as ``lab4.check_step8_kernel`` grades it."""
    from helpers.course.checks import lab4

    nb = json.loads(SOLUTION.read_text())
    ns: dict = {}
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] != "code" or meta.get("grade") or not (meta.get("solution") or "import" in source):
            continue
        exec(compile(source, f"{SOLUTION.name}:{cell.get('id')}", "exec"), ns)
    ns["WRAPPERS"] = course_sources()["WRAPPERS"]
    ns["LAB4_CELL"] = ns["LAB4_KERNEL"]
    ns["LAB4_KERNEL"] = lab4.step8_kernel(ns["PC_KERNEL"], ns["LAB4_CELL"])
    return ns


def _swap(src: str, old: str, new: str) -> str:
    if old not in src:
        raise ValueError(f"the solution kernel no longer contains {old!r}")
    return src.replace(old, new)


RELEASE = "if (k > 0 && t == 0) my_mbar_arrive(&empty[(k - 1) % STAGES]);"
DRAIN_RELEASE = "if (nk > 0 && t == 0) my_mbar_arrive(&empty[(nk - 1) % STAGES]);"
EMPTY_WAIT = 'my_mbar_wait(&empty[s], ((j / STAGES) & 1) ^ 1, "empty", s);'
ANNOUNCE = "my_mbar_expect_tx(&full[s], STAGE_BYTES);\n        my_mbar_arrive(&full[s]);"


def wrong_kernels(pc: str, ws: str) -> dict[str, tuple[str, str, str]]:
    """Wrong kernels the compile report and the PTX give away: name -> (step PC/WS, kernel source, regex of the
    message). The graders get the course's wrappers in front of them."""
    early = _swap(_swap(ws, "      hopper::wgmma_commit();\n",
                        "      hopper::wgmma_commit();\n      if (t == 0) my_mbar_arrive(&empty[s]);\n"), RELEASE, "")
    return {
        "EMPTY initialised with count 1 (two consumers)": (
            "WS", _swap(ws, "my_mbar_init(&empty[s], CONSUMERS)", "my_mbar_init(&empty[s], 1)"), "first release"),
        "EMPTY initialised with 256 (every consumer thread)": (
            "PC", _swap(pc, "my_mbar_init(&empty[s], CONSUMERS)", "my_mbar_init(&empty[s], 256)"), "elected thread"),
        "FULL initialised with 2": ("WS", _swap(ws, "my_mbar_init(&full[s], 1)", "my_mbar_init(&full[s], 2)"),
                                    "never arrive"),
        "FULL and EMPTY counts swapped": (
            "PC", _swap(_swap(pc, "my_mbar_init(&empty[s], CONSUMERS)", "my_mbar_init(&empty[s], 1)"),
                        "my_mbar_init(&full[s], 1)", "my_mbar_init(&full[s], CONSUMERS)"), "never arrive"),
        "producer never waits on EMPTY": ("WS", _swap(ws, f"        {EMPTY_WAIT}\n", ""), "waits on empty"),
        "arrival on FULL before the bytes are announced": (
            "PC", _swap(pc, ANNOUNCE, "my_mbar_arrive(&full[s]);\n        my_mbar_expect_tx(&full[s], STAGE_BYTES);"),
            "before the stage's bytes are announced"),
        "stage released before its wgmma retired": ("WS", early, "released while the wgmma group"),
        "parity never flips": ("PC", _swap(pc, 'my_mbar_wait(&full[s], (k / STAGES) & 1, "full", s);',
                                           'my_mbar_wait(&full[s], 0, "full", s);'), "computed"),
        "consumers never wait on FULL": (
            "PC", _swap(pc, '      my_mbar_wait(&full[s], (k / STAGES) & 1, "full", s);\n', ""),
            "before waiting on its full barrier"),
        "no wgmma fence": ("PC", _swap(pc, "      hopper::wgmma_fence();\n", ""), "fence"),
        "no group in flight (wait_group 0)": ("PC", _swap(pc, "hopper::wgmma_wait<1>();", "hopper::wgmma_wait<0>();"),
                                              "wait_group 1"),
        "no drain": ("WS", _swap(ws, "    hopper::wgmma_wait<0>();\n", ""), "drain"),
        "setmaxnreg budget that does not add up (248)": (
            "WS", _swap(ws, "setmaxnreg_inc<240>", "setmaxnreg_inc<248>"), "over the pool|wait forever"),
        "setmaxnreg ignored (no __launch_bounds__)": ("WS", _swap(ws, "__launch_bounds__(THREADS, 1)", ""), "C7508"),
        "no setmaxnreg at all": ("WS", _swap(_swap(ws, "    hopper::setmaxnreg_dec<24>();\n", ""),
                                             "    hopper::setmaxnreg_inc<240>();\n", ""), "setmaxnreg"),
        "3 stages instead of the budget's 4": (
            "WS", _swap(ws, "constexpr int STAGES = 4;", "constexpr int STAGES = 3;"), "STAGES = 4"),
        "only the A tile's bytes expected": (
            "PC", _swap(pc, "my_mbar_expect_tx(&full[s], STAGE_BYTES)", "my_mbar_expect_tx(&full[s], A_BYTES)"),
            "both tiles"),
        "m64n128k16 in the 256-wide step": (
            "WS", _swap(ws, "hopper::wgmma_m64n256k16_bf16(d, kslice_desc(a, kk), kslice_desc(b, kk));",
                        "hopper::wgmma_m64n128k16_bf16(*reinterpret_cast<float(*)[64]>(d), kslice_desc(a, kk), "
                        "kslice_desc(b, kk));"), "m64n256k16"),
    }


def runtime_wrong_kernels(pc: str, ws: str) -> dict[str, tuple[str, str, str]]:
    """Wrong kernels that compile and pass the static checks; only a run can reject them."""
    release_current = _swap(_swap(ws, RELEASE, "if (t == 0) my_mbar_arrive(&empty[s]);"), DRAIN_RELEASE, "")
    return {
        "current stage released after wait_group 1 (a race)": ("WS", release_current, "differ|failed when it ran"),
        "stage index k % 2 with 4 stages": (
            "PC", _swap(_swap(pc, "        const int s = j % STAGES;\n", "        const int s = j % 2;\n"),
                        "      const int s = k % STAGES;\n", "      const int s = k % 2;\n"),
            "differ|deadlock|failed when it ran"),
        "consumer 1 reads consumer 0's rows of A": (
            "WS", _swap(ws, "smem + s * STAGE_BYTES + c * 64 * 128;", "smem + s * STAGE_BYTES;"), "differ"),
        "producer waits on EMPTY with the unflipped parity": (
            "PC", _swap(pc, EMPTY_WAIT, 'my_mbar_wait(&empty[s], (j / STAGES) & 1, "empty", s);'),
            "deadlock|failed when it ran"),
        # at k = 0 the release goes to the last stage, never used yet: its EMPTY phase completes one use early (the
        # H100 gave the right C on three large shapes; the executor's hazard mode sees the overwrite)
        "stage k - 1 released as (k + STAGES - 1) % STAGES, at k = 0 too": (
            "PC", _swap(pc, RELEASE, "if (t == 0) my_mbar_arrive(&empty[(k + STAGES - 1) % STAGES]);"),
            "failed when it ran on the emulator.*hazard mode.*overwrites"),
        # every thread of each consumer warpgroup arrives on the last stage's EMPTY: a warp's 32 lanes at once on a
        # phase that awaits 2 stop the kernel on the H100 (a trap), and on the executor with it
        "every thread of a consumer releases the last stage (no t == 0)": (
            "PC", _swap(pc, DRAIN_RELEASE, "if (nk > 0) my_mbar_arrive(&empty[(nk - 1) % STAGES]);"),
            "(ran on the emulator.*empty\\[\\d\\] with 32 lanes in one mbarrier.arrive, but its phase \\d+ awaited "
            f"only 2|failed when it ran on {gpu.where_name()}.*CUDA_ERROR_LAUNCH_FAILED)"),
        # the last stage read is never released: one tile per block, so nothing in the run waits on it again and C is
        # right; the executor's record shows each consumer's reads and releases
        "the last stage never released (no release after the K loop)": (
            "PC", _swap(pc, DRAIN_RELEASE, ""), "was never released"),
        # after the K loop the release names nk % STAGES (the stage after the last one read), a stale index
        "the stage after the last one released after the K loop (a stale index)": (
            "PC", _swap(pc, DRAIN_RELEASE, "if (nk > 0 && t == 0) my_mbar_arrive(&empty[nk % STAGES]);"),
            "named empty\\[1\\], but its read #9 was of full\\[0\\]"),
        # the last row of blocks moved up to end at row M: rows computed and stored twice, C right
        "last row of tiles clamped to M - BM (rows computed twice)": (
            "PC", _swap(pc, "m0 = blockIdx.y * BM", "m0 = min((int)blockIdx.y * BM, M - BM)"),
            "rows 0–127, columns 0–127 \\(block \\(0,0\\)'s\\) was computed and stored more than once.*"
            "block \\(0,0\\) and block \\(0,1\\)"),
    }


def lab3_benchmark(source: str, size: int = 4096):
    """(Runs in the isolated child.) Lab 3's kernel (whole source) at size³ beside cuBLAS."""
    from helpers.course.checks import _common

    return _common.gemm_benchmark(source, "lab3_gemm", size)


def _expect(results: list[dict], name: str, grader, wrappers: str, kernel: str, pattern: str | None, **kw) -> None:
    from helpers.course import grading

    t0 = time.time()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            grader(wrappers + kernel, kernel=kernel, **kw)
            msg = None
        except grading.CheckFailed as exc:
            msg = str(exc)
    ok = msg is None if pattern is None else (msg is not None and bool(re.search(pattern, msg, re.I | re.S)))
    verdict = "passed" if msg is None else "rejected"
    print(f"{'OK  ' if ok else 'BAD '} {name}: {verdict} ({time.time() - t0:.1f} s)")
    if not ok or pattern is None:
        print(buf.getvalue())
    results.append({"name": name, "expected": "pass" if pattern is None else f"reject /{pattern}/",
                    "outcome": verdict, "ok": ok, "message": msg, "seconds": round(time.time() - t0, 1)})


def main(out: Path) -> int:
    from helpers import gpu
    from helpers.course.checks import lab4

    out.mkdir(parents=True, exist_ok=True)
    if not gpu.hopper_available():
        print(f"no Hopper GPU ({gpu.no_hopper_reason()}): nothing to run; tests/labs/test_lab4.py checks the rest")
        return 0
    info = gpu.device_info()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; device: {info}")
    ns = solution_namespace()
    pc, ws, wrappers = ns["PC_KERNEL"], ns["LAB4_KERNEL"], ns["WRAPPERS"]
    results: list[dict] = []
    _expect(results, "solution · 128×128 producer/consumer", lab4.check_pc_kernel, wrappers, pc, None, benchmark=True)
    _expect(results, "solution · 128×256 warp-specialized", lab4.check_ws_kernel, wrappers, ws, None, benchmark=True)
    steps = []
    try:
        bench = gpu.run_isolated(f"{__file__}:lab3_benchmark", course_sources()["LAB3"], 4096, timeout=300)
        steps.append({"step": "Lab 3 · 64×64 tile, two stages, thread 0 loads one step ahead (solutions/lab3_wgmma)",
                      "tflops": bench.tflops,
                      "cublas_tflops": bench.cublas_tflops})
        print(f"Lab 3 kernel: {bench.summary()}")
    except gpu.GpuError as exc:
        print(f"Lab 3 kernel benchmark failed: {exc}")
    for spec in (lab4.PC, lab4.WS):
        if spec.step in lab4.MEASURED:
            b = lab4.MEASURED[spec.step]
            steps.append({"step": f"Lab 4 · {spec.step}", "tflops": b.tflops, "cublas_tflops": b.cublas_tflops})
    speeds = {"meta": {"gpu": info.name, "driver": ".".join(map(str, info.driver_version)),
                       "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}", "size": 4096,
                       "script": "tests/labs/gpu_lab4.py"}, "steps": steps}
    (out / "lab4_speeds.json").write_text(json.dumps(speeds, indent=1) + "\n")
    graders = {"PC": lab4.check_pc_kernel, "WS": lab4.check_ws_kernel}
    for name, (step, src, pattern) in {**wrong_kernels(pc, ws), **runtime_wrong_kernels(pc, ws)}.items():
        _expect(results, f"wrong · {name}", graders[step], wrappers, src, pattern, benchmark=False)
    (out / "gpu_lab4.json").write_text(json.dumps(results, indent=1) + "\n")
    bad = [r["name"] for r in results if not r["ok"]]
    print("\n".join(["PROBLEMS:"] + bad) if bad else "all expectations held")
    ws_step = next((s for s in steps if "256" in s["step"]), None)
    if ws_step:
        target = ws_step["tflops"] >= 600 and ws_step["tflops"] >= 0.78 * ws_step["cublas_tflops"]
        print(f"target (≥ 600 TFLOP/s and ≥ 0.78 × cuBLAS at 4096³): {'met' if target else 'NOT met'} — "
              f"{ws_step['tflops']:.0f} vs cuBLAS {ws_step['cublas_tflops']:.0f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/out")))
