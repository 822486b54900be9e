"""Where the final kernel's time goes, shape by shape: the kernel ``gpu.matmul`` chooses (Lab 7's or Lab 9's, at its
tile width), stamped with ``%globaltimer`` at the turning points of each block's work, once per shape on an H100.

    python tools/h100/timeline.py OUT        (run from the repository root, or: bash tools/h100/run.sh timeline)

Lane 0 of the first consumer warp of every block stamps (helpers/include/hopper_trace.cuh): when the block starts
(after its barriers are set up), when each piece's first stage is full, when the piece's wgmmas have all completed,
for a Stream-K split when its turn came (the flag), when it had added the workspace and when it handed its sum on,
after each TMA store it issued, and when its last store was complete. From those, per block: the prologue (start
to first full stage), the mainloop (first full stage to the last wgmma, per piece, and per K step for whole
pairs), the fix-up, the epilogue and the gaps between pieces; per launch: the stamped span (first start to last
done) beside the unstamped kernel's time from CUDA events (median of 20 back-to-back launches), whose difference is
the launch and the blocks' start-up and exit.

Writes OUT/timeline_h100.json and OUT/timeline_h100.md. Without a Hopper GPU it runs one small stamped launch of each
kernel on the PTX executor and prints its stretches (the executor's nanoseconds are not the H100's).
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

from helpers import gpu  # noqa: E402
from helpers.gpu import gemm  # noqa: E402
from helpers.gpu.executor.trace import STAMP_NAMES, STAMP_RECORD, add_stamps, stamp_buffer  # noqa: E402
from helpers.gpu.timing import time_kernel  # noqa: E402

SHAPES = [(512, 1024, 4096), (512, 4096, 4096), (2048, 1024, 4096), (512, 4096, 14336), (2048, 2048, 2048),
          (1024, 1024, 16384), (1024, 4352, 8192), (4096, 4096, 4096)]
WARPS = 12  # 384 threads
OBSERVER = 4  # the first consumer warp: its lane 0 is consumer 0's thread 0 (thread 128)

#: where the stamps go in both kernels: (anchor line, stamp above, stamp below); Lab 9's split pieces add FIX
STAMPS = [
    ('#include "hopper.cuh"', "", '#include "hopper_trace.cuh"'),
    ("hopper::cluster_sync_after_init<", "", "HOPPER_TRACE(trace);"),
    ("HOPPER_WAIT(full, s, (it / STAGES) & 1);", "", "if (it == first_it) HOPPER_STAMP(FULL_DONE, 0);"),
    ("hopper::wgmma_wait<0>();", "", "HOPPER_STAMP(WAIT_GROUP_DONE, 0);"),
    ("hopper::tma_store_2d(&tmap_c, buf, n0 + sub * SUB, m0 + 64 *", "", "HOPPER_STAMP(EPILOGUE, sub);"),
    ("if (tid == 0) hopper::tma_store_wait<0>();", "", "HOPPER_STAMP(DONE, 0);"),
]
FIX = [
    ("if (threadIdx.x == 128) hopper::flag_wait_geq(flag, order", "", "HOPPER_STAMP(EMPTY_DONE, 0);"),
    ("for (int j = 0; j < BN / 2; ++j) d[j] += __ldcg(ws + j * 128);", "", "HOPPER_STAMP(WAIT_EMPTY, 0);"),
    ("if (threadIdx.x == 128) hopper::flag_store_release(flag, order + 1);", "", "HOPPER_STAMP(RELEASE, 0);"),
]
#: the same with the partial sums handed on in parallel (LAB9_PARALLEL_FIXUP=1)
FIX_PARALLEL = [
    ("if (threadIdx.x == 128) hopper::flag_wait_geq(flag, order", "", "HOPPER_STAMP(EMPTY_DONE, 0);"),
    ("if (threadIdx.x == 128) *flag = 0;", "HOPPER_STAMP(WAIT_EMPTY, 0);", ""),
    ("if (threadIdx.x == 128) hopper::flag_add_release(flag, 1);", "", "HOPPER_STAMP(RELEASE, 0);"),
]
PARALLEL = "-DLAB9_PARALLEL_FIXUP=1"
#: the K loop's header, the producer's and then the consumers': ``first_it`` (the piece's first use of the ring) goes
#: above the consumers', so that the first full stage of each piece is stamped
K_LOOP = {"lab7": "for (int k = 0; k < steps; ++k, ++it) {", "lab9": "for (int k = ka; k < kb; ++k, ++it) {"}
SIGNATURE = {"lab7": ("const __grid_constant__ CUtensorMap tmap_c, int M, int N, int K) {",
                      "const __grid_constant__ CUtensorMap tmap_c, int M, int N, int K, unsigned long long* trace) {"),
             "lab9": ("unsigned* __restrict__ flags) {",
                      "unsigned* __restrict__ flags, unsigned long long* trace) {")}
KIND = {v: k for k, v in STAMP_NAMES.items()}
#: the fix-up's stamps and the stretch each one ends: the wait for the earlier splits, adding their partial sums,
#: storing this split's (and handing it on)
FIXUP_PHASE = {"EMPTY_DONE": "fixup_wait", "WAIT_EMPTY": "fixup_add", "RELEASE": "fixup_store"}


def one_fixup(source: str, parallel: bool) -> str:
    """Lab 9's source with only the fix-up that the build compiles (``#if LAB9_PARALLEL_FIXUP`` … ``#else`` …
    ``#endif``), so that each stamp's line occurs once."""
    head, rest = source.split("#if LAB9_PARALLEL_FIXUP\n", 1)
    first, rest = rest.split("#else\n", 1)
    second, tail = rest.split("#endif\n", 1)
    return head + (first if parallel else second) + tail


