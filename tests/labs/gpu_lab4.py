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
SOLUTION = ROOT / "solutions" / "lab4_pipeline.ipynb"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def solution_namespace() -> dict:
    """The solution notebook's definitions: every code cell except the graded checks, in order (stops before the
    first cell that runs a pipeline or draws, which the kernels do not need)."""
    nb = json.loads(SOLUTION.read_text())
    ns: dict = {}
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] != "code" or meta.get("grade") or not (meta.get("solution") or "import" in source):
            continue
        exec(compile(source, f"{SOLUTION.name}:{cell.get('id')}", "exec"), ns)
    return ns


def _swap(src: str, old: str, new: str) -> str:
    if old not in src:
        raise ValueError(f"the solution kernel no longer contains {old!r}")
    return src.replace(old, new)


def wrong_kernels(pc: str, ws: str) -> dict[str, tuple[str, str, str]]:
    """Wrong kernels the compile report and the PTX give away: name -> (step PC/WS, source, regex of the message)."""
    early = ("      hopper::wgmma_commit();\n      hopper::wgmma_wait<1>();\n"
             "      if (k > 0 && t == 0) hopper::mbar_arrive(&empty[(k - 1) % STAGES]);")
    return {
        "EMPTY initialised with count 1 (two consumers)": (
            "WS", _swap(ws, "mbar_init(&empty[s], 2)", "mbar_init(&empty[s], 1)"), "first release"),
        "EMPTY initialised with 256 (every consumer thread)": (
            "PC", _swap(pc, "mbar_init(&empty[s], 2)", "mbar_init(&empty[s], 256)"), "elected thread"),
        "FULL initialised with 2": ("WS", _swap(ws, "mbar_init(&full[s], 1)", "mbar_init(&full[s], 2)"),
                                    "never arrive"),
        "producer never waits on EMPTY": ("WS", _swap(ws, "        HOPPER_WAIT(empty, s, phase ^ 1);\n", ""),
                                          "waits on empty"),
        "stage released before its wgmma retired": (
            "WS", _swap(ws, early, "      hopper::wgmma_commit();\n"
                        "      if (t == 0) hopper::mbar_arrive(&empty[s]);\n      hopper::wgmma_wait<1>();"),
            "released while the wgmma group"),
        "parity never flips": ("PC", _swap(pc, "HOPPER_WAIT(full, s, (k / STAGES) & 1);", "HOPPER_WAIT(full, s, 0);"),
                               "computed"),
        "no group in flight (wait_group 0)": ("PC", _swap(pc, "hopper::wgmma_wait<1>();", "hopper::wgmma_wait<0>();"),
                                              "wait_group 1"),
        "no drain": ("WS", _swap(ws, "    hopper::wgmma_wait<0>();\n    if (k_tiles > 0", "    if (k_tiles > 0"),
                     "drain"),
        "setmaxnreg budget that does not add up (248)": (
            "WS", _swap(ws, "setmaxnreg_inc<240>", "setmaxnreg_inc<248>"), "over the pool|wait forever"),
        "setmaxnreg ignored (no __launch_bounds__)": ("WS", _swap(ws, "__launch_bounds__(384, 1)", ""), "C7508"),
        "no setmaxnreg at all": ("WS", _swap(_swap(ws, "    hopper::setmaxnreg_dec<24>();\n", ""),
                                             "    hopper::setmaxnreg_inc<240>();\n", ""), "setmaxnreg"),
        "3 stages instead of the budget's 4": ("WS", _swap(ws, "constexpr int STAGES = 4;", "constexpr int STAGES = 3;"),
                                               "STAGES = 4"),
        "only the A tile's bytes expected": (
            "PC", _swap(pc, "mbar_arrive_expect_tx(&full[s], STAGE_BYTES)", "mbar_arrive_expect_tx(&full[s], A_BYTES)"),
            "both tiles"),
        "m64n128k16 in the 256-wide step": (
            "WS", _swap(ws, "hopper::wgmma_m64n256k16_bf16(d, kslice_desc(a, kk), kslice_desc(b, kk));",
                        "hopper::wgmma_m64n128k16_bf16(*reinterpret_cast<float(*)[64]>(d), kslice_desc(a, kk), "
                        "kslice_desc(b, kk));"), "m64n256k16"),
    }


