"""Tuning runs: variants of the Lab 7 and Lab 9 kernels (compile-time switches) beside cuBLAS in one run.

    python bench/tune.py [--write bench/results/NAME] [ladder options]
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ladder  # noqa: E402

BASE = {r.key: r for r in ladder.RUNGS}
SK = ladder.WAVE_QUANTIZED


def variants() -> list[ladder.Rung]:
    out = [dataclasses.replace(BASE["lab5"], shapes=[])]
    for group in (4, 8, 16):
        out.append(dataclasses.replace(BASE["lab7"], key=f"lab7-g{group}", options=(f"-DLAB7_GROUP={group}",),
                                       shapes=[]))
    out.append(dataclasses.replace(BASE["lab7"], key="lab7-g8-zero", options=("-DLAB7_SCALE_D=0",), shapes=SK))
    out.append(dataclasses.replace(BASE["lab9"], key="lab9-hybrid", shapes=SK))
    out.append(dataclasses.replace(BASE["lab9"], key="lab9-pure", options=("-DLAB9_HYBRID=0",), shapes=SK))
    return out


if __name__ == "__main__":
    raise SystemExit(ladder.main(sys.argv[1:], variants()))