def stamped_source(style: str, options: tuple[str, ...] = ()) -> str:
    """The course's final kernel of this style (Lab 7's or Lab 9's, built with `options`) with the stamps and a
    last ``trace`` argument."""
    file, _ = gemm.KERNELS[style]
    source = (gemm.KERNELS_DIR / file).read_text()
    parallel = PARALLEL in options
    if style == "lab9":
        source = one_fixup(source, parallel)
    loop = K_LOOP[style]
    if source.count(loop) != 2:
        raise ValueError(f"cannot place the stamps: {loop!r} occurs {source.count(loop)} times (twice expected)")
    at = source.index(loop, source.index(loop) + 1)
    source = source[:at] + "const int first_it = it;\n      " + source[at:]
    fix = (FIX_PARALLEL if parallel else FIX) if style == "lab9" else []
    return add_stamps(source, STAMPS + fix, [SIGNATURE[style]])


def _launch(kernel: gpu.Kernel, choice: gemm.Choice, a, b, c, trace):  # noqa: ANN001, ANN202
    """The launch ``gemm.launcher`` makes for this choice, with the stamp buffer as the last argument; also the
    clusters launched and the Stream-K workspace and flags (kept alive with the launch)."""
    (m, k), n = a.shape, b.shape[0]
    smem = gemm.smem_bytes(choice.bn)
    active = gemm.EMULATED_CLUSTERS if gpu.executor_active() else gpu.max_active_clusters(kernel, 384, smem, 2)
    maps = (gemm.tensor_map(a, (128, 64)), gemm.tensor_map(b, (choice.bn // 2, 64)), gemm.tensor_map(c, (64, 64)))
    dims = (np.int32(m), np.int32(n), np.int32(k))
    count = gemm.pairs(m, n, choice.bn)
    if choice.kernel == "lab7":
        clusters = max(1, min(active, count))
        launch = gpu.prepare(kernel, (2 * clusters, 1, 1), 384, smem, *maps, *dims, trace, cluster=(2, 1, 1))
        return launch, clusters, ()
    if choice.streamk:
        clusters = gemm.streamk_clusters(count, math.ceil(k / 64), active)
    else:
        clusters = max(1, math.ceil(count / math.ceil(count / active)))
    ws = gpu.zeros((active * 2 * 128 * choice.bn,), np.float32)
    flags = gpu.zeros((active * 2,), np.uint32)
    launch = gpu.prepare(kernel, (2 * clusters, 1, 1), 384, smem, *maps, *dims, ws, flags, trace, cluster=(2, 1, 1))
    return launch, clusters, (ws, flags)


def stretches(buffer: np.ndarray, blocks: int) -> list[list[tuple[float, str]]]:
    """Each block's stamps from the observing warp, in order: (µs from the launch's first start, kind)."""
    recs = buffer.view(STAMP_RECORD).reshape(blocks, WARPS, -1)[:, OBSERVER]
    used = recs["kind"] != 0
    g0 = int(recs["gtime"][used & (recs["kind"] == STAMP_NAMES["START"])].astype(np.int64).min())
    out = []
    for b in range(blocks):
        r = recs[b][used[b]]
        r = r[np.argsort(r["seq"], kind="stable")]
        out.append([(((int(x["gtime"]) - g0) & 0xFFFFFFFF) / 1000.0, KIND[int(x["kind"])]) for x in r])
    return out


def phases(block: list[tuple[float, str]], steps: int) -> dict[str, float]:
    """One block's time by phase (µs): prologue, mainloop, fix-up, epilogue, gaps between pieces, the last store's
    wait; the number of pieces and whole-pair mainloops' µs per K step."""
    p = {"prologue": 0.0, "mainloop": 0.0, "fixup_wait": 0.0, "fixup_add": 0.0, "fixup_store": 0.0, "epilogue": 0.0,
         "between": 0.0, "last_store": 0.0, "pieces": 0}
    whole: list[float] = []
    last, state, start, piece_fix = 0.0, "start", 0.0, False
    for t, kind in block:
        if kind == "START":
            start = last = t
        elif kind == "FULL_DONE":
            p["prologue" if state == "start" else "between"] += t - last
            p["pieces"] += 1
            piece_fix = False
            state, last = "main", t
        elif kind == "WAIT_GROUP_DONE":
            p["mainloop"] += t - last
            ml = t - last
            state, last = "after", t
        elif kind in FIXUP_PHASE:
            p[FIXUP_PHASE[kind]] += t - last
            piece_fix = True
            last = t
        elif kind == "EPILOGUE":
            p["epilogue"] += t - last
            last = t
            if not piece_fix and state == "after":
                whole.append(ml)
            state = "epi"
        elif kind == "DONE":
            p["last_store"] += t - last
            last = t
    p["span"] = last - start
    p["mainloop_ns_per_step"] = 1000 * statistics.median(whole) / steps if whole else None
    return p


def measure(shape: tuple[int, int, int], choice: gemm.Choice | None = None) -> dict:
    """One shape: the chosen kernel (or ``choice``) timed unstamped, then one stamped launch read back by phase."""
    m, n, k = shape
    choice = choice or gemm.choose(m, n, k)
    options = gemm.kernel_options(choice.kernel, choice.bn)
    kernel = gpu.compile(stamped_source(choice.kernel, options), gemm.KERNELS[choice.kernel][1],
                         filename="timeline.cu", options=options)
    rng = np.random.default_rng(0)
    a = gpu.to_device(rng.standard_normal((m, k), np.float32).astype(gpu.bfloat16))
    b = gpu.to_device(rng.standard_normal((n, k), np.float32).astype(gpu.bfloat16))
    c = gpu.zeros((m, n), gpu.bfloat16)
    off = np.uint64(0)
    plain, clusters, keep = _launch(kernel, choice, a, b, c, off)
    blocks = 2 * clusters
    row: dict = {"shape": [m, n, k], "kernel": choice.name, "blocks": blocks}
    if gpu.hopper_available():
        row["event_us"] = round(time_kernel([plain], warmup=5, repeat=20).median_ms * 1000, 2)
    buf = gpu.zeros(stamp_buffer(blocks, WARPS).shape, np.uint64)
    traced, _, keep_traced = _launch(kernel, choice, a, b, c, buf)
    for _ in range(3):  # the last of three launches (each overwrites the same records): warm caches and TLBs
        traced()
    gpu.wait()
    del keep, keep_traced
    per_block = [phases(s, -(-k // 64)) for s in stretches(buf.to_host(), blocks)]
    keys = ["span", "prologue", "mainloop", "fixup_wait", "fixup_add", "fixup_store", "epilogue", "between",
            "last_store"]
    last = max(per_block, key=lambda p: p["span"])
    row["median_block"] = {key: round(statistics.median(p[key] for p in per_block), 2) for key in keys}
    row["last_block"] = {key: round(last[key], 2) for key in keys} | {"pieces": last["pieces"]}
    per_step = [p["mainloop_ns_per_step"] for p in per_block if p["mainloop_ns_per_step"]]
    row["mainloop_ns_per_k_step"] = round(statistics.median(per_step), 1) if per_step else None
    row["span_us"] = round(max(p["span"] for p in per_block), 2)
    if "event_us" in row:
        row["outside_us"] = round(row["event_us"] - row["span_us"], 2)
    return row


def render(result: dict) -> str:
    lines = [
        "# Where the final kernel's time goes (one stamped launch per shape)", "",
        f"- GPU: {result['gpu']}, driver CUDA {result['driver']}, NVRTC {result['nvrtc']}; {result['date']}",
        f"- SM clock during the runs: {result['clock']}",
        "- method: tools/h100/timeline.py: the kernel gpu.matmul chooses, stamped (%globaltimer, lane 0 of the first "
        "consumer warp of every block) at its turning points, one launch; the unstamped kernel's time from CUDA "
        "events (median of 20); events − span: the launch, the blocks' start-up and exit", "",
        "| shape | kernel | blocks | events µs | span µs | events − span µs | prologue | mainloop | fix-up: wait / "
        "add / store | epilogue | between pieces | last store | pieces (last block) | ns per K step (whole pairs) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lb = r["last_block"]
        per_step = "—" if r["mainloop_ns_per_k_step"] is None else f"{r['mainloop_ns_per_k_step']:.0f}"
        lines.append(
            f"| {'×'.join(map(str, r['shape']))} | {r['kernel']} | {r['blocks']} | {r.get('event_us', '—')} | "
            f"{r['span_us']} | {r.get('outside_us', '—')} | {lb['prologue']} | {lb['mainloop']} | "
            f"{lb['fixup_wait']} / {lb['fixup_add']} / {lb['fixup_store']} | "
            f"{lb['epilogue']} | {lb['between']} | {lb['last_store']} | {lb['pieces']} | {per_step} |")
    lines += ["", "Phases are the last block to finish (µs); the JSON also has each phase's median over the blocks. "
              "The span is one launch's, the events' time the median of 20 others, so their difference can fall "
              "below 0 where the launch and exit cost little."]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else None
    if not gpu.hopper_available():
        # Lab 7's kernel, then Lab 9's narrow one with a pair split between the two emulated clusters
        for shape, choice in (((264, 520, 192), gemm.Choice("lab7", gemm.WIDE, False)),
                              ((520, 104, 512), gemm.Choice("lab9", gemm.NARROW, True))):
            print(json.dumps(measure(shape, choice)))
        return 0
    from helpers.gpu.clocks import sm_clock

    info = gpu.device_info()
    result = {"gpu": info.name, "driver": ".".join(map(str, info.driver_version)),
              "nvrtc": ".".join(map(str, gpu.nvrtc_version() or ())),
              "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "rows": []}
    with sm_clock() as clock:
        for shape in SHAPES:
            row = measure(shape)
            print(json.dumps(row), flush=True)
            result["rows"].append(row)
    result["clock"] = clock.summary()
    if out:
        (out / "timeline_h100.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "timeline_h100.md").write_text(render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
