"""Crash-proof runs, demonstrated: a deadlocking kernel and two faulting kernels each run in a child process
(gpu.run_isolated); this process prints the plain-words report and how long it took, then launches a working
kernel to show that its own GPU context is unharmed.

    python bench/fault_demo.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers import gpu  # noqa: E402
from helpers.gpu import examples  # noqa: E402


def main() -> int:
    k = gpu.compile(examples.DEADLOCK, "stuck")
    if gpu.skip_without_hopper(k, checked="the demo kernels compile"):
        return 0
    first = examples.vector_add_demo(n=1000)  # this process holds a live context throughout
    assert np.array_equal(first["c"], first["a"] + 2 * first["b"])
    ok = True
    for demo in ("deadlock_demo", "out_of_bounds_demo", "misaligned_demo"):
        t0 = time.monotonic()
        try:
            gpu.run_isolated(f"helpers.gpu.examples:{demo}", timeout=30)
            print(f"{demo}: no error?!")
            ok = False
        except gpu.KernelFault as e:
            print(f"{demo} ({type(e).__name__}, {time.monotonic() - t0:.1f} s): {e}")
        after = examples.vector_add_demo(n=1000, seed=1)
        same = np.array_equal(after["c"], after["a"] + 2 * after["b"])
        print(f"  next launch in this process: {'works' if same else 'WRONG'}")
        ok &= same
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