def runtime_wrong_kernels(pc: str, ws: str) -> dict[str, tuple[str, str, str]]:
    """Wrong kernels that compile and pass the static checks; only a run can reject them."""
    release_current = _swap(ws, "if (k > 0 && t == 0) hopper::mbar_arrive(&empty[(k - 1) % STAGES]);",
                            "if (t == 0) hopper::mbar_arrive(&empty[s]);")
    release_current = _swap(release_current, "if (k_tiles > 0 && t == 0) hopper::mbar_arrive(&empty[(k_tiles - 1) % "
                            "STAGES]);", "")
    return {
        "current stage released after wait_group 1 (a race)": ("WS", release_current, "differ|failed on the GPU"),
        "stage index k % 2 with 4 stages": (
            "PC", _swap(_swap(pc, "        const int s = k % STAGES;\n        const unsigned phase",
                              "        const int s = k % 2;\n        const unsigned phase"),
                        "      const int s = k % STAGES;\n      HOPPER_WAIT(full", "      const int s = k % 2;\n"
                        "      HOPPER_WAIT(full"), "differ|deadlock|failed on the GPU"),
        "consumer 1 reads consumer 0's rows of A": (
            "WS", _swap(ws, "smem + s * STAGE_BYTES + c * 64 * 128;", "smem + s * STAGE_BYTES;"), "differ"),
        "producer waits on EMPTY with the unflipped parity": (
            "PC", _swap(pc, "HOPPER_WAIT(empty, s, phase ^ 1);", "HOPPER_WAIT(empty, s, phase);"),
            "deadlock|failed on the GPU"),
    }


def lab3_benchmark(source: str, size: int = 4096):
    """(Runs in the isolated child.) The Lab 3 kernel at size³ beside cuBLAS."""
    import numpy as np

    from helpers import gpu

    kernel = gpu.compile(source, "lab3_gemm")

    def make_launch(a, b, c):
        (m, k), n = a.shape, b.shape[0]
        ta, tb = gpu.tensor_map_2d(a, 64, 64), gpu.tensor_map_2d(b, 64, 64)
        return gpu.prepare(kernel, (n // 64, m // 64), 128, 0, ta, tb, c, np.int32(m), np.int32(n), np.int32(k))

    return gpu.gemm_benchmark(make_launch, size, size, size)


def _expect(results: list[dict], name: str, grader, source: str, pattern: str | None, **kw) -> None:
    from helpers import grading

    t0 = time.time()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            grader(source, **kw)
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
    from helpers.checks import lab4

    out.mkdir(parents=True, exist_ok=True)
    if not gpu.hopper_available():
        print(f"no Hopper GPU ({gpu.no_hopper_reason()}): nothing to run; tests/labs/test_lab4.py checks the rest")
        return 0
    info = gpu.device_info()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; device: {info}")
    ns = solution_namespace()
    pc, ws = ns["PC_SRC"], ns["WS_SRC"]
    results: list[dict] = []
    _expect(results, "solution · 128×128 producer/consumer", lab4.check_pc_kernel, pc, None, benchmark=True)
    _expect(results, "solution · 128×256 warp-specialized", lab4.check_ws_kernel, ws, None, benchmark=True)
    steps = []
    try:
        bench = gpu.run_isolated(f"{__file__}:lab3_benchmark", lab4.LAB3_KERNEL, 4096, timeout=300)
        steps.append({"step": "Lab 3 · 64×64 tile, two stages, thread 0 produces (helpers.checks.lab4.LAB3_KERNEL)",
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
        _expect(results, f"wrong · {name}", graders[step], src, pattern, benchmark=False)
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
