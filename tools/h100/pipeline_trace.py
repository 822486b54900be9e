"""Capture one real timeline of Lab 4's 128×128 ring kernel on an H100, through HOPPER_STAMP.

    python tools/h100/pipeline_trace.py          # one H100, from the repository root; results in $OUT
    python tools/h100/pipeline_trace.py --dry    # without a GPU: the same steps on the course's emulator

The kernel is bench/kernels/lab4_128x128.cu with stamps (helpers.gpu.executor.trace.stamped_lab4: each warp's waits on
EMPTY and FULL, the copies, the wgmmas, wait_group, the releases, the epilogue; lane 0 of each warp writes %clock64
and %globaltimer into its own ring). It runs at M = N = 1024, K = 4096 (64 blocks, one per SM, 64 K steps): first
checked against cuBLAS (C poisoned), then the stamped kernel, the same kernel with a null trace buffer and the plain
kernel are timed (the cost of stamping), then one launch's stamps are kept. Writes:

* $OUT/lab4_trace_h100.json — the trace (helpers.gpu.executor.trace.Trace JSON) of the first BLOCKS_KEPT blocks, warps 0
  (producer), 4 and 8 (the first warp of each consumer warpgroup), with GPU, driver, date, SM clock, timings and a
  summary over every block; commit it as tests/data/lab4_trace_h100.json (tests/ptx/test_trace.py replays it,
  helpers.course.widgets.trace draws it);
* $OUT/trace_summary.txt — the same summary in words.

GPU time: well under a minute.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DRY = "--dry" in sys.argv
os.environ["HELPERS_EXECUTOR"] = "force" if DRY else "off"

from helpers import gpu  # noqa: E402
from helpers.gpu.executor import trace as T  # noqa: E402

M, N, K = (256, 256, 512) if DRY else (1024, 1024, 4096)
RING4 = 4 * 32 * 1024 + 1024
BLOCKS_KEPT = 2
WARPS_KEPT = (0, 4, 8)


def _summary(tr: T.Trace) -> dict:
    """Medians over every block: cycles from a copy's stamp to the first consumer through its FULL wait, per K step
    (the producer's copy stamps), and the share of the consumer warps' time spent waiting on FULL and in
    wait_group."""
    flight, step, wait_full, wait_group, total = [], [], 0, 0, 0
    for cta in tr.blocks():
        blk = tr.block(cta)
        copies = [e.time for e in blk.of("tma_issue", 0)]
        step += list(np.diff(copies))
        through = [e for e in blk.events if e.kind == "wait_done" and e.barrier.startswith("full")]
        for e in blk.of("tma_issue", 0):
            t = next((x.time for x in through if x.stage == e.stage and x.time >= e.time), None)
            if t is not None:
                flight.append(t - e.time)
        for w in range(4, 12):
            ev = blk.of("wait", w) + blk.of("wait_done", w)
            ev.sort(key=lambda x: x.time)
            wait_full += sum(b.time - a.time for a, b in zip(ev[::2], ev[1::2], strict=False))
            g = sorted(blk.of("wait_group", w) + blk.of("wait_group_done", w), key=lambda x: x.time)
            wait_group += sum(b.time - a.time for a, b in zip(g[::2], g[1::2], strict=False))
            mine = [e.time for e in blk.events if e.warp == w]
            total += max(mine) - min(mine) if mine else 0
    return {"median_cycles_copy_to_first_consumer": float(np.median(flight)) if flight else None,
            "median_cycles_per_k_step": float(np.median(step)) if step else None,
            "consumer_share_waiting_on_full": wait_full / max(total, 1),
            "consumer_share_in_wait_group": wait_group / max(total, 1)}


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    stamped = gpu.compile(T.stamped_lab4(), "lab4_gemm_128x128")
    plain = gpu.compile(T.LAB4_KERNEL.read_text(), "lab4_gemm_128x128")
    print(f"stamped: {stamped.report.summary()}\nplain:   {plain.report.summary()}")
    if not DRY and gpu.skip_without_hopper(stamped, checked="the stamped kernel compiles"):
        return 0
    grid = (N // 128, M // 128)
    blocks = grid[0] * grid[1]
    a, b = gpu.random((M, K), gpu.bfloat16, seed=1), gpu.random((N, K), gpu.bfloat16, seed=2)
    c = gpu.poison((M, N), np.float32)
    buf = gpu.zeros(T.stamp_buffer(blocks, 12).shape, np.uint64)
    maps = (gpu.tensor_map_2d(a, 128, 64), gpu.tensor_map_2d(b, 128, 64), c, np.int32(M), np.int32(N), np.int32(K))
    gpu.launch(stamped, grid, 384, RING4, *maps, buf)
    ref = a.to_host().astype(np.float64) @ b.to_host().astype(np.float64).T
    gpu.check_gemm(c.to_host(), ref, K)  # raises (and the job fails) when the stamped kernel is wrong
    timing: dict = {}
    if not DRY:
        runs = {"stamped": gpu.prepare(stamped, grid, 384, RING4, *maps, buf),
                "stamped, null buffer": gpu.prepare(stamped, grid, 384, RING4, *maps, np.uint64(0)),
                "plain": gpu.prepare(plain, grid, 384, RING4, *maps)}
        with gpu.sm_clock() as clk:
            for name, run in runs.items():
                timing[name] = gpu.time_kernel(run, warmup=5, repeat=30).median_ms
        timing["sm_clock_mhz"] = clk.median
    buf = gpu.zeros(T.stamp_buffer(blocks, 12).shape, np.uint64)
    gpu.launch(stamped, grid, 384, RING4, *maps, buf)  # the launch that is kept
    info = gpu.device_info()
    meta = {"kernel": "lab4_gemm_128x128", "gpu": info.name if info else "emulator",
            "driver": ".".join(map(str, info.driver_version)) if info else "",
            "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}", "script": "tools/h100/pipeline_trace.py",
            "shape": [M, N, K], "correct": True, "timing_ms": timing}
    full = T.from_stamps(buf.to_host(), grid, 384, meta=meta, source="emulator" if DRY else "h100")
    meta["summary"] = _summary(full)
    keep = full.blocks()[:BLOCKS_KEPT]
    kept = T.Trace([e for e in full.events if tuple(e.cta) in keep and e.warp in WARPS_KEPT], full.source,
                   full.unit, {**meta, "blocks_kept": [list(x) for x in keep], "warps_kept": list(WARPS_KEPT)})
    path = out / "lab4_trace_h100.json"
    path.write_text(json.dumps(kept.to_json()) + "\n")
    lines = [f"{meta['gpu']} (driver {meta['driver']}), {meta['date']}: Lab 4 128x128 ring at {M}x{N}x{K}, "
             f"{blocks} blocks", f"timings (ms, median of 30): {json.dumps(timing)}",
             f"summary over every block: {json.dumps(meta['summary'])}",
             f"kept {len(kept)} events of blocks {keep}, warps {WARPS_KEPT} -> {path} ({path.stat().st_size} bytes)"]
    (out / "trace_summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(os.environ.get("OUT", "/tmp/out"))))
