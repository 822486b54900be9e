"""Measure the Lab 3 kernel's timeline on an H100: clock64 stamps per K step, for the blocks that share one SM.

    python tools/h100/wgmma_timeline.py OUT_DIR      (about 10 s of GPU time)

The kernel is the course's Lab 3 kernel (solutions/lab3_wgmma.ipynb, built on the solutions' wrappers of Labs 1-3,
as tests/labs/gpu_lab4.py assembles it) with three stamps added for thread 0 of each block, per K step: after its
wait on EMPTY in produce(j) (step j's copies are issued next, one step ahead of the compute), after its wait on FULL
(the tiles are there), after wgmma.wait_group 0 (the step's wgmmas are done). It also records the block's SM
(%smid). Writes
OUT_DIR/lab3_timeline_h100.json: the first blocks that ran on the busiest-at-start SM, stamps in SM cycles from the
earliest one (commit it as tests/data/lab3_timeline_h100.json; Lesson 04 draws it).
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402

SIZE = 4096


def lab3_source() -> str:
    """The course's Lab 3 kernel, whole (header, the solutions' wrappers, Lab 3's wgmma and kernel)."""
    spec = importlib.util.spec_from_file_location("gpu_lab4", ROOT / "tests" / "labs" / "gpu_lab4.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.course_sources()["LAB3"]


def instrumented(source: str) -> str:
    """Lab 3's kernel with the stamps: two more kernel parameters, three clock64 reads of thread 0 per K step."""
    def swap(src: str, old: str, new: str) -> str:
        assert src.count(old) == 1, old
        return src.replace(old, new)

    s = swap(source, "float* __restrict__ C, int M, int N, int K) {",
             "float* __restrict__ C, int M, int N, int K, long long* stamps, int* sm) {\n"
             "  long long* mine = stamps + 3ll * (K / 64) * (blockIdx.y * gridDim.x + blockIdx.x);")
    s = swap(s, 'my_mbar_wait(&empty[s], ((j / STAGES) & 1) ^ 1, "empty", s);\n',
             'my_mbar_wait(&empty[s], ((j / STAGES) & 1) ^ 1, "empty", s);\n    mine[3 * j] = clock64();\n')
    s = swap(s, 'my_mbar_wait(&full[s], (k / STAGES) & 1, "full", s);\n',
             'my_mbar_wait(&full[s], (k / STAGES) & 1, "full", s);\n    if (t == 0) mine[3 * k + 1] = clock64();\n')
    s = swap(s, "hopper::wgmma_wait<0>();\n",
             "hopper::wgmma_wait<0>();\n    if (t == 0) mine[3 * k + 2] = clock64();\n")
    s = swap(s, "  const int w = t / 32, l = t % 32;",
             "  if (t == 0) {\n    unsigned id;\n    asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(id));\n"
             "    sm[blockIdx.y * gridDim.x + blockIdx.x] = (int)id;\n  }\n"
             "  const int w = t / 32, l = t % 32;")
    return s


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    kernel = gpu.compile(instrumented(lab3_source()), "lab3_gemm")
    if gpu.skip_without_hopper(kernel, checked="the instrumented kernel compiles"):
        return 0
    info = gpu.device_info()
    m = n = k = SIZE
    blocks = (n // 64) * (m // 64)
    a, b = gpu.random((m, k), gpu.bfloat16, seed=1), gpu.random((n, k), gpu.bfloat16, seed=2)
    c = gpu.poison((m, n), np.float32)
    stamps = gpu.zeros((blocks, k // 64, 3), np.int64)
    sm = gpu.poison(blocks, np.int32)
    args = (gpu.tensor_map_2d(a, 64, 64), gpu.tensor_map_2d(b, 64, 64), c, np.int32(m), np.int32(n), np.int32(k),
            stamps, sm)
    for _ in range(3):  # warm-up, then the run that is kept
        gpu.launch(kernel, (n // 64, m // 64), 128, 0, *args)
    st, where = stamps.to_host(), sm.to_host()
    gpu.check_gemm(c.to_host(), gpu.cublas_gemm(a, b).to_host(), k)
    # the blocks of one SM that ran first: co-resident at the start of the grid
    first = st[:, 0, 0]
    chosen_sm = int(where[int(np.argmin(first))])
    on_sm = [i for i in np.argsort(first) if where[i] == chosen_sm]
    t0 = int(st[on_sm[0], 0, 0])
    end0 = int(st[on_sm[0], -1, 2])
    resident = [i for i in on_sm if st[i, 0, 0] < end0][:6]
    blocks_out = [{"block": [int(i % (n // 64)), int(i // (n // 64))], "sm": chosen_sm,
                   "steps": (st[i] - t0).astype(int).tolist()} for i in resident]
    d = st[resident]
    summary = {"co_resident_blocks": len(resident),
               "median_cycles_issue_to_landed": float(np.median(d[:, :, 1] - d[:, :, 0])),
               "median_cycles_landed_to_wgmma_done": float(np.median(d[:, :, 2] - d[:, :, 1])),
               "median_cycles_per_k_step": float(np.median(np.diff(d[:, :, 0], axis=1)))}
    data = {"meta": {"gpu": info.name, "driver": ".".join(map(str, info.driver_version)),
                     "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}",
                     "script": "tools/h100/wgmma_timeline.py"},
            "how": (f"the course's Lab 3 kernel (solutions/lab3_wgmma.ipynb) at {SIZE}³, clock64 of thread 0 per "
                    "K step: [after the EMPTY wait in produce (the step's copies issued next, one step ahead), after "
                    "the FULL wait (tiles landed), after "
                    "wgmma.wait_group 0]; the blocks resident on SM "
                    f"{chosen_sm} at the start, cycles from the first stamp"),
            "size": [m, n, k], "summary": summary, "blocks": blocks_out}
    path = out / "lab3_timeline_h100.json"
    path.write_text(json.dumps(data) + "\n")
    print(json.dumps(summary, indent=1))
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/out")))
