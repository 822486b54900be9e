"""Stream-K fix-ups on an H100, three ways, in one run beside cuBLAS: what decides the bits, and what each costs.

    python tools/h100/fixup.py OUT        (run from the repository root; about 1-2 minutes)

The Lab 9 reference kernel (bench/kernels/lab9_streamk.cu) with its fix-up written three ways:

* ``ordered load-add-store`` — the kernel as it is: a split waits for its turn, ``d += __ldcg(ws)``, ``__stcg``;
* ``ordered red`` — CUTLASS's ``ReductionMode::Deterministic``: the first split stores, a middle split waits for its
  turn and adds into the workspace with ``red.global.add.f32``, the final split waits and loads;
* ``red in arrival order`` — ``ReductionMode::Nondeterministic``: every non-final split adds with ``red`` without
  waiting and counts itself in (``red.release.gpu`` on the flag); the final split waits for all of them, loads,
  and zeroes the slot for the next launch.

For each: LAUNCHES launches at each shape (distinct outputs, outputs equal to the ordered load-add-store's), and the
speed beside cuBLAS in the same run (``gpu.gemm_benchmark``). Writes OUT/fixup_h100.json (meta: GPU, driver, date;
``summary``: sentences Lesson 07 prints); copy it to tests/data/. Without a Hopper GPU it compiles the three variants
(so the string edits are checked) and exits 0.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
HERE = str(Path(__file__).resolve())

from helpers import gpu  # noqa: E402
from helpers.course.checks import lab9  # noqa: E402

SHAPES = [(1024, 1024, 16384), (1024, 4352, 8192)]
LAUNCHES = 20

# The reference kernel's fix-up, from the wait to the end of a non-final split (bench/kernels/lab9_streamk.cu).
ORDERED = """        if (order > 0) {  // wait for every earlier split, then add what they left
          if (threadIdx.x == 128) hopper::flag_wait_geq(flag, order, "flags", owner * CLUSTER + rank);
          hopper::named_bar_sync(3, 256);
#pragma unroll
          for (int j = 0; j < BN / 2; ++j) d[j] += __ldcg(ws + j * 128);
        }
        if (kb != steps) {  // not the final split: leave the sum for the next one
#pragma unroll
          for (int j = 0; j < BN / 2; ++j) __stcg(ws + j * 128, d[j]);
          hopper::named_bar_sync(3, 256);  // every consumer thread has stored
          if (threadIdx.x == 128) hopper::flag_store_release(flag, order + 1);
          continue;  // no epilogue: the final split owns it
        }"""

ORDERED_RED = """        if (order > 0) {  // wait for every earlier split
          if (threadIdx.x == 128) hopper::flag_wait_geq(flag, order, "flags", owner * CLUSTER + rank);
          hopper::named_bar_sync(3, 256);
        }
        if (kb != steps) {  // not the final split: the first stores, a middle one adds in the L2 (red)
#pragma unroll
          for (int j = 0; j < BN / 2; ++j) {
            if (order == 0) __stcg(ws + j * 128, d[j]);
            else asm volatile("red.global.add.f32 [%0], %1;" ::"l"(ws + j * 128), "f"(d[j]) : "memory");
          }
          hopper::named_bar_sync(3, 256);
          if (threadIdx.x == 128) hopper::flag_store_release(flag, order + 1);
          continue;
        }
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) d[j] += __ldcg(ws + j * 128);  // the final split (order > 0 here)"""

ARRIVAL_RED = """        if (kb != steps) {  // not the final split: add in the L2 without waiting, then count in
#pragma unroll
          for (int j = 0; j < BN / 2; ++j)
            asm volatile("red.global.add.f32 [%0], %1;" ::"l"(ws + j * 128), "f"(d[j]) : "memory");
          hopper::named_bar_sync(3, 256);
          if (threadIdx.x == 128) hopper::flag_add_release(flag, 1u);
          continue;
        }
        // the final split: every split before it has counted in; take the sum and leave the slot zeroed
        if (threadIdx.x == 128) hopper::flag_wait_geq(flag, order, "flags", owner * CLUSTER + rank);
        hopper::named_bar_sync(3, 256);
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) {
          d[j] += __ldcg(ws + j * 128);
          __stcg(ws + j * 128, 0.0f);
        }"""


