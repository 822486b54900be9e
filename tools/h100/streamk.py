"""Lab 9 on an H100: the grader on the solution kernel, then the fix-up experiments the lesson quotes.

    python tools/h100/streamk.py --out OUT        (run from the repository root; about 1-2 minutes)

1. ``lab9.check_streamk_kernel`` on the solution kernel: random shapes against fp64, three more launches
   bit-identical, flags back to 0, then Lab 9 beside Lab 7 and cuBLAS on the two wave-quantized shapes.
2. Determinism: 20 launches of the reference kernel at 1024×1024×16384 (4-5 splits per pair): distinct outputs.
3. Wrong fix-ups at run time, each 20 launches at 1024×1024×16384 against the reference bits: relaxed flag store and
   relaxed (volatile) wait; waiting for flag ≥ 1 instead of the split's order; no flag reset (two launches).
4. Residency: twice as many clusters as fit at once, numbered as in the kernel (waits go to lower clusters, which
   start first) and numbered backwards (the clusters that start first wait for ones that cannot start): the second
   should end in the bounded wait's deadlock sentence naming the flag.
5. A message-passing litmus test (66 writer/reader block pairs, 2000 rounds): data then flag, read back after the
   flag, with release/acquire and with a relaxed flag (plain and L2-only data loads): stale words seen.

Writes OUT/streamk_h100.json (meta: GPU, driver, date; every figure; ``summary``: sentences for the lesson) and
OUT/grader.txt. Without a Hopper GPU it compiles every variant (so the string edits are checked) and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
HERE = str(Path(__file__).resolve())

from helpers import gpu  # noqa: E402
from helpers.course import grading, labgen  # noqa: E402
from helpers.course.checks import lab9  # noqa: E402

SHAPE = (1024, 1024, 16384)
LAUNCHES = 20
WAIT = 'hopper::flag_wait_geq(flag, order, "flags", owner * CLUSTER + rank)'
RELEASE = "hopper::flag_store_release(flag, order + 1)"
CLUSTER_ID = "const int cluster_id = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;"


def _swap(src: str, old: str, new: str) -> str:
    if old not in src:
        raise ValueError(f"the reference kernel no longer contains {old!r}")
    return src.replace(old, new)


def variants() -> dict[str, str]:
    """Kernel sources: the reference and the wrong fix-ups / renumbering the experiments launch."""
    ref = lab9.lab9_reference_source()
    spin = ("{ const long long t0 = clock64(); while (*(volatile unsigned*)flag < order && clock64() - t0 < "
            "4000000000LL) {} }")
    return {
        "reference": ref,
        "relaxed flag": _swap(_swap(ref, RELEASE, "*(volatile unsigned*)flag = order + 1"),
                              f"if (threadIdx.x == 128) {WAIT};", f"if (threadIdx.x == 128) {spin}"),
        "wait for flag >= 1": _swap(ref, WAIT, 'hopper::flag_wait_geq(flag, 1u, "flags", owner * CLUSTER + rank)'),
        "no flag reset": _swap(ref, "        if (threadIdx.x == 128) *flag = 0;", ""),
        "clusters numbered backwards": _swap(ref, CLUSTER_ID, "const int clusters = gridDim.x / CLUSTER, cluster_id "
                                             "= clusters - 1 - (int)(blockIdx.x / CLUSTER);"),
    }


LITMUS = r"""
#include "hopper.cuh"
// Block 2i writes `words` words of round r then sets flag i to r; block 2i+1 waits for flag i >= r, then reads the
// words and counts those still older than r. mode 0: release/acquire; 1: relaxed flag, plain (L1-cached) data loads;
// 2: relaxed flag, L2-only data loads (__ldcg).
extern "C" __global__ void mp_litmus(unsigned* data, unsigned* flags, unsigned* stale, int rounds, int words,
                                     int mode) {
  const int pair = blockIdx.x / 2;
  unsigned* d = data + (long long)pair * words;
  unsigned* f = flags + pair;
  if (blockIdx.x % 2 == 0) {
    for (int r = 1; r <= rounds; ++r) {
      for (int w = threadIdx.x; w < words; w += blockDim.x) d[w] = r;
      __syncthreads();
      if (threadIdx.x == 0) {
        if (mode == 0) hopper::flag_store_release(f, r);
        else *(volatile unsigned*)f = r;
      }
    }
    return;
  }
  unsigned bad = 0;
  for (int r = 1; r <= rounds; ++r) {
    if (threadIdx.x == 0) {
      if (mode == 0) {
        hopper::flag_wait_geq(f, r, "flags", pair);
      } else {
        const long long t0 = clock64();
        while (*(volatile unsigned*)f < (unsigned)r && clock64() - t0 < 2000000000LL) {}
      }
    }
    __syncthreads();
    for (int w = threadIdx.x; w < words; w += blockDim.x) bad += (mode == 2 ? __ldcg(d + w) : d[w]) < (unsigned)r;
    __syncthreads();
  }
  atomicAdd(stale, bad);
}
"""


# ------------------------------------------------------------------------------------------- run in children
def _operands(seed: int = 7):
    from ml_dtypes import bfloat16

    rng = np.random.default_rng(seed)
    m, n, k = SHAPE
    return rng.standard_normal((m, k)).astype(bfloat16), rng.standard_normal((n, k)).astype(bfloat16)


def launches(source: str, launches: int, clusters_factor: int = 1) -> dict:
    """(Child.) ``launches`` launches at SHAPE on ``clusters_factor`` × the co-resident clusters: every output's
    bits (as uint16) and the flags after each launch."""
    kernel = gpu.compile(source, lab9.KERNEL_NAME)
    resident = gpu.max_active_clusters(kernel, 384, lab9.SMEM_BYTES, 2)
    clusters = resident * clusters_factor
    ws = gpu.zeros((clusters * 2 * 128 * 256,), np.float32)
    flags = gpu.zeros((clusters * 2,), np.uint32)
    a, b = _operands()
    da, db = gpu.to_device(a), gpu.to_device(b)
    dc = gpu.poison((a.shape[0], b.shape[0]), gpu.bfloat16)
    run = lab9._lab9_launcher(kernel, da, db, dc, ws, flags, clusters)
    outs, left = [], []
    for _ in range(launches):
        dc.poison()
        run()
        gpu.wait(timeout=30)
        outs.append(dc.to_host().view(np.uint16).copy())
        left.append(int(np.count_nonzero(flags.to_host())))
    return {"resident": resident, "clusters": clusters, "outputs": outs, "flags_left": left}


def litmus(mode: int, rounds: int = 2000, words: int = 1024, pairs: int = 66) -> dict:
    """(Child.) The message-passing litmus test in one mode: stale words seen in all rounds of all pairs."""
    k = gpu.compile(LITMUS, "mp_litmus")
    data = gpu.zeros((pairs * words,), np.uint32)
    flags = gpu.zeros((pairs,), np.uint32)
    stale = gpu.zeros((1,), np.uint32)
    t0 = time.time()
    gpu.launch(k, 2 * pairs, 256, 0, data, flags, stale, np.int32(rounds), np.int32(words), np.int32(mode),
               timeout=60)
    return {"stale_words": int(stale.to_host()[0]), "words_read": rounds * words * pairs,
            "seconds": round(time.time() - t0, 3)}


# ------------------------------------------------------------------------------------------- the parent
def _isolated(name: str, *args, timeout: float = 120, **kwargs):
    """Run a function of this file in a child; a fault or deadlock comes back as {'error': sentence}."""
    try:
        return gpu.run_isolated(f"{HERE}:{name}", *args, timeout=timeout, **kwargs)
    except gpu.GpuError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _distinct(outputs: list[np.ndarray]) -> int:
    return len({o.tobytes() for o in outputs})


def _differ(outputs: list[np.ndarray], ref: np.ndarray) -> int:
    return sum(not np.array_equal(o, ref) for o in outputs)


def _max_rel_error(bits: np.ndarray, ref64: np.ndarray) -> float:
    """Largest |error| / (|ref| + sqrt(K)) over the output; inf when an element is NaN (never written)."""
    from ml_dtypes import bfloat16

    got = bits.view(bfloat16).astype(np.float64)
    if np.isnan(got).any():
        return float("inf")
    return float(np.max(np.abs(got - ref64) / (np.abs(ref64) + math.sqrt(SHAPE[2]))))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("/tmp/out"))
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    srcs = variants()
    kernels = {name: gpu.compile(src, lab9.KERNEL_NAME) for name, src in srcs.items()}
    for name, k in kernels.items():
        print(f"{name}: {k.report.summary()}")
    gpu.compile(LITMUS, "mp_litmus")
    if gpu.skip_without_hopper(kernels["reference"], checked="every Lab 9 variant and the litmus kernel compile"):
        return 0
    info = gpu.device_info()
    meta = {"gpu": info.name, "sm_count": info.sm_count, "driver": ".".join(map(str, info.driver_version)),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "script": "tools/h100/streamk.py",
            "shape": SHAPE, "launches": LAUNCHES}
    result: dict = {"meta": meta}
    summary: list[str] = []

    # 1 · the grader on the solution
    sol = labgen.solution_namespace(ROOT / "solutions" / "lab9_streamk.ipynb")["LAB9_SRC"]
    wrappers = labgen.solution_namespace(ROOT / "solutions" / "lab1_tma.ipynb")["TMA_LOAD"] + "".join(
        labgen.solution_namespace(ROOT / "solutions" / "lab2_mbarrier.ipynb")[v] for v in ("MBAR_INIT_ARRIVE",
                                                                                             "MBAR_TX_WAIT"))
    buf = io.StringIO()
    t0 = time.time()
    with contextlib.redirect_stdout(buf):
        try:
            lab9.check_streamk_kernel(sol, benchmark=True, wrappers=wrappers)  # the course's Lab 7 stands in
            passed = True
        except grading.CheckFailed:
            passed = False
    (args.out / "grader.txt").write_text(buf.getvalue())
    print(buf.getvalue())
    result["grader"] = {"passed": passed, "seconds": round(time.time() - t0, 1), "lines": buf.getvalue().splitlines()}
    summary.append(f"the lab's check on the solution kernel: {'passed' if passed else 'FAILED'} (grader.txt)")

    # 2 · determinism of the reference
    a, b = _operands()
    ref64 = a.astype(np.float64) @ b.astype(np.float64).T
    r = _isolated("launches", srcs["reference"], LAUNCHES)
    result["reference"] = {k: v for k, v in r.items() if k != "outputs"}
    if "error" in r:
        summary.append(f"reference kernel: {r['error']}")
        ref = None
    else:
        ref = r["outputs"][0]
        result["reference"].update(distinct=_distinct(r["outputs"]), max_rel_error=_max_rel_error(ref, ref64))
        summary.append(f"ordered fix-up at {SHAPE[0]}×{SHAPE[1]}×{SHAPE[2]} ({r['clusters']} clusters): "
                       f"{_distinct(r['outputs'])} distinct output(s) in {LAUNCHES} launches")

    # 3 · wrong fix-ups
    for name in ("relaxed flag", "wait for flag >= 1", "no flag reset"):
        r = _isolated("launches", srcs[name], LAUNCHES)
        entry = {k: v for k, v in r.items() if k != "outputs"}
        if "error" not in r and ref is not None:
            entry.update(distinct=_distinct(r["outputs"]), differ_from_ordered=_differ(r["outputs"], ref),
                         max_rel_error=max(_max_rel_error(o, ref64) for o in r["outputs"]),
                         first_launch_equal=bool(np.array_equal(r["outputs"][0], ref)))
            summary.append(f"{name}: {entry['differ_from_ordered']} of {LAUNCHES} launches differ from the ordered "
                           f"fix-up's bits ({entry['distinct']} distinct; largest relative error "
                           f"{entry['max_rel_error']:.2g}; flags left set after the launches: {r['flags_left'][:3]}…)")
        else:
            summary.append(f"{name}: {r.get('error', 'no reference to compare with')}")
        result[name] = entry

    # 4 · residency
    for name in ("reference", "clusters numbered backwards"):
        for factor in (1, 2):
            r = _isolated("launches", srcs[name], 1, factor, timeout=90)
            key = f"{name}, {factor}× the co-resident clusters"
            entry = {k: v for k, v in r.items() if k != "outputs"}
            if "error" not in r:
                entry["max_rel_error"] = _max_rel_error(r["outputs"][0], ref64)
                if factor == 1 and ref is not None:
                    entry["equal_to_ordered"] = bool(np.array_equal(r["outputs"][0], ref))
                what = (f"completed on {r['clusters']} clusters ({r['resident']} fit at once), largest relative error "
                        f"{entry['max_rel_error']:.2g}")
                if "equal_to_ordered" in entry:
                    same = "identical to" if entry["equal_to_ordered"] else "DIFFERENT from"
                    what += f", bits {same} the reference run"
            else:
                what = r["error"]
            result[key] = entry
            summary.append(f"{key}: {what}")

    # 5 · litmus
    for mode, name in ((0, "release/acquire"), (1, "relaxed flag, plain loads"), (2, "relaxed flag, __ldcg loads")):
        r = _isolated("litmus", mode, timeout=90)
        result[f"litmus: {name}"] = r
        if "error" in r:
            summary.append(f"message passing, {name}: {r['error']}")
        else:
            summary.append(f"message passing, {name}: {r['stale_words']} stale of {r['words_read']} words read")

    result["summary"] = summary
    (args.out / "streamk_h100.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
