"""On an H100: replay mbarrier scripts with a one-thread kernel and record test_wait.parity 0/1 after each step.

    python tools/h100/mbarrier.py OUT.json

Named scripts cover the lesson's cases (arrival counts, the expect-tx race, bytes landing early, over-delivery);
random scripts (kept legal by running them on the emulator first: no more arrivals than pending) cover the rest.
The result is the fixture tests/data/mbarrier_h100.json, asserted by tests/emulator/test_mbarrier_silicon.py.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

import numpy as np

from helpers.course.widgets import barrier
from helpers.hopper.mbarrier import MBarrier, MBarrierError

NAMED = {
    "count2": [("init", 2), ("arrive", 1), ("arrive", 1), ("arrive", 1), ("arrive", 1)],
    "fresh": [("init", 1)],
    "race": [("init", 1), ("arrive", 1), ("expect_tx", 8192), ("complete_tx", 8192), ("arrive", 1)],
    "two_tiles": [("init", 1), ("arrive_expect_tx", 16384), ("complete_tx", 8192), ("complete_tx", 8192)],
    "bytes_early": [("init", 1), ("complete_tx", 8192), ("arrive_expect_tx", 8192)],
    "arrive_count": [("init", 4), ("arrive", 3), ("arrive", 1), ("arrive", 1)],
    "overshoot": [("init", 1), ("arrive_expect_tx", 8192), ("complete_tx", 16384)],
    "overshoot_then_expect": [("init", 1), ("arrive_expect_tx", 8192), ("complete_tx", 16384), ("expect_tx", 8192)],
    # bytes landed early and every arrival is in: expect_tx completes the phase, arrive.expect_tx traps
    "early_then_arrive_expect_tx": [("init", 1), ("complete_tx", 8192), ("arrive", 1), ("arrive_expect_tx", 8192)],
    "early_then_expect_tx": [("init", 1), ("complete_tx", 8192), ("arrive", 1), ("expect_tx", 8192)],
    "count2_early_then_arrive_expect_tx": [("init", 2), ("complete_tx", 8192), ("arrive", 2),
                                           ("arrive_expect_tx", 8192), ("arrive", 1)],
    "two_phases_overshoot": [("init", 2), ("arrive", 1), ("arrive_expect_tx", 8192), ("complete_tx", 8192),
                             ("arrive_expect_tx", 1024), ("complete_tx", 8192)],
    "small_then_overshoot": [("init", 1), ("arrive_expect_tx", 1024), ("complete_tx", 8192)],
}


def random_script(rng: np.random.Generator, length: int) -> list[tuple[str, int]]:
    """A legal random script: each step is tried on the emulator and dropped if the barrier refuses it."""
    count = int(rng.integers(1, 5))
    script = [("init", count)]
    bar = MBarrier("probe", allow_negative_tx=True)
    bar.init(count)
    while len(script) < length:
        action = str(rng.choice(["arrive", "expect_tx", "arrive_expect_tx", "complete_tx"]))
        arg = int(rng.integers(1, count + 1)) if action == "arrive" else int(rng.choice([16, 1024, 8192, 16384]))
        try:
            getattr(bar, action)(arg)
        except MBarrierError:
            continue
        script.append((action, arg))
    return script


def main(path: str) -> None:
    from cuda.bindings import driver

    from helpers import gpu

    info = gpu.device_info()
    rng = np.random.default_rng(2026_11_22)
    scripts = dict(NAMED)
    for i in range(48):
        scripts[f"random{i:02d}"] = random_script(rng, int(rng.integers(3, 12)))
    cases = []
    for name, script in scripts.items():
        # one child process per script: a script the hardware refuses (it traps) must not end the capture
        done = subprocess.run([sys.executable, __file__, "--one", json.dumps(script)], capture_output=True,
                              text=True, timeout=60)
        case = {"name": name, "script": [list(s) for s in script]}
        if done.returncode == 0:
            case["wait_bits"] = json.loads(done.stdout.strip().splitlines()[-1])
        else:
            case["fault"] = (done.stdout + done.stderr).strip().splitlines()[-1][:300]
        print(name, case.get("wait_bits", case.get("fault")))
        cases.append(case)
    _, drv = driver.cuDriverGetVersion()
    meta = {
        "what": "mbarrier test_wait.parity 0/1 after each step of a script, one thread (barrier.REPLAY_KERNEL)",
        "gpu": info.name, "driver_cuda_version": drv,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "made_by": "tools/h100/mbarrier.py",
    }
    with open(path, "w") as f:
        json.dump({"meta": meta, "cases": cases}, f, indent=0)
    print(f"{len(cases)} scripts captured -> {path}")


def one(script_json: str) -> None:
    script = [tuple(step) for step in json.loads(script_json)]
    print(json.dumps(barrier.replay_on_gpu(script).tolist()))


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        one(sys.argv[2])
    else:
        main(sys.argv[1])
