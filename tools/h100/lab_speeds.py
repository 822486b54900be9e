"""Measurements for Labs 1-3 on one H100 (no Jupyter needed): writes $OUT/labs123.json and prints a summary.

1. Lab 2's and Lab 3's solution kernels at 4096³ beside cuBLAS in the same run (checked first against cuBLAS);
2. the bug hunt: the colleague's kernel (early release) and the fixed one, 20 runs each on the same 2048³ problem:
   how many runs give a wrong C (the race), and that the fix never does;
3. what the H100 does with a .3d TMA load on a rank-2 tensor map (the write-up's snippet), in a child process.

    python tools/h100/lab_speeds.py [OUT]
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from helpers import gpu  # noqa: E402
from helpers.course import grading, labgen  # noqa: E402
from helpers.course.checks import _common as C  # noqa: E402
from helpers.course.checks import lab2  # noqa: E402

RANK_MISMATCH = r"""
#include <hopper.cuh>
extern "C" __global__ void rank_mismatch(const __grid_constant__ CUtensorMap map, unsigned short* out) {
  __shared__ alignas(1024) unsigned short tile[64 * 64];
  __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x == 0) { hopper::mbar_init(&bar, 1); hopper::mbar_fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbar_arrive_expect_tx(&bar, sizeof(tile));
    hopper::tma_load_3d(tile, &map, &bar, 0, 64, 2);  // {0, row, col / 64} on a rank-2 map
  }
  HOPPER_WAIT1(bar, 0);
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) out[i] = tile[i];
}
"""


def rank_mismatch() -> dict:
    """(In a child.) Load with .3d through a rank-2 map; report the outcome in words."""
    import ml_dtypes

    k = gpu.compile(RANK_MISMATCH, "rank_mismatch")
    a = np.arange(256 * 256, dtype=np.uint16).reshape(256, 256)
    d = gpu.to_device(a.view(ml_dtypes.bfloat16))
    tmap = gpu.tensor_map_2d(d, 64, 64)
    out = gpu.to_device(np.full(64 * 64, 0xFFFF, np.uint16))
    gpu.launch(k, 1, 128, 0, tmap, out, timeout=20)
    got = out.to_host().reshape(64, 64)
    return {"outcome": "completed", "first_row": got[0, :8].tolist(),
            "equals_tile_at_row64_col128": bool(np.array_equal(
                got, lab1_image(a[64:128, 128:192])))}


def lab1_image(tile: np.ndarray) -> np.ndarray:
    from helpers.course.checks import lab1

    return lab1.swizzle_reference(np.ascontiguousarray(tile), "B128").view(np.uint16).reshape(64, 64)


def bench(source: str, name: str, size: int) -> dict:
    b = C.gemm_benchmark(source, name, size)
    return {"size": size, "tflops": round(b.tflops, 1), "cublas_tflops": round(b.cublas_tflops or 0, 1),
            "ratio": round(b.ratio or 0, 3), "max_abs_error": b.max_abs_error, "summary": b.summary()}


def race(source: str, runs: int, size: int) -> dict:
    rng = np.random.default_rng(2)
    a, b = C.make_operands(rng, size, size, size)
    outs = gpu.run_isolated(C.gemm_run, lab2.HEADER + source, lab2.KERNEL_NAME, [(a, b)], runs, timeout=240)
    ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64).T
    tol = grading.gemm_tolerance(a, np.asarray(b, np.float64).T)
    wrong = [int((~(np.abs(o - ref) <= tol)).sum()) for o in outs]
    return {"size": size, "runs": runs, "wrong_runs": sum(w > 0 for w in wrong), "wrong_elements_per_run": wrong}


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    info = gpu.device_info()
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    result: dict = {"meta": {"gpu": str(info), "date": now, "script": "tools/h100/lab_speeds.py"}}
    s1 = labgen.solution_namespace(ROOT / "solutions" / "lab1_tma.ipynb")
    s2 = labgen.solution_namespace(ROOT / "solutions" / "lab2_mbarrier.ipynb")
    s3 = labgen.solution_namespace(ROOT / "solutions" / "lab3_wgmma.ipynb")
    wrappers = s1["TMA_LOAD"] + s2["MBAR_INIT_ARRIVE"] + s2["MBAR_TX_WAIT"]
    steps = [
        ("lab2_4096", lambda: bench(lab2.HEADER + wrappers + s2["LAB2_KERNEL"], "lab2_gemm", 4096)),
        ("lab3_4096", lambda: bench(lab2.HEADER + wrappers + s3["WGMMA"] + s3["LAB3_KERNEL"], "lab3_gemm", 4096)),
        ("lab3_8192", lambda: bench(lab2.HEADER + wrappers + s3["WGMMA"] + s3["LAB3_KERNEL"], "lab3_gemm", 8192)),
        ("bug_hunt_buggy", lambda: race(lab2.BUGGY_KERNEL, 20, 2048)),
        ("bug_hunt_fixed", lambda: race(s2["fix"](lab2.BUGGY_KERNEL), 20, 2048)),
        ("rank3_load_on_rank2_map", lambda: gpu.run_isolated(f"{Path(__file__).resolve()}:rank_mismatch",
                                                             timeout=60)),
    ]
    for key, fn in steps:
        t = time.time()
        try:
            result[key] = fn()
        except Exception as exc:  # noqa: BLE001 - every step is recorded, a failure too
            result[key] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"{key} ({time.time() - t:.0f} s): {json.dumps(result[key])[:400]}", flush=True)
    result["meta"]["seconds"] = round(time.time() - t0, 1)
    (out / "labs123.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp/out")))
