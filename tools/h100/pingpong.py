"""Lab 8 on an H100: the ping-pong kernel checked against cuBLAS, then timed against Lab 7 (the cooperative kernel)
and cuBLAS, interleaved, on square and short-K shapes; the compile-time knobs timed the same way at 8192³.

    python tools/h100/pingpong.py OUT        (run from the repository root, or: bash tools/h100/run.sh pingpong)

1. Correctness: the reference kernel (bench/kernels/lab8_pingpong.cu) on random non-square shapes with partial tiles,
   C poisoned, every element against cuBLAS (fp32 C), then the lab's grader on the solution kernel.
2. Speed, per shape (4096³, 8192³, 8192×8192×512, 4096×4096×1024): the same rotated inputs (about three L2s) for
   three sides; ``timing.interleave`` runs Lab 8 against Lab 7 and Lab 8 against cuBLAS in alternating rounds,
   the SM clock and power of each side sampled (NVML). The median of the per-round ratios, with their range.
3. Knobs at 8192³ and 8192×8192×512, each interleaved with the default Lab 8: LAB8_STAGES=4, LAB8_GROUP=4 and 16,
   LAB8_CLUSTER=1 (no multicast), LAB8_BN=64, LAB8_SCALE_D=0.

Writes OUT/pingpong_h100.json (meta: GPU, driver, NVRTC, cuBLAS, date; every figure) and OUT/pingpong_h100.md; copy
them to bench/results/ (``helpers.course.checks.lab8.measured`` reads the newest ``*pingpong*.json`` there). Without a
Hopper GPU it compiles every variant and runs one small launch on the PTX executor (hazard mode), then exits 0.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402
from helpers.course import labgen  # noqa: E402
from helpers.course.checks import lab8  # noqa: E402
from helpers.course.checks._common import GemmLaunch  # noqa: E402
from helpers.gpu.clocks import Telemetry  # noqa: E402
from helpers.gpu.gemm import course_kernel, launcher  # noqa: E402
from helpers.gpu.timing import batches, gemm_inputs, interleave, rounds_for, time_runs  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 512), (4096, 4096, 1024)]
KNOB_SHAPES = [(8192, 8192, 8192), (8192, 8192, 512)]
KNOBS = {"stages 4": ("-DLAB8_STAGES=4",), "group 4": ("-DLAB8_GROUP=4",), "group 16": ("-DLAB8_GROUP=16",),
         "no cluster": ("-DLAB8_CLUSTER=1",), "tile 128x64": ("-DLAB8_BN=64",), "zeroed accumulators":
         ("-DLAB8_SCALE_D=0",)}
ROUNDS, REPEAT = 9, 60


def compile_lab8(options: tuple[str, ...] = ()) -> gpu.Kernel:
    return gpu.compile(lab8.lab8_source(), lab8.KERNEL_NAME, filename="lab8_pingpong.cu", options=options)


def make_launch(kernel: gpu.Kernel, options: tuple[str, ...]):  # noqa: ANN201
    """The launch of a Lab 8 variant: its tile width and cluster size decide the tensor-map boxes and the grid."""
    bn = 64 if "-DLAB8_BN=64" in options else 128
    cluster = 1 if "-DLAB8_CLUSTER=1" in options else 2
    spec = GemmLaunch(lab8.KERNEL_NAME, 384, lab8.SMEM_BYTES, (128, 64), (bn // cluster, 64), (64, 64),
                             out_bf16=True, cluster=cluster, persistent_unit=(128 * cluster, bn))
    return lambda a, b, c: spec.launcher(kernel, a, b, c)


def correctness(kernel: gpu.Kernel, rng: np.random.Generator) -> list[dict]:
    out = []
    for m, n, k in [(2056, 1160, 4104), (1032, 3080, 520), (8200, 264, 64), (136, 8192, 1032)]:
        a = gpu.random((m, k), gpu.bfloat16, seed=int(rng.integers(1 << 30)))
        b = gpu.random((n, k), gpu.bfloat16, seed=int(rng.integers(1 << 30)))
        c, ref = gpu.poison((m, n), gpu.bfloat16), gpu.DeviceArray((m, n), np.float32)
        make_launch(kernel, ())(a, b, c)()
        from helpers.gpu.cublas import gemm_launcher

        gemm_launcher(a, b, ref)()
        gpu.wait()
        entry = {"shape": [m, n, k]}
        try:
            entry["max_abs_error"], entry["ok"] = gpu.check_gemm(c.to_host(), ref.to_host(), k), True
        except AssertionError as e:
            entry["ok"], entry["error"] = False, str(e)[:300]
        out.append(entry)
        print(f"  {m}×{n}×{k}: {'ok' if entry['ok'] else 'WRONG'}", flush=True)
    return out


def compare(shape: tuple[int, int, int], sides: dict[str, object]) -> dict:
    """Every side after the first interleaved with the first, on the same rotated inputs; the ratios are the
    other side's time over the first's (above 1: the first is faster)."""
    from helpers.gpu.cublas import gemm_launcher

    m, n, k = shape
    A, B, Cs = gemm_inputs(m, n, k, gpu.bfloat16, seed=7, sides=len(sides))
    fns = {}
    for (name, make), C in zip(sides.items(), Cs, strict=True):
        fns[name] = [(gemm_launcher(a, b, c) if make is None else make(a, b, c)) for a, b, c in zip(A, B, C,
                                                                                                    strict=True)]
    per_round = rounds_for(REPEAT, ROUNDS)
    for f in fns.values():
        time_runs(f, 5, warmup=0)
    names = list(fns)
    first, flops = names[0], 2 * m * n * k
    out: dict = {"shape": [m, n, k], "per_round": per_round, "rounds": ROUNDS}
    first_side = batches(fns[first], per_round)  # one side for every comparison: its input sets rotate on
    for other in names[1:]:
        with Telemetry() as tel:
            inter = interleave(first_side, batches(fns[other], per_round), rounds=ROUNDS, telemetry=tel,
                               labels=(first, other))
        out[f"{first} vs {other}"] = {
            "ratio": inter.ratio, "ratio_range": list(inter.ratio_range), "round_ratios": inter.ratios,
            f"{first}_tflops": flops / (inter.a_ms * 1e-3) / 1e12,
            f"{other}_tflops": flops / (inter.b_ms * 1e-3) / 1e12,
            "sm_clock_mhz": [t.mhz_median if t else None for t in (inter.a_telemetry, inter.b_telemetry)],
            "power_w": [t.watts_median if t else None for t in (inter.a_telemetry, inter.b_telemetry)],
            "clock_differs": inter.clock_differs}
        print(f"  {m}×{n}×{k}: {first} / {other}: {inter.summary(first, other)}", flush=True)
    return out


def dry_run() -> int:
    """No GPU: compile every variant (the options are checked), then one small launch on the executor."""
    for name, opts in {"default": (), **KNOBS}.items():
        print(f"{name}: {compile_lab8(opts).report.summary()}")
    print(lab8.timeline(lab8.lab8_source(), (264, 136, 72), carried=False))  # one small launch on the PTX executor
    print(f"timing skipped: no sm_90 GPU ({gpu.no_hopper_reason()})")
    return 0


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0]) if argv else ROOT / "bench" / "results"
    if not gpu.hopper_available():
        return dry_run()
    info = gpu.device_info()
    result: dict = {"meta": {
        "gpu": info.name, "sm_count": info.sm_count, "driver": list(info.driver_version),
        "nvrtc": list(gpu.nvrtc_version() or ()), "cublas": gpu.cublas_version(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "script": "tools/h100/pingpong.py",
        "method": f"bf16 inputs rotated over ~3 L2s, bf16 C; {ROUNDS} interleaved rounds of "
                  f"{rounds_for(REPEAT, ROUNDS)} runs a side (CUDA events), the side going first alternating; "
                  "ratio = median of per-round ratios (other side's time / Lab 8's); SM clock, power per side: NVML"}}
    kernel = compile_lab8()
    result["registers"], result["spills"] = kernel.report.registers, kernel.report.spill_stores
    result["correctness"] = correctness(kernel, np.random.default_rng(8))
    sol = labgen.solution_namespace(ROOT / "solutions" / "lab8_pingpong.ipynb")["LAB8_SRC"]
    wrappers = (labgen.solution_namespace(ROOT / "solutions" / "lab1_tma.ipynb")["TMA_LOAD"]
                + "".join(labgen.solution_namespace(ROOT / "solutions" / "lab2_mbarrier.ipynb")[v]
                          for v in ("MBAR_INIT_ARRIVE", "MBAR_TX_WAIT")))
    with contextlib.redirect_stdout(io.StringIO()) as buf:
        try:
            lab8.check_pingpong_kernel(sol, benchmark=False, wrappers=wrappers)
            result["grader"] = "passed"
        except Exception as exc:  # noqa: BLE001 - recorded, the timing still runs
            result["grader"] = f"FAILED: {exc}"
    (out_dir / "pingpong_grader.txt").write_text(buf.getvalue())
    k6 = course_kernel("lab7")
    lab8_make = make_launch(kernel, ())
    result["shapes"] = []
    for shape in SHAPES:
        r = compare(shape, {"lab8": lab8_make, "lab7": lambda a, b, c: launcher(k6, a, b, c), "cublas": None})
        r["lab8_tflops"] = statistics.median([r["lab8 vs lab7"]["lab8_tflops"], r["lab8 vs cublas"]["lab8_tflops"]])
        r["lab7_tflops"] = r["lab8 vs lab7"]["lab7_tflops"]
        r["cublas_tflops"] = r["lab8 vs cublas"]["cublas_tflops"]
        r["lab8_vs_lab7"], r["lab8_vs_cublas"] = r["lab8 vs lab7"]["ratio"], r["lab8 vs cublas"]["ratio"]
        result["shapes"].append(r)
    result["knobs"] = []
    for name, opts in KNOBS.items():
        try:
            kv = compile_lab8(opts)
        except gpu.CompileError as exc:
            result["knobs"].append({"knob": name, "error": str(exc)[:300]})
            continue
        for shape in KNOB_SHAPES:
            r = compare(shape, {"lab8": lab8_make, name: make_launch(kv, opts)})
            result["knobs"].append({"knob": name, "options": list(opts), "registers": kv.report.registers,
                                    "spills": kv.report.spill_stores, **r})
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "pingpong_h100.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# Lab 8 (ping-pong) vs Lab 7 (cooperative) vs cuBLAS, {result['meta']['gpu']}, "
             f"{result['meta']['date']}", "", "| M×N×K | Lab 8 | Lab 7 | cuBLAS | Lab 8 / Lab 7 | Lab 8 / cuBLAS |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in result["shapes"]:
        m, n, k = r["shape"]
        lo6, hi6 = r["lab8 vs lab7"]["ratio_range"]
        loc, hic = r["lab8 vs cublas"]["ratio_range"]
        lines.append(f"| {m}×{n}×{k} | {r['lab8_tflops']:.0f} | {r['lab7_tflops']:.0f} | {r['cublas_tflops']:.0f} | "
                     f"{r['lab8_vs_lab7']:.3f} [{lo6:.3f}–{hi6:.3f}] | "
                     f"{r['lab8_vs_cublas']:.3f} [{loc:.3f}–{hic:.3f}] |")
    (out_dir / "pingpong_h100.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(c["ok"] for c in result["correctness"]) and result["grader"] == "passed" else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
