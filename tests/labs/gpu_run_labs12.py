"""Run the Lab 1 and Lab 2 graders on a GPU machine without Jupyter: the solutions must pass (running their
kernels for real), and kernels with planted bugs must fail with the runtime's plain-words report.

    python tests/labs/gpu_run_labs12.py
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from helpers import gpu, grading  # noqa: E402
from helpers.checks import lab1, lab2  # noqa: E402


def namespace(path: Path) -> dict:
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    ns: dict = {}
    src = lambda c: "".join(c["source"]) if isinstance(c["source"], list) else c["source"]  # noqa: E731
    exec(src(code[0]), ns)  # noqa: S102
    for c in code:
        if c.get("metadata", {}).get("nbgrader", {}).get("solution"):
            exec(src(c), ns)  # noqa: S102
    return ns


def run(label: str, fn, *args, expect_fail: str | None = None) -> bool:
    t0 = time.time()
    try:
        fn(*args)
        ok = expect_fail is None
        verdict = "passed"
    except grading.CheckFailed as exc:
        ok = expect_fail is not None and expect_fail in str(exc)
        verdict = "failed: " + str(exc).splitlines()[0][:300] + "\n      " + "\n      ".join(
            str(exc).splitlines()[1:4])
    except Exception:  # noqa: BLE001
        ok = False
        verdict = "ERROR\n" + traceback.format_exc()
    print(f"[{'OK ' if ok else 'BAD'}] {label} ({time.time() - t0:.1f} s): {verdict}", flush=True)
    return ok


def main() -> int:
    print("hopper available:", gpu.hopper_available(), gpu.no_hopper_reason())
    s1 = namespace(ROOT / "solutions" / "lab1_tma.ipynb")
    s2 = namespace(ROOT / "solutions" / "lab2_mbarrier.ipynb")
    results = [
        run("lab1 tma wrapper", lab1.check_tma_wrapper, s1["TMA_LOAD"]),
        run("lab1 copy kernel", lab1.check_copy_kernel, s1["COPY_TILES"]),
        run("lab1 copy kernel, unswizzled read (must fail)", lab1.check_copy_kernel,
            s1["COPY_TILES"].replace("8 * ((c / 8) ^ (r % 8)) + c % 8", "c"), expect_fail="❌"),
        run("lab2 init/arrive", lab2.check_init_arrive, s2["MBAR_INIT_ARRIVE"]),
        run("lab2 init/arrive, count 1 (must fail)", lab2.check_init_arrive,
            s2["MBAR_INIT_ARRIVE"].replace('"r"(count)', '"r"(1u)'), expect_fail="❌"),
        run("lab2 expect_tx/try_wait", lab2.check_tx_wait, s2["MBAR_TX_WAIT"]),
        run("lab2 stream kernel", lab2.check_stream_kernel, s2["ROW_SUMS"]),
        run("lab2 stream kernel, empty parity wrong (must deadlock)", lab2.check_stream_kernel,
            s2["ROW_SUMS"].replace("HOPPER_WAIT(empty, s, (use & 1) ^ 1);", "HOPPER_WAIT(empty, s, use & 1);"),
            expect_fail="deadlock"),
        run("lab2 bug fix", lab2.check_bug_fix, s2["fix"]),
    ]
    print("buggy kernel report:", flush=True)
    lab2.show_deadlock(lab2.BUGGY_ROW_SUMS)
    print(f"{sum(results)} of {len(results)} as expected")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
