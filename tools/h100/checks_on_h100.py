"""Labs 1-4's CUDA checks on one H100, through the one run path (helpers.course.checks._common.run): the solutions
(Lab 3
and Lab 4 timed at 4096³ beside cuBLAS) and the named wrong kernels, each expected to be rejected. For every check it
records whether the RUN rejected it (the failure's first line says where it ran) or the PTX did after a run that
passed (a race the H100's timing hid, a missing fence that ptxas serialized), and how long it took.

Usage (repo root, no pytest or Jupyter needed): ``python tools/h100/checks_on_h100.py OUT_DIR``. Writes
``runs14.json`` (GPU, driver, date; per case: expected, outcome, rejected by, first line, seconds) and prints one
line per case. Exit status 0 when every expectation held.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import io
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "labs"))


def _swap(src: str, old: str, new: str) -> str:
    if old not in src:
        raise ValueError(f"the solution no longer contains {old!r}")
    return src.replace(old, new)


def cases() -> list[tuple[str, object, object, dict, str | None]]:
    """(name, grader, answer, keyword arguments, regex the failure must match or None for "passes")."""
    from helpers.course import labgen
    from helpers.course.checks import lab1, lab2, lab3, lab4

    sol = {n: labgen.solution_namespace(ROOT / "solutions" / f"{n}.ipynb")
           for n in ("lab1_tma", "lab2_mbarrier", "lab3_wgmma")}
    s1, s2, s3 = sol["lab1_tma"], sol["lab2_mbarrier"], sol["lab3_wgmma"]
    w = s1["TMA_LOAD"] + s2["MBAR_INIT_ARRIVE"] + s2["MBAR_TX_WAIT"]
    k1, k2, k3 = s1["LAB1_KERNEL"], s2["LAB2_KERNEL"], s3["LAB3_KERNEL"]
    out: list = [
        ("lab1 · my_tma_load_2d", lab1.check_tma_load, s1["TMA_LOAD"], {"rank": 2}, None),
        ("lab1 · my_tma_load_3d", lab1.check_tma_load, s1["TMA_LOAD_3D"], {"rank": 3}, None),
        ("lab1 · copy kernel", lab1.check_copy_kernel, s1["TMA_LOAD"] + k1, {"kernel": k1}, None),
        ("lab2 · init/arrive", lab2.check_init_arrive, s2["MBAR_INIT_ARRIVE"], {}, None),
        ("lab2 · expect_tx/wait", lab2.check_tx_wait, s2["MBAR_TX_WAIT"], {}, None),
        ("lab2 · gemm", lab2.check_gemm, w + k2, {"kernel": k2}, None),
        ("lab2 · bug fix", lab2.check_bug_fix, s2["fix"], {}, None),
        ("lab3 · my_wgmma", lab3.check_wgmma_asm, s3["WGMMA"], {}, None),
        ("lab3 · gemm kernel (timed)", lab3.check_gemm_kernel, w + s3["WGMMA"] + k3, {"kernel": k3}, None),
    ]
    bad1 = _swap(k1, "8 * ((c / 8) ^ (r % 8)) + c % 8", "c")
    out.append(("wrong lab1 · copy ignoring the swizzle", lab1.check_copy_kernel, s1["TMA_LOAD"] + bad1,
                {"kernel": bad1}, "still swizzled"))
    bad2 = _swap(k2, "((j / STAGES) & 1) ^ 1", "(j / STAGES) & 1")
    out.append(("wrong lab2 · EMPTY wait with the wrong parity", lab2.check_gemm, w + bad2, {"kernel": bad2},
                "deadlock"))
    out.append(("wrong lab2 · stage released before it was read (the bug hunt's kernel)", lab2.check_bug_fix,
                lambda s: s, {}, "reads a stage after releasing it"))
    for name, change, pattern in (("16-byte K step", ("32u * k", "16u * k"), "differ"),
                                  ("missing wgmma fence", ("    hopper::wgmma_fence();\n", ""), "fence"),
                                  ("missing commit", ("    hopper::wgmma_commit();\n", ""), "differ|committed")):
        bad3 = _swap(k3, *change)
        out.append((f"wrong lab3 · {name}", lab3.check_gemm_kernel, w + s3["WGMMA"] + bad3,
                    {"kernel": bad3, "benchmark": False}, pattern))
    spec = importlib.util.spec_from_file_location("gpu_lab4", ROOT / "tests" / "labs" / "gpu_lab4.py")
    g4 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(g4)
    ns = g4.solution_namespace()
    pc, ws, w4 = ns["PC_KERNEL"], ns["LAB4_KERNEL"], ns["WRAPPERS"]
    graders = {"PC": lab4.check_pc_kernel, "WS": lab4.check_ws_kernel}
    out.append(("lab4 · 128×128 producer/consumer (timed)", lab4.check_pc_kernel, w4 + pc, {"kernel": pc}, None))
    out.append(("lab4 · 128×256 warp-specialized (timed)", lab4.check_ws_kernel, w4 + ws, {"kernel": ws}, None))
    for name, (step, src, pattern) in g4.runtime_wrong_kernels(pc, ws).items():
        out.append((f"wrong lab4 · {name}", graders[step], w4 + src, {"kernel": src, "benchmark": False}, pattern))
    return out


def main(out_dir: Path) -> int:
    from helpers import gpu
    from helpers.course import grading

    out_dir.mkdir(parents=True, exist_ok=True)
    if not gpu.hopper_available():
        print(f"no Hopper GPU ({gpu.no_hopper_reason()}): nothing to run here")
        return 0
    info = gpu.device_info()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; device: {info}")
    results, bad = [], 0
    for name, grader, answer, kw, pattern in cases():
        t0 = time.time()
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            try:
                grader(answer, **kw)
                msg = None
            except grading.CheckFailed as exc:
                msg = str(exc)
        seconds = round(time.time() - t0, 1)
        first = (msg or "").split("\n", 1)[0]
        by = None if msg is None else ("the run" if re.search(r"\bran on the ", first) else "the PTX")
        ok = msg is None if pattern is None else (msg is not None and bool(re.search(pattern, msg, re.I | re.S)))
        bad += not ok
        ran = [ln.strip() for ln in buf.getvalue().splitlines() if re.search(r"✓ (ran|timed) on", ln)]
        print(f"{'OK ' if ok else 'BAD'} {name}: {'passed' if msg is None else 'rejected by ' + by} ({seconds} s)")
        for line in ran:
            print(f"      {line[:200]}")
        if msg is not None:
            print(f"      {first[:240]}")
        results.append({"name": name, "expected": "pass" if pattern is None else f"reject /{pattern}/",
                        "outcome": "passed" if msg is None else "rejected", "rejected_by": by, "ok": ok,
                        "first_line": first, "ran": ran, "message": msg, "seconds": seconds})
    meta = {"gpu": info.name, "driver": ".".join(map(str, info.driver_version)),
            "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}", "script": "tools/h100/checks_on_h100.py"}
    (out_dir / "runs14.json").write_text(json.dumps({"meta": meta, "cases": results}, indent=1) + "\n")
    print("all expectations held" if not bad else f"{bad} expectation(s) did not hold")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/out")))
