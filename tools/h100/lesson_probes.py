"""H100 probes for Lessons 01-03 (second edition). Writes small JSON fixtures into $OUT (or the folder given).

    PYTHONUNBUFFERED=1 python tools/h100/lesson_probes.py "$OUT"      # about 1 minute

Each case runs in its own process (``--case NAME``): a case that traps must not end the run. Four fixtures:

- ``mbarrier_tma_overdelivery_h100.json``: a real 16 KB TMA load onto a barrier armed for 8192 bytes. test_wait
  after a long spin, whether the bytes landed, then what a following expect_tx / arrive.expect_tx does.
- ``tensormap_passing_h100.json``: a TMA load through a tensor map passed as ``const __grid_constant__``, by value
  without it (the compiler copies it to the thread's stack), and from global memory (with and without
  ``fence.proxy.tensormap::generic.acquire``).
- ``dynamic_smem_alignment_h100.json``: where ``extern __shared__ __align__(1024)`` really starts, with and without
  static shared memory beside it.
- ``wgmma_scale_h100.json``: one m64n64k16 with scale-d 0/1 and imm-scale-a/b -1, against the emulator.

Copy the four files into tests/data/; tests/emulator/test_lessons0003_silicon.py asserts them.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SPIN = 50_000_000  # cycles thread 0 polls test_wait(0) before giving up (about 25 ms)

# ---------------------------------------------------------------------------------------------------- kernels
OVERDELIVERY = r"""
#include "hopper.cuh"
// One thread: arm the barrier for `announce` bytes, TMA-load a 128 x 64 bf16 box (16384 bytes), spin on
// test_wait(0), record it, copy the tile out, then do `then` (0 nothing, 1 expect_tx(8192), 2 arrive.expect_tx(8192))
// and record test_wait again.
extern "C" __global__ void overdeliver(const __grid_constant__ CUtensorMap tmap, unsigned char* tile_out,
                                       long long* info, int announce, int then) {
  __shared__ alignas(1024) unsigned char tile[128 * 64 * 2];
  __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x != 0) return;
  for (int i = 0; i < (int)sizeof(tile); ++i) tile[i] = 0xAB;   // poison: bytes that never land stay 0xAB
  hopper::fence_proxy_async();
  hopper::mbar_init(&bar, 1);
  hopper::mbar_fence_init();
  hopper::mbar_arrive_expect_tx(&bar, announce);
  hopper::tma_load_2d(tile, &tmap, &bar, 0, 0);
  const long long start = clock64();
  bool done = false;
  while (!(done = hopper::mbar_test_wait(&bar, 0)) && clock64() - start < SPIN_CYCLES) {
  }
  info[0] = clock64() - start;
  info[1] = done;
  info[2] = hopper::mbar_test_wait(&bar, 1);
  for (int i = 0; i < (int)sizeof(tile); ++i) tile_out[i] = tile[i];
  info[5] = 1;                                                     // reached the `then` step
  if (then == 1) hopper::mbar_expect_tx(&bar, 8192);
  if (then == 2) hopper::mbar_arrive_expect_tx(&bar, 8192);
  info[3] = hopper::mbar_test_wait(&bar, 0);
  info[4] = hopper::mbar_test_wait(&bar, 1);
  info[6] = 1;                                                     // survived the `then` step
}
""".replace("SPIN_CYCLES", f"{SPIN}LL")

# the same 64 x 64 tile load, with the tensor map reaching the instruction three ways
_LOAD_BODY = r"""
  __shared__ alignas(1024) unsigned char tile[64 * 64 * 2];
  __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x == 0) {
    hopper::mbar_init(&bar, 1);
    hopper::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    FENCE
    hopper::mbar_arrive_expect_tx(&bar, sizeof(tile));
    hopper::tma_load_2d(tile, TMAP, &bar, 0, 0);
  }
  HOPPER_WAIT1(bar, 0);
  for (int i = threadIdx.x; i < (int)sizeof(tile); i += blockDim.x) out[i] = tile[i];
}
"""
PASSING = {
    "grid_constant": ("const __grid_constant__ CUtensorMap tmap", "&tmap", ""),
    "by_value": ("const CUtensorMap tmap", "&tmap", ""),
    "global": ("const CUtensorMap* tmap", "tmap", ""),
    "global_fenced": ("const CUtensorMap* tmap", "tmap",
                      'asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" :: "l"(tmap) : "memory");'),
}


def passing_source(kind: str) -> str:
    param, tmap, fence = PASSING[kind]
    head = f'#include "hopper.cuh"\nextern "C" __global__ void load({param}, unsigned char* out) {{'
    return head + _LOAD_BODY.replace("TMAP", tmap).replace("FENCE", fence)


ALIGN = {
    "dynamic_only_1024": ("", "__align__(1024)"),
    "static_barrier_then_dynamic_1024": ("__shared__ alignas(8) unsigned long long bar; if (threadIdx.x == 9999) "
                                         "hopper::mbar_init(&bar, 1); out[1] = hopper::smem_u32(&bar);",
                                         "__align__(1024)"),
    "static_100_bytes_then_dynamic_1024": ("__shared__ unsigned char pad[100]; pad[threadIdx.x % 100] = 1; "
                                           "out[1] = hopper::smem_u32(pad) + pad[3];", "__align__(1024)"),
    "static_100_bytes_then_dynamic_16": ("__shared__ unsigned char pad[100]; pad[threadIdx.x % 100] = 1; "
                                         "out[1] = hopper::smem_u32(pad) + pad[3];", "__align__(16)"),
}


def align_source(kind: str) -> str:
    static, align = ALIGN[kind]
    return ('#include "hopper.cuh"\nextern "C" __global__ void where(unsigned* out) {\n'
            f"  extern __shared__ {align} unsigned char dyn[];\n  {static}\n"
            "  dyn[threadIdx.x] = 0;\n  __syncthreads();\n  if (threadIdx.x == 0) out[0] = hopper::smem_u32(dyn);\n}\n")


WGMMA = {"accumulate": (1, 1, 1), "scale_d_0": (0, 1, 1), "scale_a_minus": (1, -1, 1), "scale_b_minus": (1, 1, -1)}


def wgmma_source(kind: str) -> str:
    d, a, b = WGMMA[kind]
    regs = ", ".join(f"%{i}" for i in range(32))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(32))
    return r"""
