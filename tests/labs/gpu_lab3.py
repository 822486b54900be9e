"""Lab 3 on an H100, through its grader: the solution kernel checked on random shapes and timed at 4096³ beside
cuBLAS, then the wrong kernels the grader must reject (each must fail with the reason given).

Usage (no pytest or Jupyter needed): ``python tests/labs/gpu_lab3.py [size]``. Exit status 0 when every
expectation held. ``test_lab3.py``'s gpu tests use the same wrong kernels.
"""

from __future__ import annotations

import datetime
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "lab3_wgmma.ipynb"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def solution_namespace() -> dict:
    """The solution notebook's definitions: every code cell except the graded checks, executed in order."""
    nb = json.loads(SOLUTION.read_text())
    ns: dict = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and not cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            exec(compile(source, f"{SOLUTION.name}:{cell.get('id')}", "exec"), ns)
    return ns


def _swap(src: str, old: str, new: str) -> str:
    if old not in src:
        raise ValueError(f"the solution kernel no longer contains {old!r}")
    return src.replace(old, new)


def wrong_kernels(src: str) -> dict[str, tuple[str, str]]:
    """Plausible wrong kernels: name -> (source, regex the grader's message must match)."""
    swapped = _swap(_swap(src, "(16 >> 4) << 16", "(1024 >> 4) << 16"), "(1024 >> 4) << 32", "(16 >> 4) << 32")
    store = "*reinterpret_cast<float2*>(&C[(long long)row * N + col]) = make_float2(d[j], d[j + 1]);"
    transposed = ("C[(long long)(m0 + (col - n0)) * N + n0 + (row - m0)] = d[j];"
                  " C[(long long)(m0 + (col + 1 - n0)) * N + n0 + (row - m0)] = d[j + 1];")
    return {
        "LBO and SBO swapped": (swapped, "differ|failed on the GPU"),
        "start address stepped by 16 bytes per k16 slice": (_swap(src, "32u * k", "16u * k"), "differ"),
        "no swizzle bit (bit 62 clear)": (_swap(src, "desc |= 1ull << 62;", ""), "differ|failed on the GPU"),
        "fragments stored transposed": (_swap(src, store, transposed), "transposed"),
        "expects twice the bytes TMA delivers (deadlock)": (
            _swap(src, "hopper::mbar_arrive_expect_tx(&full, sizeof(sA) + sizeof(sB));",
                  "hopper::mbar_arrive_expect_tx(&full, 2 * (sizeof(sA) + sizeof(sB)));"), "deadlock"),
    }


def main(size: int = 4096) -> int:
    from helpers import gpu, grading
    from helpers.checks import lab3

    info = gpu.device_info()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; device: {info}")
    ns = solution_namespace()
    src = ns["GEMM_SRC"]
    problems = []
    t0 = time.time()
    try:
        lab3.check_gemm_kernel(src, benchmark=True, size=size)
    except grading.CheckFailed as exc:
        problems.append(f"the solution kernel failed its check: {exc}")
    print(f"[solution: {time.time() - t0:.1f} s]\n")
    for name, (wrong, pattern) in wrong_kernels(src).items():
        t0 = time.time()
        print(f"=== wrong kernel: {name}")
        try:
            lab3.check_gemm_kernel(wrong, benchmark=False)
        except grading.CheckFailed as exc:
            ok = re.search(pattern, str(exc), re.I | re.S)
            print(f"=> rejected ({'as expected' if ok else 'but the message does not match ' + pattern!r})")
            if not ok:
                problems.append(f"{name}: rejected with an unexpected message")
        else:
            problems.append(f"{name}: ACCEPTED by the grader")
            print("=> ACCEPTED (wrong!)")
        print(f"[{time.time() - t0:.1f} s]\n")
    print("\n".join(["PROBLEMS:"] + problems) if problems else "all expectations held")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096))
