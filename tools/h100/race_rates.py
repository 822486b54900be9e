"""How often do Lab 2's racy variants give a wrong C on the H100? Runs each variant 20 times per size on the same
inputs and counts wrong runs (elements outside the fp32-accumulation bound of an fp64 product).

    python tools/h100/race_rates.py "$OUT"   -> $OUT/race_rates.json
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402
from helpers.course import grading  # noqa: E402
from helpers.course.checks import _common as C  # noqa: E402
from helpers.course.checks import lab2  # noqa: E402

EARLY = "    hopper::mbar_arrive(&empty[s]);  // got the tile: the producer may go on\n"
VARIANTS = {
    # the lab's bug hunt: every thread releases its stage right after the wait, before reading it
    "release_before_read": lambda s: s,
    # one warp's worth of arrivals: the stage is free once the first 32 threads have read it
    "empty_count_one_warp": lambda s: s.replace(EARLY, "").replace(
        "      for (int j = 0; j < 32; ++j) acc[j] += a * bf16_at(sB[s], col0 + j, kk);\n    }\n",
        "      for (int j = 0; j < 32; ++j) acc[j] += a * bf16_at(sB[s], col0 + j, kk);\n    }\n"
        "    hopper::mbar_arrive(&empty[s]);\n").replace("hopper::mbar_init(&empty[s], THREADS);",
                                                         "hopper::mbar_init(&empty[s], 32);"),
    # one arrival per warp by lane 0, count 4: lanes of a warp read in step, so this is right on the GPU
    "lane0_per_warp": lambda s: s.replace(EARLY, "").replace(
        "      for (int j = 0; j < 32; ++j) acc[j] += a * bf16_at(sB[s], col0 + j, kk);\n    }\n",
        "      for (int j = 0; j < 32; ++j) acc[j] += a * bf16_at(sB[s], col0 + j, kk);\n    }\n"
        "    if (t % 32 == 0) hopper::mbar_arrive(&empty[s]);\n").replace(
        "hopper::mbar_init(&empty[s], THREADS);", "hopper::mbar_init(&empty[s], THREADS / 32);"),
}


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"meta": {"gpu": gpu.device_info().name, "date": datetime.datetime.now(datetime.UTC).isoformat(
        timespec="seconds"), "script": "tools/h100/race_rates.py", "runs": 20}, "variants": {}}
    for name, edit in VARIANTS.items():
        src = edit(lab2.BUGGY_KERNEL)
        assert name == "release_before_read" or src != lab2.BUGGY_KERNEL, name
        res["variants"][name] = {}
        for size in (256, 512, 1024, 2048):
            rng = np.random.default_rng(2)
            a, b = C.make_operands(rng, size, size, size)
            try:  # in a child process: a variant that deadlocks or faults costs only its own row
                outs = gpu.run_isolated(C.gemm_run, lab2.HEADER + src, lab2.KERNEL_NAME, [(a, b)], 20, timeout=90)
            except gpu.GpuError as exc:
                res["variants"][name][str(size)] = {"error": str(exc)[:300]}
                print(name, size, "failed:", str(exc)[:200], flush=True)
                continue
            ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64).T
            tol = grading.gemm_tolerance(a, np.asarray(b, np.float64).T)
            wrong = [int((~(np.abs(o - ref) <= tol)).sum()) for o in outs]
            res["variants"][name][str(size)] = {"wrong_runs": sum(w > 0 for w in wrong), "wrong_elements": wrong}
            print(name, size, "wrong runs:", sum(w > 0 for w in wrong), "of 20; elements", wrong[:5], flush=True)
    (out / "race_rates.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/out"))