#include "hopper.cuh"
extern "C" __global__ void __launch_bounds__(128) one(const unsigned short* A, const unsigned short* Bt,
                                                      const float* d_in, float* out) {
  __shared__ __align__(1024) unsigned short sA[64 * 64], sB[64 * 64];
  for (int i = threadIdx.x; i < 64 * 64; i += 128) {      // 128B swizzle, as TMA writes it
    int r = i / 64, k = i % 64, at = r * 64 + (((k / 8) ^ (r % 8)) * 8) + k % 8;
    sA[at] = A[i];
    sB[at] = Bt[i];
  }
  hopper::fence_proxy_async();
  __syncthreads();
  float d[32];
  for (int j = 0; j < 32; ++j) d[j] = d_in[threadIdx.x * 32 + j];
  unsigned long long da = hopper::make_smem_desc(sA, 16, 1024, 128), db = hopper::make_smem_desc(sB, 16, 1024, 128);
  hopper::wgmma_fence();
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {REGS}, %32, %33, SD, SA, SB, 0, 0;\n"
               : OUTS : "l"(da), "l"(db));
  hopper::wgmma_commit();
  hopper::wgmma_wait<0>();
  for (int j = 0; j < 32; ++j) out[threadIdx.x * 32 + j] = d[j];
}
""".replace("REGS", regs).replace("OUTS", outs).replace("SD", str(d)).replace("SA", str(a)) \
        .replace("SB", str(b))


# ---------------------------------------------------------------------------------------------------- cases
def _fault(exc: Exception) -> dict:
    from cuda.bindings import driver

    text = str(exc)
    names = re.findall(r"CUDA_ERROR_[A-Z_]+", text)
    code = int(getattr(driver.CUresult, names[-1])) if names else None
    return {"fault": type(exc).__name__, "cuda_error": names[-1] if names else None, "cuda_error_code": code,
            "message": text[:400]}


def case_overdelivery(announce: int, then: int) -> dict:
    from helpers import gpu

    k = gpu.compile(OVERDELIVERY, "overdeliver")
    src = (np.arange(128 * 64) % 251).astype(np.uint16).view(np.uint16)   # 128 rows x 64 bf16 bit patterns
    src = src.reshape(128, 64)
    dev = gpu.to_device(src)
    tile = gpu.empty(16384, np.uint8)
    info = gpu.to_device(np.full(8, -1, np.int64))
    result = {"announce": announce, "box_bytes": 16384, "then": ["nothing", "expect_tx(8192)",
                                                                  "arrive.expect_tx(8192)"][then]}
    try:
        gpu.launch(k, 1, 32, 0, gpu.tensor_map_2d(dev, 128, 64, swizzle=128), tile, info, np.int32(announce),
                   np.int32(then), timeout=20)
    except gpu.KernelFault as exc:
        result.update(_fault(exc))
        return result
    i = gpu.to_host(info)
    from helpers.hopper import tensormap as tm
    from helpers.hopper import tma

    tmap = tm.for_matrix((128, 64), tm.DataType.UINT16, 128, 64, swizzle=tm.Swizzle.B128)
    expected = np.asarray(tma.load_tile(tmap, src, (0, 0)), np.uint8)
    got = gpu.to_host(tile)
    result.update({"spin_cycles": int(i[0]), "test_wait_after_spin": [int(i[1]), int(i[2])],
                   "tile_landed_as_emulated": bool(np.array_equal(got, expected)),
                   "poison_bytes_left": int((got == 0xAB).sum() - (expected == 0xAB).sum()),
                   "test_wait_after_then": [int(i[3]), int(i[4])]})
    return result


def case_passing(kind: str) -> dict:
    import ctypes

    from helpers import gpu
    from helpers.hopper import tensormap as tm
    from helpers.hopper import tma

    k = gpu.compile(passing_source(kind), "load")
    src = (np.arange(64 * 64) * 7 % 65521).astype(np.uint16).reshape(64, 64)
    dev = gpu.to_device(src)
    tmap = gpu.tensor_map_2d(dev, 64, 64, swizzle=128)
    out = gpu.poison(8192, np.uint8)
    result = {"kind": kind, "parameter": PASSING[kind][0], "fence": PASSING[kind][2],
              "stack_bytes": k.report.local_bytes}
    if kind.startswith("global"):
        raw = np.frombuffer(ctypes.string_at(tmap.getPtr(), 128), np.uint8).copy()
        arg = gpu.to_device(raw)
        result["global_copy_address_mod_64"] = int(arg.ptr % 64)
    else:
        arg = tmap
    try:
        gpu.launch(k, 1, 128, 0, arg, out, timeout=20)
    except gpu.KernelFault as exc:
        result.update(_fault(exc))
        return result
    expected = tma.load_tile(tm.for_matrix((64, 64), tm.DataType.UINT16, 64, 64, swizzle=tm.Swizzle.B128), src,
                             (0, 0))
    result["tile_correct"] = bool(np.array_equal(gpu.to_host(out), np.asarray(expected, np.uint8)))
    return result


def case_align(kind: str) -> dict:
    from helpers import gpu

    k = gpu.compile(align_source(kind), "where")
    out = gpu.to_device(np.zeros(2, np.uint32))
    gpu.launch(k, 1, 128, 4096, out, timeout=20)
    dyn, static = (int(v) for v in gpu.to_host(out))
    return {"kind": kind, "declaration": ALIGN[kind][1], "static_shared": ALIGN[kind][0].split(";")[0],
            "static_smem_bytes": k.report.static_smem, "dynamic_start": dyn, "dynamic_start_mod_1024": dyn % 1024,
            "static_address": static if static else None}


def case_wgmma(kind: str) -> dict:
    from helpers import gpu
    from helpers.hopper import wgmma as wg

    rng = np.random.default_rng(7)
    a = rng.integers(-8, 9, size=(64, 64)).astype(np.float32)
    bt = rng.integers(-8, 9, size=(64, 64)).astype(np.float32)
    d_in = rng.integers(-50, 51, size=(128, 32)).astype(np.float32)
    k = gpu.compile(wgmma_source(kind), "one")
    out = gpu.poison(128 * 32, np.float32)
    gpu.launch(k, 1, 128, 0, gpu.to_device(wg.f32_to_bf16_bits(a)), gpu.to_device(wg.f32_to_bf16_bits(bt)),
               gpu.to_device(d_in), out, timeout=20)
    got = gpu.to_host(out).reshape(128, 32)
    sd, sa, sb = WGMMA[kind]
    # one m64n64k16 reads K columns 0..15 of each tile (the first 32 bytes of every 128-byte row)
    ref = wg.fragments_to_tile(d_in, 64) * sd + (sa * a[:, :16]) @ (sb * bt[:, :16]).T
    tile = wg.fragments_to_tile(got, 64)
    return {"kind": kind, "scale_d": sd, "imm_scale_a": sa, "imm_scale_b": sb,
            "max_abs_difference": float(np.max(np.abs(tile - ref))),
            "equals_scale_d_times_d_plus_scaled_product": bool(np.array_equal(tile, ref)),
            "seed": 7}


CASES = {
    "overdeliver_spin": lambda: case_overdelivery(8192, 0),
    "overdeliver_then_expect_tx": lambda: case_overdelivery(8192, 1),
    "overdeliver_then_arrive_expect_tx": lambda: case_overdelivery(8192, 2),
    "exact_16384": lambda: case_overdelivery(16384, 0),
    # The granularity of a TMA's byte reports: announce 8192 + d bytes of a 16384-byte load. If the copy reports its
    # bytes in pieces of g bytes, phase 0 completes exactly when 8192 + d is a multiple of g.
    **{f"overdeliver_granularity_{8192 + d}": (lambda d=d: case_overdelivery(8192 + d, 0))
       for d in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)},
    **{f"passing_{k}": (lambda k=k: case_passing(k)) for k in PASSING},
    **{f"align_{k}": (lambda k=k: case_align(k)) for k in ALIGN},
    **{f"wgmma_{k}": (lambda k=k: case_wgmma(k)) for k in WGMMA},
}
FIXTURES = {"mbarrier_tma_overdelivery_h100.json": ("overdeliver_", "exact_"), "tensormap_passing_h100.json":
            ("passing_",), "dynamic_smem_alignment_h100.json": ("align_",), "wgmma_scale_h100.json": ("wgmma_",)}


def main(out_dir: str) -> None:
    from cuda.bindings import driver

    from helpers import gpu

    info = gpu.device_info()
    _, drv = driver.cuDriverGetVersion()
    results = {}
    for name in CASES:
        done = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True, timeout=120)
        lines = done.stdout.strip().splitlines()
        try:
            results[name] = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            results[name] = {"error": (done.stdout + done.stderr)[-600:]}
        print(name, results[name], flush=True)
    meta = {"gpu": info.name if info else None, "driver_cuda_version": drv,
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "made_by": "tools/h100/lesson_probes.py", "spin_cycles_limit": SPIN}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for file, prefixes in FIXTURES.items():
        cases = [dict(name=n, **r) for n, r in results.items() if n.startswith(prefixes)]
        (out / file).write_text(json.dumps({"meta": meta, "cases": cases}, indent=1) + "\n")
        print("wrote", out / file)


if __name__ == "__main__":
    if sys.argv[1] == "--case":
        print(json.dumps(CASES[sys.argv[2]]()))
    else:
        main(sys.argv[1])
