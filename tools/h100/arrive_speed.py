"""Lab 7 with its two remote arrives, timed in one run on an H100 beside cuBLAS.

    python tools/h100/arrive_speed.py OUT        (run from the repository root; about a minute)

bench/kernels/lab7_clusters.cu as it is (``hopper::mbar_arrive_cluster``: the plain
``mbarrier.arrive.shared::cluster``) and with ``hopper::mbar_arrive_cluster_release`` (``.release.cluster``, which
ptxas turns into a GPU-scope memory barrier before every arrive: tools/h100/arrive_sass.py). Both are timed at each
shape in the same process, alternating, ROUNDS times, each time beside cuBLAS (``gpu.gemm_benchmark``), so the two
forms are compared under the same clocks. Writes OUT/lab6_arrive_speed_h100.json (meta: GPU, driver, date; the
medians; ``summary``: sentences Lesson 05 prints); copy it to tests/data/. Without a Hopper GPU it compiles both
forms and exits 0.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
HERE = str(Path(__file__).resolve())

from helpers import gpu  # noqa: E402
from helpers.course.checks import lab9  # noqa: E402

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096)]
ROUNDS = 3


def variants() -> dict[str, str]:
    """The two kernel sources: the plain remote arrive and the ``.release.cluster`` one."""
    src = lab9.lab7_source()
    if "hopper::mbar_arrive_cluster(" not in src:
        raise ValueError("bench/kernels/lab7_clusters.cu no longer arrives with hopper::mbar_arrive_cluster")
    release = src.replace("hopper::mbar_arrive_cluster(", "hopper::mbar_arrive_cluster_release(")
    return {"plain arrive": src, ".release.cluster arrive": release}


def timed(sources: dict[str, str], shapes: list[tuple[int, int, int]], rounds: int) -> dict:
    """(Child.) Every form at every shape, alternating, ``rounds`` times: TFLOP/s and cuBLAS's beside it."""
    kernels = {name: gpu.compile(src, "lab7_gemm") for name, src in sources.items()}
    got: dict = {}
    with gpu.sm_clock() as clk:
        for m, n, k in shapes:
            for _ in range(rounds):
                for name, kernel in kernels.items():
                    def make(a: object, b: object, c: object, kernel: object = kernel, m: int = m, n: int = n,
                             k: int = k) -> object:
                        grid = gpu.persistent_grid(kernel, 384, lab9.SMEM_BYTES, cluster=2,
                                                   work=math.ceil(m / 256) * math.ceil(n / 256))
                        return gpu.prepare(kernel, (grid, 1, 1), 384, lab9.SMEM_BYTES, lab9._tmap(a, 128, 64),
                                           lab9._tmap(b, 128, 64), lab9._tmap(c, 64, 64), np.int32(m), np.int32(n),
                                           np.int32(k), cluster=(2, 1, 1))

                    r = gpu.gemm_benchmark(make, m, n, k, out_dtype=gpu.bfloat16, repeat=30)
                    got.setdefault(f"{m}×{n}×{k}", {}).setdefault(name, []).append(
                        {"tflops": r.tflops, "cublas_tflops": r.cublas_tflops})
    return {"runs": got, "clock": clk.summary()}


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("/tmp/out")
    out.mkdir(parents=True, exist_ok=True)
    srcs = variants()
    kernels = {name: gpu.compile(src, "lab7_gemm") for name, src in srcs.items()}
    for name, k in kernels.items():
        print(f"{name}: {k.report.summary()}")
    if gpu.skip_without_hopper(kernels["plain arrive"], checked="both forms of the Lab 7 kernel compile",
                               timing=True):
        return 0
    info = gpu.device_info()
    meta = {"gpu": info.name, "sm_count": info.sm_count, "driver": ".".join(map(str, info.driver_version)),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "script": "tools/h100/arrive_speed.py",
            "kernel": "bench/kernels/lab7_clusters.cu", "rounds": ROUNDS}
    r = gpu.run_isolated(f"{HERE}:timed", srcs, SHAPES, ROUNDS, timeout=500)
    summary, medians = [], {}
    for shape, forms in r["runs"].items():
        for name, runs in forms.items():
            med = statistics.median(x["tflops"] for x in runs)
            cub = statistics.median(x["cublas_tflops"] for x in runs)
            medians.setdefault(shape, {})[name] = {"tflops": med, "cublas_tflops": cub}
            summary.append(f"{shape}, {name}: {med:.0f} TFLOP/s (median of {len(runs)}), cuBLAS {cub:.0f} in the "
                           f"same run")
    result = {"meta": meta, "clock": r["clock"], "runs": r["runs"], "medians": medians, "summary": summary}
    (out / "lab6_arrive_speed_h100.json").write_text(json.dumps(result, indent=1) + "\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