def variants() -> dict[str, str]:
    """The three kernel sources."""
    ref = lab9.lab9_reference_source()
    if ORDERED not in ref:
        raise ValueError("bench/kernels/lab9_streamk.cu no longer contains the fix-up this script rewrites")
    return {"ordered load-add-store": ref, "ordered red": ref.replace(ORDERED, ORDERED_RED),
            "red in arrival order": ref.replace(ORDERED, ARRIVAL_RED)}


# ------------------------------------------------------------------------------------------- run in the child
def trial(source: str, shape: tuple[int, int, int], launches: int) -> dict:
    """(Child.) ``launches`` launches at ``shape`` (outputs as uint16 bits), then the speed beside cuBLAS."""
    from ml_dtypes import bfloat16

    kernel = gpu.compile(source, lab9.KERNEL_NAME)
    clusters, ws, flags = lab9._workspace(kernel)
    m, n, k = shape
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((m, k)).astype(bfloat16), rng.standard_normal((n, k)).astype(bfloat16)
    da, db = gpu.to_device(a), gpu.to_device(b)
    dc = gpu.poison((m, n), gpu.bfloat16)
    run = lab9._lab9_launcher(kernel, da, db, dc, ws, flags, clusters)
    outs = []
    for _ in range(launches):
        dc.poison()
        run()
        gpu.wait(timeout=30)
        outs.append(dc.to_host().view(np.uint16).copy())

    def make(a_: object, b_: object, c_: object) -> object:
        return lab9._lab9_launcher(kernel, a_, b_, c_, ws, flags, clusters)

    with gpu.sm_clock() as clk:
        r = gpu.gemm_benchmark(make, m, n, k, out_dtype=gpu.bfloat16, repeat=30)
    return {"clusters": clusters, "outputs": outs, "tflops": r.tflops, "cublas_tflops": r.cublas_tflops,
            "ms": r.kernel_ms, "clock": clk.summary()}


# ------------------------------------------------------------------------------------------- the parent
def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("/tmp/out")
    out.mkdir(parents=True, exist_ok=True)
    srcs = variants()
    kernels = {name: gpu.compile(src, lab9.KERNEL_NAME) for name, src in srcs.items()}
    for name, k in kernels.items():
        print(f"{name}: {k.report.summary()}")
    if gpu.skip_without_hopper(kernels["ordered red"], checked="the three fix-ups compile", timing=True):
        return 0
    info = gpu.device_info()
    meta = {"gpu": info.name, "sm_count": info.sm_count, "driver": ".".join(map(str, info.driver_version)),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "script": "tools/h100/fixup.py",
            "kernel": "bench/kernels/lab9_streamk.cu", "launches": LAUNCHES}
    result: dict = {"meta": meta, "runs": {}}
    summary: list[str] = []
    for shape in SHAPES:
        label = "×".join(map(str, shape))
        reference = None
        for name, src in srcs.items():
            try:
                r = gpu.run_isolated(f"{HERE}:trial", src, shape, LAUNCHES, timeout=300)
            except gpu.GpuError as exc:
                result["runs"][f"{name} @ {label}"] = {"error": f"{type(exc).__name__}: {exc}"}
                summary.append(f"{label}, {name}: {type(exc).__name__}: {exc}")
                continue
            outs = r.pop("outputs")
            if reference is None and name == "ordered load-add-store":
                reference = outs[0]
            distinct = len({o.tobytes() for o in outs})
            same = None if reference is None else sum(np.array_equal(o, reference) for o in outs)
            r.update(distinct=distinct, equal_to_ordered_load_add_store=same)
            result["runs"][f"{name} @ {label}"] = r
            vs = "" if same is None else f", {same} of {LAUNCHES} bit-identical to the ordered load-add-store"
            summary.append(f"{label}, {name}: {r['tflops']:.0f} TFLOP/s (cuBLAS {r['cublas_tflops']:.0f} in the same "
                           f"run); {distinct} distinct output(s) in {LAUNCHES} launches{vs}")
    result["summary"] = summary
    (out / "fixup_h100.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
