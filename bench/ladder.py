"""The course's ladder: every lab's GEMM beside cuBLAS, measured in the same run, with the SM clock.

    python bench/ladder.py [--quick] [--only lab6 lab7] [--write bench/results/NAME]

For each kernel: correctness first (random non-square shapes, C poisoned with NaN, every element against an fp64
reference computed on the host; Stream-K also bit-identical over repeated runs), then speed at 4096³ and 8192³
(and the shapes each lab is about) beside cuBLAS with the same output type. Writes NAME.md (tables) and NAME.json
(every figure, GPU, driver, clocks, date). Without a Hopper GPU it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402
from helpers.gpu import gemm as gpu_matmul  # noqa: E402 - gpu.matmul, the function, lives here
from helpers.gpu.timing import MIN_BATCH_MS, rounds_for  # noqa: E402

KERNELS = ROOT / "bench" / "kernels"
A_STAGE4, A_STAGE4WS = 4 * 32 * 1024 + 1024, 4 * 48 * 1024 + 1024
SMEM_EPI = 4 * 48 * 1024 + 32 * 1024 + 1024
ROUNDS = 9  # interleaved rounds of kernel and cuBLAS per shape


@dataclass
class Rung:
    """One kernel of the ladder: how to compile it and how to launch it on A (M×K), B (N×K), C (M×N)."""

    key: str
    title: str
    file: str
    name: str
    out_dtype: Any
    make: Callable[[gpu.Kernel, gpu.DeviceArray, gpu.DeviceArray, gpu.DeviceArray], Callable[[], None]]
    multiple: tuple[int, int, int]  # M, N, K must be multiples of these
    shapes: list[tuple[int, int, int]] = field(default_factory=list)  # extra timed shapes
    options: tuple[str, ...] = ()  # extra NVRTC options, e.g. ("-DLAB6_GROUP=4",)
    source: Callable[[], str] | None = None  # the kernel's source when it is not bench/kernels/<file>


def _i32(*v: int) -> list[np.int32]:
    return [np.int32(x) for x in v]


def make_64x64(k: gpu.Kernel, a, b, c):  # noqa: ANN001, ANN201
    (m, kk), n = a.shape, b.shape[0]
    return gpu.prepare(k, (n // 64, m // 64), 128, 0, gpu.tensor_map_2d(a, 64, 64), gpu.tensor_map_2d(b, 64, 64), c,
                       *_i32(m, n, kk))


def make_128x128(k, a, b, c):  # noqa: ANN001, ANN201
    (m, kk), n = a.shape, b.shape[0]
    return gpu.prepare(k, (n // 128, m // 128), 384, A_STAGE4, gpu.tensor_map_2d(a, 128, 64),
                       gpu.tensor_map_2d(b, 128, 64), c, *_i32(m, n, kk))


def make_ws(k, a, b, c):  # noqa: ANN001, ANN201
    (m, kk), n = a.shape, b.shape[0]
    return gpu.prepare(k, (n // 256, m // 128), 384, A_STAGE4WS, gpu.tensor_map_2d(a, 128, 64),
                       gpu.tensor_map_2d(b, 256, 64), c, *_i32(m, n, kk))


def make_lab5(k, a, b, c):  # noqa: ANN001, ANN201
    (m, kk), n = a.shape, b.shape[0]
    return gpu.prepare(k, (math.ceil(n / 256), math.ceil(m / 128)), 384, SMEM_EPI, gpu.tensor_map_2d(a, 128, 64),
                       gpu.tensor_map_2d(b, 256, 64), gpu.tensor_map_2d(c, 64, 64), *_i32(m, n, kk))


def make_lab6(k, a, b, c):  # noqa: ANN001, ANN201 - the launch Lab 6's grader makes (every co-resident block)
    from helpers.course.checks import lab6

    return lab6.LAUNCH.launcher(k, a, b, c)


def make_lab7(k, a, b, c):  # noqa: ANN001, ANN201 - the launch gpu.matmul makes
    return gpu_matmul.launcher(k, a, b, c)


def make_lab9(k, a, b, c):  # noqa: ANN001, ANN201
    return gpu_matmul.launcher(k, a, b, c)


def make_lab8(k, a, b, c):  # noqa: ANN001, ANN201 - the launch Lab 8's grader makes (every co-resident cluster)
    from helpers.course.checks import lab8

    return lab8.LAUNCH.launcher(k, a, b, c)


SQUARE = [(4096, 4096, 4096), (8192, 8192, 8192)]
NONSQUARE = [(8192, 4096, 8192), (4096, 8192, 2048)]
WAVE_QUANTIZED = [(1024, 1024, 16384), (1024, 4352, 8192)]
SHORT_K = [(8192, 8192, 512), (4096, 4096, 1024)]  # few K steps per tile: the epilogue weighs most

# ------------------------------------------------------------------------------------------- the labs' own kernels
def _solution(nb: str) -> dict:
    from helpers.course import labgen

    return labgen.solution_namespace(ROOT / "solutions" / f"{nb}.ipynb")


def _wrappers() -> str:
    """The student's wrappers of Labs 1-2 (the solutions'), which Labs 2-4 build on."""
    sol1, sol2 = _solution("lab1_tma"), _solution("lab2_mbarrier")
    return '#include "hopper.cuh"\n' + sol1["TMA_LOAD"] + sol2["MBAR_INIT_ARRIVE"] + sol2["MBAR_TX_WAIT"]


def lab3_source() -> str:
    sol3 = _solution("lab3_wgmma")
    return _wrappers() + sol3["WGMMA"] + sol3["LAB3_KERNEL"]


def lab4_source(variable: str) -> Callable[[], str]:
    """Lab 4's kernel ``variable`` of the solution, after the wrappers; LAB4_KERNEL (step 8's cell) with step 7's
    kernel carried into it, as the lab grades it."""
    def source() -> str:
        from helpers.course.checks import lab4

        sol = _solution("lab4_pipeline")
        kernel = sol[variable]
        return _wrappers() + (lab4.step8_kernel(sol["PC_KERNEL"], kernel) if variable == "LAB4_KERNEL" else kernel)

    return source


def make_lab3(k, a, b, c):  # noqa: ANN001, ANN201
    (m, kk), n = a.shape, b.shape[0]
    return gpu.prepare(k, (n // 64, m // 64), 128, 0, gpu.tensor_map_2d(a, 64, 64), gpu.tensor_map_2d(b, 64, 64), c,
                       *_i32(m, n, kk))


def make_lab4(bm: int, bn: int, smem: int):  # noqa: ANN201
    def make(k, a, b, c):  # noqa: ANN001, ANN202
        (m, kk), n = a.shape, b.shape[0]
        return gpu.prepare(k, (math.ceil(n / bn), math.ceil(m / bm)), 384, smem, gpu.tensor_map_2d(a, bm, 64),
                           gpu.tensor_map_2d(b, bn, 64), c, *_i32(m, n, kk))

    return make


RUNGS = [
    Rung("lab3", "Lab 3 · the student's loop: two stages, thread 0 produces, 4 × wgmma m64n64k16 (solution)",
         "solutions/lab3_wgmma.ipynb", "lab3_gemm", np.float32, make_lab3, (64, 64, 64), source=lab3_source),
    Rung("lab4a", "Lab 4 · 128×128 tile, a 4-stage ring, producer + 2 consumer warpgroups (solution)",
         "solutions/lab4_pipeline.ipynb", "lab4_pc_gemm", np.float32, make_lab4(128, 128, 132096), (128, 128, 64),
         source=lab4_source("PC_KERNEL")),
    Rung("lab4b", "Lab 4 · 128×256, m64n256k16, setmaxnreg 24/240, 4 stages (solution)",
         "solutions/lab4_pipeline.ipynb", "lab4_ws_gemm", np.float32, make_lab4(128, 256, 197632), (128, 256, 64),
         source=lab4_source("LAB4_KERNEL")),
    Rung("lab5", "Lab 5 · TMA-store epilogue, bf16 C", "lab5_epilogue.cu", "lab5_gemm", gpu.bfloat16, make_lab5,
         (8, 8, 8), NONSQUARE),
    Rung("lab6", "Lab 6 · persistent blocks, one per SM, grouped raster order", "lab6_persistent.cu", "lab6_gemm",
         gpu.bfloat16, make_lab6, (8, 8, 8), NONSQUARE + WAVE_QUANTIZED + SHORT_K),
    Rung("lab7", "Lab 7 · Lab 6 with 2-block clusters, B multicast", "lab7_clusters.cu", "lab7_gemm",
         gpu.bfloat16, make_lab7, (8, 8, 8), NONSQUARE + WAVE_QUANTIZED + SHORT_K),
    Rung("lab8", "Lab 8 · ping-pong: two consumers with a 128×128 tile each, taking turns (sequence barrier)",
         "lab8_pingpong.cu", "lab8_gemm", gpu.bfloat16, make_lab8, (8, 8, 8), NONSQUARE + SHORT_K),
    Rung("lab9", "Lab 9 · Stream-K on Lab 7 (whole tiles, then Stream-K over the last waves)", "lab9_streamk.cu",
         "lab9_gemm", gpu.bfloat16, make_lab9, (8, 8, 8), NONSQUARE + WAVE_QUANTIZED),
    Rung("ref64", "reference · bench/kernels/gemm_64x64.cu (Lab 3, first edition: one barrier, no overlap)",
         "gemm_64x64.cu", "gemm_64x64", np.float32, make_64x64, (64, 64, 64)),
]


def compile_rungs(rungs: list[Rung]) -> dict[str, gpu.Kernel]:
    return {r.key: gpu.compile(r.source() if r.source else (KERNELS / r.file).read_text(), r.name,
                               filename=Path(r.file).name, options=r.options) for r in rungs}




def correctness(r: Rung, k: gpu.Kernel, rng: np.random.Generator, cases: int) -> list[dict]:
    """Random non-square shapes (M ≠ N ≠ K, several tiles and waves), C poisoned, against fp64 on the host."""
    out = []
    mm, mn, mk = r.multiple
    fixed = [(3 * 256 + mm * (mm < 128), 5 * 256 + mn * (mn < 128), 7 * 64 + mk * (mk < 64))]
    for i in range(cases):
        if i < len(fixed):
            m, n, kk = fixed[i]
        else:
            m = int(rng.integers(2, 24)) * max(mm, 64) + (int(rng.integers(0, 8)) * mm if mm < 64 else 0)
            n = int(rng.integers(2, 12)) * max(mn, 64) + (int(rng.integers(0, 8)) * mn if mn < 64 else 0)
            kk = int(rng.integers(2, 40)) * max(mk, 64) + (int(rng.integers(0, 8)) * mk if mk < 64 else 0)
        a = gpu.random((m, kk), gpu.bfloat16, seed=int(rng.integers(1 << 30)))
        b = gpu.random((n, kk), gpu.bfloat16, seed=int(rng.integers(1 << 30)))
        c = gpu.poison((m, n), r.out_dtype)
        launch = r.make(k, a, b, c)
        launch()
        gpu.wait()
        got = c.to_host()
        ref = a.to_host().astype(np.float64) @ b.to_host().astype(np.float64).T
        entry = {"shape": [m, n, kk]}
        try:
            entry["max_abs_error"] = gpu.check_gemm(got, ref, kk)
            entry["ok"] = True
        except AssertionError as e:
            entry["ok"], entry["error"] = False, str(e)
        if r.key.startswith("lab9"):  # the ordered fix-up: the same bits every run
            first = got.view(np.uint16).copy()
            same = True
            for _ in range(3):
                c.poison()
                launch()
                gpu.wait()
                same &= bool(np.array_equal(c.to_host().view(np.uint16), first))
            entry["bit_identical_repeats"] = same
            entry["ok"] &= same
        out.append(entry)
        print(f"  {r.key} {m}×{n}×{kk}: {'ok' if entry['ok'] else 'WRONG: ' + entry.get('error', 'not deterministic')}",
              flush=True)
    return out


def speed_entry(res: gpu.GemmBenchmark) -> dict:
    """One interleaved comparison as the results files hold it."""
    inter = res.interleaved
    ka, kb = (inter.a_telemetry, inter.b_telemetry) if inter else (None, None)
    d = {"shape": [res.m, res.n, res.k], "tflops": res.tflops, "cublas_tflops": res.cublas_tflops,
         "ratio": res.ratio, "kernel_ms": res.kernel_ms, "cublas_ms": res.cublas_ms,
         "max_abs_error": res.max_abs_error, "input_sets": res.input_sets}
    if inter is not None:
        d.update(ratio_range=list(inter.ratio_range), rounds=inter.rounds, round_ratios=inter.ratios,
                 first=inter.first, clock_differs=inter.clock_differs)
    for side, tel in (("", ka), ("cublas_", kb)):
        d[f"{side}sm_clock_mhz"] = tel.mhz_median if tel else None
        d[f"{side}sm_clock_range"] = [min(tel.mhz), max(tel.mhz)] if tel and tel.mhz else None
        d[f"{side}power_w"] = tel.watts_median if tel else None
    return d


def line(key: str, d: dict) -> str:
    m, n, k = d["shape"]
    lo, hi = d.get("ratio_range") or (d["ratio"], d["ratio"])
    flag = " CLOCKS DIFFER" if d.get("clock_differs") else ""
    return (f"  {key} {m}×{n}×{k}: {d['tflops']:.0f} TFLOP/s, cuBLAS {d['cublas_tflops']:.0f}, ratio "
            f"{d['ratio']:.3f} [{lo:.3f}–{hi:.3f}], SM clock {d['sm_clock_mhz']} / {d['cublas_sm_clock_mhz']} MHz, "
            f"{d['power_w']} / {d['cublas_power_w']} W{flag}")


def speed(r: Rung, k: gpu.Kernel, shape: tuple[int, int, int], repeat: int, rounds: int = ROUNDS) -> dict:
    """The kernel and cuBLAS (same output type) interleaved at one shape."""
    m, n, kk = shape
    res = gpu.gemm_benchmark(lambda a, b, c: r.make(k, a, b, c), m, n, kk, out_dtype=r.out_dtype, warmup=5,
                             repeat=repeat, rounds=rounds)
    d = speed_entry(res)
    print(line(r.key, d), flush=True)
    return d


def noise_floor(shape: tuple[int, int, int], repeat: int, out_dtype=gpu.bfloat16, rounds: int = ROUNDS) -> dict:  # noqa: ANN001
    """cuBLAS against itself, interleaved the same way: what a ratio near 1 is worth in this run."""
    m, n, k = shape
    d = speed_entry(gpu.gemm_benchmark(None, m, n, k, out_dtype=out_dtype, warmup=5, repeat=repeat, rounds=rounds))
    print(line("cuBLAS vs cuBLAS", d), flush=True)
    return d


def main(argv: list[str] | None = None, rungs_in: list[Rung] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", default=None)
    p.add_argument("--quick", action="store_true", help="4096³ only, fewer correctness cases")
    p.add_argument("--repeat", type=int, default=60, help="timed runs per side, spread over the rounds")
    p.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds per shape (at least 7)")
    p.add_argument("--cases", type=int, default=4)
    p.add_argument("--write", type=Path, default=None, help="write NAME.md and NAME.json")
    args = p.parse_args(argv)
    rungs = [r for r in (rungs_in or RUNGS) if args.only is None or r.key in args.only]
    kernels = compile_rungs(rungs)
    for r in rungs:
        print(f"{r.key}: {kernels[r.key].report.summary()}")
    if not gpu.hopper_available():  # speeds need the H100 (the emulator runs kernels but does not time them)
        print(f"compiled; timing skipped: no sm_90 GPU ({gpu.no_hopper_reason()})")
        return 0
    info = gpu.device_info()
    result: dict[str, Any] = {
        "gpu": info.name, "sm_count": info.sm_count, "driver_cuda": list(info.driver_version), "lab_numbering": 2,
        "nvrtc": list(gpu.nvrtc_version() or ()), "cublas": gpu.cublas_version(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "method":
        f"bf16 inputs (random normal), inputs rotated over >= 3x L2; kernel and cuBLAS (cublasGemmEx, fp32 compute, "
        f"same output type) interleaved: {max(args.rounds, 7)} rounds, each side a batch of at least "
        f"{rounds_for(args.repeat, max(args.rounds, 7))} runs and {MIN_BATCH_MS:.0f} ms of GPU time (CUDA events) "
        "after one untimed run, the side "
        "going first alternating; ratio = median of the per-round ratios [min-max]; SM clock and power of each side "
        "sampled by NVML; noise floor = cuBLAS against itself the same way", "rungs": {}}
    result["noise_floor"] = [noise_floor(s, args.repeat, rounds=args.rounds) for s in
                             (SQUARE[:1] if args.quick else SQUARE)]
    rng = np.random.default_rng(2026)
    for r in rungs:
        k = kernels[r.key]
        t0 = time.time()
        entry = {"title": r.title, "file": r.file if r.source else f"bench/kernels/{r.file}",
                 "registers": k.report.registers,
                 "spills": k.report.spill_stores + k.report.spill_loads,
                 "out_dtype": "bf16" if r.out_dtype == gpu.bfloat16 else "fp32"}
        try:
            entry["correctness"] = correctness(r, k, rng, 2 if args.quick else args.cases)
            shapes = SQUARE[:1] if args.quick else SQUARE + [s for s in r.shapes if s not in SQUARE]
            entry["speed"] = [speed(r, k, s, args.repeat, args.rounds) for s in shapes]
        except Exception as e:  # noqa: BLE001 - a failing rung is reported, the others still run
            entry["failure"] = f"{type(e).__name__}: {e}"
            print(f"  {r.key} FAILED: {entry['failure']}", flush=True)
        entry["seconds"] = round(time.time() - t0, 1)
        result["rungs"][r.key] = entry
    md = render(result)
    print(md)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        args.write.with_suffix(".md").write_text(md)
    return 0


def _range(d: dict) -> str:
    lo, hi = d.get("ratio_range") or (d["ratio"], d["ratio"])
    return f"{d['ratio']:.3f} [{lo:.3f}–{hi:.3f}]"


def _side(d: dict, prefix: str = "") -> str:
    mhz, w = d.get(f"{prefix}sm_clock_mhz"), d.get(f"{prefix}power_w")
    return f"{mhz:.0f}" if mhz else "—", f"{w:.0f}" if w else "—"


def render(result: dict) -> str:
    lines = ["# The ladder: every lab's GEMM beside cuBLAS (interleaved, same run)", "",
             f"- GPU: {result['gpu']} ({result['sm_count']} SMs), driver CUDA "
             f"{'.'.join(map(str, result['driver_cuda']))}, NVRTC {'.'.join(map(str, result['nvrtc']))}, "
             f"cuBLAS {result['cublas']}", f"- date: {result['date']}", f"- method: {result['method']}", ""]
    if result.get("noise_floor"):
        lines += ["Noise floor (cuBLAS against itself):", ""]
        for d in result["noise_floor"]:
            m, n, k = d["shape"]
            lines.append(f"- {m}×{n}×{k}: {_range(d)}")
        lines.append("")
    lines += ["| kernel | C | M×N×K | TFLOP/s | cuBLAS TFLOP/s | ratio [min–max] | SM MHz kernel / cuBLAS | "
              "W kernel / cuBLAS | correct |", "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for key, e in result["rungs"].items():
        ok = "yes" if e.get("correctness") and all(c["ok"] for c in e["correctness"]) else "NO"
        if "failure" in e:
            lines.append(f"| {key} | {e['out_dtype']} | — | — | — | — | — | — | failed: {e['failure'][:80]} |")
        for s in e.get("speed", []):
            m, n, k = s["shape"]
            (ck, wk), (cc, wc) = _side(s), _side(s, "cublas_")
            flag = " (clocks differ)" if s.get("clock_differs") else ""
            lines.append(f"| {key} | {e['out_dtype']} | {m}×{n}×{k} | {s['tflops']:.0f} | {s['cublas_tflops']:.0f} | "
                         f"{_range(s)}{flag} | {ck} / {cc} | {wk} / {wc} | {ok} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
