"""How fast the PTX executor (helpers.ptx) runs the course's kernels on one CPU core, beside the issue's targets.
CPU seconds of the launch alone (compiled and warmed up first), on this machine's single core:

    python bench/ptx_speed.py [--repeat 3] [--write bench/results/NAME.md]
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

from helpers import gpu, labgen  # noqa: E402


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


def cases() -> list[tuple[str, str, float, object]]:
    from kernels import LAB2_GEMM, WS_GEMM, ws_smem

    sol: dict = {}
    for nb in ("lab1_tma", "lab2_mbarrier", "lab3_wgmma"):
        sol.update(labgen.solution_namespace(ROOT / "solutions" / f"{nb}.ipynb"))
    out = []

    copy = gpu.compile('#include "hopper.cuh"\n' + sol["COPY_TILES"], "copy_tiles")
    src = gpu.to_device(gpu.random_host((256, 320), gpu.bfloat16, seed=3).view(np.uint16))
    tsrc = gpu.tensor_map_2d(src, 64, 64)

    def lab1() -> None:
        gpu.launch(copy, (5, 4), 128, 0, tsrc, src, gpu.poison((256, 320), np.uint16), np.int32(320))

    out.append(("Lab 1 copy_tiles (solution)", "256×320 bf16, 20 blocks", 2.0, lab1))

    rows = gpu.compile('#include "hopper.cuh"\n' + sol["ROW_SUMS"], "row_sums")
    ra = gpu.to_device(gpu.random_host((192, 448), gpu.bfloat16, seed=4))
    tra = gpu.tensor_map_2d(ra, 64, 64)

    def lab2_rows() -> None:
        gpu.launch(rows, 3, 128, 0, tra, ra, gpu.poison(192, np.float32), np.int32(7))

    out.append(("Lab 2 row_sums (solution)", "192×448 bf16, 3 blocks", 2.0, lab2_rows))
    out.append(("Lab 2 GEMM (two-stage loop, CUDA cores)", "64×128×128", 2.0,
                _gemm_case(LAB2_GEMM, "lab2_gemm", 64, 128, 128, (2, 1), 128, 0, (64, 64), (64, 64))))
    out.append(("Lab 2 GEMM (two-stage loop, CUDA cores)", "128×128×256", 2.0,
                _gemm_case(LAB2_GEMM, "lab2_gemm", 128, 128, 256, (2, 2), 128, 0, (64, 64), (64, 64))))
    out.append(("Lab 3 GEMM (solution, wgmma m64n64k16)", "256×192×320", 10.0,
                _gemm_case(sol["GEMM_SRC"], "lab3_gemm", 256, 192, 320, (3, 4), 128, 0, (64, 64), (64, 64))))
    bench = (ROOT / "bench" / "kernels" / "gemm_64x64.cu").read_text()
    out.append(("bench gemm_64x64", "256×256×256", 10.0,
                _gemm_case(bench, "gemm_64x64", 256, 256, 256, (4, 4), 128, 0, (64, 64), (64, 64))))
    ws = "#define BN 256\n#define STAGES 3\n#define CONSUMER_REGS 240\n#define PRODUCER_REGS 24\n" + WS_GEMM
    out.append(("Lab 4-style warp-specialized 128×256, setmaxnreg", "256×256×512", 30.0,
                _gemm_case(ws, "ws_gemm", 256, 256, 512, (1, 2), 384, ws_smem(256, 3), (128, 64), (256, 64))))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per kernel (the best is reported)")
    ap.add_argument("--write", help="also write the table as Markdown to this file")
    args = ap.parse_args(argv)
    lines = [f"| kernel | shape | CPU seconds (best of {args.repeat}) | target | |", "|---|---|---|---|---|"]
    print(f"{'kernel':<52} {'shape':<26} {'seconds':>8} {'target':>7}")
    ok = True
    for name, shape, target, run in cases():
        run()  # warm-up: module load, caches
        best = min(_timed(run) for _ in range(args.repeat))
        good = best < target
        ok &= good
        print(f"{name:<52} {shape:<26} {best:8.2f} {target:7.0f}  {'ok' if good else 'SLOW'}")
        lines.append(f"| {name} | {shape} | {best:.2f} | < {target:g} s | {'ok' if good else 'slow'} |")
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
