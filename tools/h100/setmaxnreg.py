"""What a setmaxnreg budget that does not add up does on an H100, and how often an early stage release corrupts C.

    python tools/h100/setmaxnreg.py OUT_DIR      (about 60 s: two runs are expected to hang for 10 s)

1. Budgets. A 384-thread block (__launch_bounds__(384, 1): 168 registers at entry) whose warpgroup 0 runs
   setmaxnreg.dec to P and warpgroups 1-2 setmaxnreg.inc to Q, on 132 blocks; each run in a child process with a
   10 s limit. Expected: P + 2Q <= 504 finishes, more hangs (setmaxnreg.inc waits for registers).
2. Early release. Lab 4's 128x256 kernel with the consumers' release moved before wgmma.wait_group (the classic
   silent corruption), 10 runs at 4096^3 against cuBLAS: how many elements of C are wrong in each.

Writes OUT_DIR/setmaxnreg_h100.json (commit as tests/data/setmaxnreg_h100.json).
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402

BUDGET_KERNEL = r"""
#include "hopper.cuh"
extern "C" __global__ void __launch_bounds__(384, 1) budget(float* out) {
  float acc = threadIdx.x;
  if (threadIdx.x / 128 == 0) hopper::setmaxnreg_dec<P>();
  else hopper::setmaxnreg_inc<Q>();
  for (int i = 0; i < 1000; ++i) acc = acc * 0.999f + 1.0f;
  out[blockIdx.x * 384 + threadIdx.x] = acc;
}
"""
BUDGETS = [(24, 240), (24, 232), (40, 232), (24, 248), (32, 240)]


def run_budget(p: int, q: int) -> dict:
    src = BUDGET_KERNEL.replace("<P>", f"<{p}>").replace("<Q>", f"<{q}>")
    kernel = gpu.compile(src, "budget")
    out = np.zeros(132 * 384, np.float32)
    t0 = time.time()
    try:
        res = gpu.run_isolated(kernel, 132, 384, 0, out, timeout=10)
        finished, error = bool(np.isfinite(res.arrays[0]).all()), None
    except gpu.GpuError as exc:
        finished, error = False, str(exc)[:300]
    return {"producer": p, "consumers": q, "entry": kernel.report.registers, "adds_up": p + 2 * q <= 3 *
            kernel.report.registers, "finished": finished, "seconds": round(time.time() - t0, 1), "error": error}


def early_release_errors(runs: int = 10, size: int = 4096) -> list[int]:
    """(Runs in the isolated child.) Wrong elements of C in each of `runs` launches of the early-release kernel."""
    sys.path.insert(0, str(ROOT / "tests" / "labs"))
    from gpu_lab4 import HEADER, solution_namespace, wrong_kernels  # noqa: PLC0415

    from helpers.course.checks import lab4  # noqa: PLC0415

    ns = solution_namespace()  # the lab's kernels, on the course's wrappers
    _, early, _ = wrong_kernels(ns["PC_KERNEL"], ns["LAB4_KERNEL"])["stage released before its wgmma retired"]
    bad = HEADER + ns["WRAPPERS"] + early
    kernel = gpu.compile(bad, "lab4_ws_gemm")
    a, b = gpu.random((size, size), gpu.bfloat16, seed=3), gpu.random((size, size), gpu.bfloat16, seed=4)
    ref = gpu.cublas_gemm(a, b).to_host().astype(np.float64)
    tol = 1e-2 * np.abs(ref) + 2e-3 * np.sqrt(size)
    smem = lab4.dynamic_smem_bytes(lab4.source_stages(bad))
    counts = []
    for _ in range(runs):
        c = gpu.poison((size, size), np.float32)
        gpu.launch(kernel, (size // 256, size // 128), 384, smem, gpu.tensor_map_2d(a, 128, 64),
                   gpu.tensor_map_2d(b, 256, 64), c, np.int32(size), np.int32(size), np.int32(size))
        got = c.to_host().astype(np.float64)
        counts.append(int((~(np.abs(got - ref) <= tol)).sum()))
    return counts


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    probe = gpu.compile(BUDGET_KERNEL.replace("<P>", "<24>").replace("<Q>", "<240>"), "budget")
    if gpu.skip_without_hopper(probe, checked="the budget kernel compiles"):
        return 0
    info = gpu.device_info()
    budgets = []
    for p, q in BUDGETS:
        r = run_budget(p, q)
        print(r)
        budgets.append(r)
    try:
        early = early_release_errors()  # a race, not a fault: it runs here, each launch bounded by its timeout
        early_error = None
    except (gpu.GpuError, AssertionError) as exc:
        early, early_error = None, str(exc)[:300]
    print("early release, wrong elements per run:", early, early_error or "")
    data = {"meta": {"gpu": info.name, "driver": ".".join(map(str, info.driver_version)),
                     "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}",
                     "script": "tools/h100/setmaxnreg.py"},
            "how": {"budgets": "384 threads, __launch_bounds__(384, 1), warpgroup 0 setmaxnreg.dec P, warpgroups "
                               "1-2 setmaxnreg.inc Q, 132 blocks, 10 s limit per run in a child process",
                    "early_release": "Lab 4's 128x256 kernel with each consumer arriving on EMPTY[s] right after "
                                     "wgmma.commit_group (before wait_group), 10 runs at 4096^3, elements outside "
                                     "1e-2|ref| + 2e-3 sqrt(K) of cuBLAS"},
            "budgets": budgets, "early_release_wrong_elements": early, "early_release_error": early_error}
    path = out / "setmaxnreg_h100.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/out")))
