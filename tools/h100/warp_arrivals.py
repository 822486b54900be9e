"""How the H100 counts one warp's mbarrier.arrive: lanes of a warp arriving at once on one barrier (of their own
block, or of the other block of a cluster), against the arrivals the barrier's phase still awaits.

    python tools/h100/warp_arrivals.py OUT    (from the repository root, or: bash tools/h100/run.sh warp_arrivals)

Each case launches one block; ``lanes`` threads each arrive ``reps`` times (a plain arrive, an arrive with an
arrival count, or arrive.expect_tx) on a barrier initialised with ``count``, then thread 0 reads test_wait.parity for
parity 0 and 1. A case that traps takes its process's context with it, so each runs in its own process. Measured on
2026-11-26: a warp's arrive counts as one arrival of the sum of its lanes' arrivals, and when that outnumbers what
the phase awaits the kernel stops (CUDA_ERROR_LAUNCH_FAILED): 3 lanes on a count of 2, 2 lanes arriving 2 each on a
count of 2, 3 lanes of arrive.expect_tx, 3 lanes arriving on the other block's barrier; as many as awaited complete
the phase; one lane arriving 32 times completes 16 phases of a count of 2. Writes OUT/mbarrier_warp_arrivals_h100.json,
which tests/emulator/test_warp_arrivals.py replays on the PTX executor.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: what both probes' reporting thread writes: test_wait.parity for parity 0 and 1 of the barrier at shared address
#: `a`, and 7 to say it got there
REPORT = r'''
__device__ __forceinline__ void report(unsigned a, unsigned* out) {
  unsigned p0, p1;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
               : "=r"(p0) : "r"(a) : "memory");
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], 1; selp.u32 %0, 1, 0, p; }"
               : "=r"(p1) : "r"(a) : "memory");
  out[0] = p0;
  out[1] = p1;
  out[2] = 7;
}'''

SOURCE = REPORT + r'''
extern "C" __global__ void over_arrive(int lanes, int count, int reps, unsigned* out, int mode, int each) {
  __shared__ alignas(8) unsigned long long bar;
  const unsigned a = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(a), "r"(count) : "memory");
  __syncthreads();
  if ((int)threadIdx.x < lanes)
    for (int r = 0; r < reps; ++r) {
      unsigned long long state;
      if (mode == 1)  // an arrival count of `each` per lane
        asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1], %2;" : "=l"(state) : "r"(a), "r"(each) : "memory");
      else if (mode == 2)  // one arrival per lane that also expects `each` bytes (0: none)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;" : "=l"(state) : "r"(a), "r"(each)
                     : "memory");
      else
        asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(a) : "memory");
    }
  __syncthreads();
  if (threadIdx.x == 0) report(a, out);
}'''

#: the same over a cluster of two blocks: lanes of block 0 arrive (a bare remote arrive, as the course's kernels
#: release a stage in the other block) on block 1's barrier, which block 1 then tests
REMOTE = REPORT + r'''
extern "C" __global__ void __cluster_dims__(2, 1, 1) remote_arrive(int lanes, int count, unsigned* out) {
  __shared__ alignas(8) unsigned long long bar;
  const unsigned a = (unsigned)__cvta_generic_to_shared(&bar);
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(a), "r"(count) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (rank == 0 && (int)threadIdx.x < lanes)
    asm volatile("{ .reg .b32 r; mapa.shared::cluster.u32 r, %0, 1; mbarrier.arrive.shared::cluster.b64 _, [r]; }"
                 :: "r"(a) : "memory");
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (rank == 1 && threadIdx.x == 0) report(a, out);
}'''

#: name → (arriving lanes, barrier count, arrives per lane, threads in the block[, form, its operand]); the form is
#: 0 a plain arrive, 1 an arrive with an arrival count (the operand), 2 arrive.expect_tx (the operand: bytes), 3 a
#: plain arrive on the other block's barrier (REMOTE)
CASES = {"count2_warp32": (32, 2, 1, 32), "count32_warp32": (32, 32, 1, 32), "count2_one_lane_x32": (1, 2, 32, 32),
         "count2_two_lanes": (2, 2, 1, 32), "count16_warp32": (32, 16, 1, 32), "count2_128_threads": (128, 2, 1, 128),
         "count2_three_lanes": (3, 2, 1, 32), "count64_128_threads": (128, 64, 1, 128),
         "count4_warp32": (32, 4, 1, 32), "count31_warp32": (32, 31, 1, 32), "count33_warp32": (32, 33, 1, 32),
         "count2_one_lane_arrives_3": (1, 2, 1, 32, 1, 3), "count3_two_lanes_arrive_2_each": (2, 3, 1, 32, 1, 2),
         "count4_two_lanes_arrive_2_each": (2, 4, 1, 32, 1, 2), "count2_two_lanes_arrive_2_each": (2, 2, 1, 32, 1, 2),
         "count2_expect_tx_warp32": (32, 2, 1, 32, 2, 0), "count2_expect_tx_two_lanes": (2, 2, 1, 32, 2, 0),
         "count2_expect_tx_three_lanes": (3, 2, 1, 32, 2, 0),
         "remote_count2_warp32": (32, 2, 1, 32, 3, 0), "remote_count2_two_lanes": (2, 2, 1, 32, 3, 0),
         "remote_count2_three_lanes": (3, 2, 1, 32, 3, 0), "remote_count32_warp32": (32, 32, 1, 32, 3, 0)}


def case(name: str) -> dict:
    """One case on whatever runs kernels here (the H100, or the PTX executor without one): ran or faulted, and the
    two test_wait answers."""
    from helpers import gpu

    lanes, count, reps, threads, form, each = (*CASES[name], 0, 0)[:6]
    kernel = gpu.compile(SOURCE, "over_arrive")
    out = gpu.to_device(np.zeros(4, np.uint32))
    result: dict = {"name": name, "lanes": lanes, "count": count, "reps": reps, "threads": threads,
                    "form": ["arrive", "arrive with a count", "arrive.expect_tx", "remote arrive"][form],
                    "operand": each}
    try:
        if form == 3:
            gpu.launch(gpu.compile(REMOTE, "remote_arrive"), 2, threads, 0, np.int32(lanes), np.int32(count), out,
                       cluster=(2, 1, 1), timeout=20)
        else:
            gpu.launch(kernel, 1, threads, 0, np.int32(lanes), np.int32(count), np.int32(reps), out, np.int32(form),
                       np.int32(each), timeout=20)
        gpu.wait()
        o = gpu.to_host(out)
        result.update(faulted=False, test_wait_parity0=int(o[0]), test_wait_parity1=int(o[1]))
    except gpu.GpuError as exc:
        result.update(faulted=True, message=str(exc)[:600])
    return result


def main(out_dir: str) -> None:
    from helpers import gpu

    info = gpu.device_info()
    cases = []
    for name in CASES:
        done = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True, timeout=120)
        try:
            cases.append(json.loads(done.stdout.strip().splitlines()[-1]))
        except (IndexError, json.JSONDecodeError):
            cases.append({"name": name, "error": (done.stdout + done.stderr)[-500:]})
        print(cases[-1], flush=True)
    meta = {"gpu": info.name if info else None, "driver": ".".join(map(str, info.driver_version)) if info else None,
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "made_by": "tools/h100/warp_arrivals.py"}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mbarrier_warp_arrivals_h100.json").write_text(json.dumps({"meta": meta, "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--case":
        print(json.dumps(case(sys.argv[2])))
    else:
        main(sys.argv[1])
