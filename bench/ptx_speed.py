"""How fast the PTX executor (helpers.gpu.executor) runs the course's kernels on one CPU core, beside the issue's
targets:
a plain run, the same with the hazard checker (``executor_options(hazards=True)``) and with a timeline recorded
(``trace=True``). CPU seconds of the launch alone (compiled and warmed up first), on this machine's single core:

    python bench/ptx_speed.py [--repeat 3] [--only "Lab 9"] [--write bench/results/NAME.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ["HELPERS_EXECUTOR"] = "force"

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ptx"))

from helpers import gpu  # noqa: E402


def _gemm_case(src: str, name: str, m: int, n: int, k: int, grid, block: int, smem: int, box_a, box_b):  # noqa: ANN001
    kern = gpu.compile(src, name)
    a = gpu.random_host((m, k), gpu.bfloat16, seed=1)
    b = gpu.random_host((n, k), gpu.bfloat16, seed=2)
    da, db = gpu.to_device(a), gpu.to_device(b)
    ta, tb = gpu.tensor_map_2d(da, *box_a), gpu.tensor_map_2d(db, *box_b)

    def run() -> None:
        dc = gpu.poison((m, n), np.float32)
        gpu.launch(kern, grid, block, smem, ta, tb, dc, np.int32(m), np.int32(n), np.int32(k))

    return run


def _bf16_case(file: str, name: str, m: int, n: int, k: int, grid, cluster=None, streamk: int = 0):  # noqa: ANN001
    kern = gpu.compile((ROOT / "bench" / "kernels" / file).read_text(), name)
    da = gpu.to_device(gpu.random_host((m, k), gpu.bfloat16, seed=1))
    db = gpu.to_device(gpu.random_host((n, k), gpu.bfloat16, seed=2))
    extra = (gpu.zeros((streamk * 2 * 128 * 256,), np.float32), gpu.zeros((streamk * 2,), np.uint32)) if streamk \
        else ()

    def run() -> None:
        dc = gpu.poison((m, n), gpu.bfloat16)
        gpu.launch(kern, grid, 384, 4 * 48 * 1024 + 32 * 1024 + 1024, gpu.tensor_map_2d(da, 128, 64),
                   gpu.tensor_map_2d(db, 256 if cluster is None else 128, 64), gpu.tensor_map_2d(dc, 64, 64),
                   np.int32(m), np.int32(n), np.int32(k), *extra, cluster=cluster)

    return run


def cases() -> list[tuple[str, str, float, object]]:
    from kernels import LAB2_GEMM, WS_GEMM, lab_sources, ws_smem

    sol = lab_sources()
    out = []

    copy = gpu.compile(sol["LAB1"], "lab1_copy")
    src = gpu.to_device(gpu.random_host((256, 320), gpu.bfloat16, seed=3).view(np.uint16))
    tsrc = gpu.tensor_map_2d(src, 64, 64)

    def lab1() -> None:
        gpu.launch(copy, (5, 4), 128, 0, tsrc, src, gpu.poison((256, 320), np.uint16), np.int32(320))

    out.append(("Lab 1 lab1_copy (solution)", "256×320 bf16, 20 blocks", 2.0, lab1))
    out.append(("Lab 2 GEMM (solution, two-stage loop, CUDA cores)", "64×128×128", 2.0,
                _gemm_case(sol["LAB2"], "lab2_gemm", 64, 128, 128, (2, 1), 128, 0, (64, 64), (64, 64))))
    out.append(("Lab 2 GEMM (lineage kernel, CUDA cores)", "128×128×256", 4.0,
                _gemm_case(LAB2_GEMM, "lab2_gemm", 128, 128, 256, (2, 2), 128, 0, (64, 64), (64, 64))))
    out.append(("Lab 3 GEMM (solution, wgmma m64n64k16)", "256×192×320", 10.0,
                _gemm_case(sol["LAB3"], "lab3_gemm", 256, 192, 320, (3, 4), 128, 0, (64, 64), (64, 64))))
    bench = (ROOT / "bench" / "kernels" / "gemm_64x64.cu").read_text()
    out.append(("bench gemm_64x64", "256×256×256", 10.0,
                _gemm_case(bench, "gemm_64x64", 256, 256, 256, (4, 4), 128, 0, (64, 64), (64, 64))))
    ws = "#define BN 256\n#define STAGES 3\n#define CONSUMER_REGS 240\n#define PRODUCER_REGS 24\n" + WS_GEMM
    out.append(("Lab 4-style warp-specialized 128×256, setmaxnreg", "256×256×512", 30.0,
                _gemm_case(ws, "ws_gemm", 256, 256, 512, (1, 2), 384, ws_smem(256, 3), (128, 64), (256, 64))))
    out.append(("Lab 5 TMA-store epilogue (bench)", "264×520×200", 30.0,
                _bf16_case("lab5_epilogue.cu", "lab5_gemm", 264, 520, 200, (3, 3))))
    out.append(("Lab 7 persistent, clusters of 2, multicast (bench)", "776×520×200, 2 clusters", 30.0,
                _bf16_case("lab7_clusters.cu", "lab7_gemm", 776, 520, 200, (4, 1, 1), cluster=(2, 1, 1))))
    out.append(("Lab 9 Stream-K (bench)", "520×264×1000, 4 clusters", 60.0,
                _bf16_case("lab9_streamk.cu", "lab9_gemm", 520, 264, 1000, (8, 1, 1), cluster=(2, 1, 1),
                           streamk=4)))
    return out


def main(argv: list[str] | None = None) -> int:
    from helpers.gpu import executor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per kernel (the best is reported)")
    ap.add_argument("--write", help="also write the table as Markdown to this file")
    ap.add_argument("--only", nargs="*", help="substrings of the kernels to run")
    args = ap.parse_args(argv)
    lines = [f"| kernel | shape | CPU seconds (best of {args.repeat}) | with the hazard checker | traced | target "
             "(plain run) | |", "|---|---|---|---|---|---|---|"]
    print(f"{'kernel':<52} {'shape':<26} {'seconds':>8} {'hazards':>8} {'traced':>8} {'target':>7}")
    ok = True
    for name, shape, target, run in cases():
        if args.only and not any(x in name for x in args.only):
            continue
        run()  # warm-up: module load, caches
        best = min(_timed(run) for _ in range(args.repeat))
        with executor.executor_options(hazards=True):
            checked = min(_timed(run) for _ in range(args.repeat))
        with executor.executor_options(trace=True):
            traced = min(_timed(run) for _ in range(args.repeat))
        good = best < target
        ok &= good
        print(f"{name:<52} {shape:<26} {best:8.2f} {checked:8.2f} {traced:8.2f} {target:7.0f}  "
              f"{'ok' if good else 'SLOW'}")
        lines.append(f"| {name} | {shape} | {best:.2f} | {checked:.2f} (×{checked / best:.1f}) | {traced:.2f} | "
                     f"< {target:g} s | {'ok' if good else 'slow'} |")
    if args.write:
        import platform

        head = f"# PTX executor speed ({time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, " \
               f"Python {platform.python_version()}, numpy {np.__version__}, one core)\n\n"
        Path(args.write).write_text(head + "\n".join(lines) + "\n")
    return 0 if ok else 1


def _timed(run) -> float:  # noqa: ANN001
    t0 = time.process_time()
    run()
    return time.process_time() - t0


if __name__ == "__main__":
    raise SystemExit(main())
