# ruff: noqa: E501  (inline PTX strings are kept on one line each)
"""Capture the ground truth the Hopper emulator is tested against, on a real H100.

Run on a machine with an sm_90 GPU (driver >= 12.x), cuda-bindings and NVRTC installed::

    PYTHONUNBUFFERED=1 python tools/h100/tma_wgmma.py --out OUTDIR

It writes, each with the GPU name, driver version, date and this script's name in a ``meta`` record:

- ``tensormap_verdicts.json.gz``: the verdict (CUresult) of ``cuTensorMapEncodeTiled`` on 3022 generated
  argument sets; ``tensormap_box_limit.json``: 39 probes of the driver's limit on a box's total size;
- ``tma_loads.json`` + ``tma_loads.npz``: shared-memory windows written by TMA tile loads (every swizzle mode,
  several element sizes and box shapes, in-bounds and out-of-bounds boxes) and whether the transaction byte
  count was exactly the predicted one;
- ``tma_stores.json`` + ``tma_stores.npz``: global buffers after TMA tile stores (partly out of bounds);
- ``wgmma.json`` + ``wgmma.npz``: accumulator fragments of ``wgmma.mma_async m64nNk16.f32.bf16.bf16`` for
  several N with identifiable, small-integer and random inputs, and with deliberately varied descriptors.

Each part runs in its own subprocess, so a fault in one part (a bad descriptor) cannot lose the others; TMA
cases run in a resumable worker, and a case that kills the CUDA context (the hardware refuses it) is recorded
as a ``fault`` and the worker restarts after it. ``--part diag`` runs a few single-case diagnostics.
Then ``python tools/h100/pack_fixtures.py OUTDIR tests/data`` writes the committed fixtures.
Self-contained: uses cuda.bindings (driver, NVRTC) and ctypes only.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import math
import os
import random
import subprocess
import sys
import time

import numpy as np

PARTS = ["encode", "encode2", "tma", "tma_extra", "store", "wgmma", "wgmma_desc"]

# --------------------------------------------------------------------------------------------- driver glue

_STATE: dict = {}


def _check(res, what):
    err = res[0] if isinstance(res, tuple) else res
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    if isinstance(res, tuple):
        return res[1] if len(res) == 2 else res[1:]
    return None


def init_driver():
    from cuda.bindings import driver as d

    _check(d.cuInit(0), "cuInit")
    dev = _check(d.cuDeviceGet(0), "cuDeviceGet")
    ctx = _check(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    _STATE.update(d=d, dev=dev, ctx=ctx)
    return d


def meta() -> dict:
    d = _STATE["d"]
    name = _check(d.cuDeviceGetName(256, _STATE["dev"]), "cuDeviceGetName")
    name = name.split(b"\0")[0].decode()
    drv = _check(d.cuDriverGetVersion(), "cuDriverGetVersion")
    major = _check(d.cuDeviceGetAttribute(
        d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _STATE["dev"]), "attr")
    minor = _check(d.cuDeviceGetAttribute(
        d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, _STATE["dev"]), "attr")
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        smi = "unknown"
    try:
        import cuda.bindings as cb
        cbv = cb.__version__
    except Exception:  # noqa: BLE001
        cbv = "unknown"
    return {
        "gpu": name,
        "compute_capability": f"{major}.{minor}",
        "driver_version": smi,
        "cuda_driver_api": drv,
        "cuda_bindings": cbv,
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "made_by": "tools/h100/tma_wgmma.py",
    }


def compile_cubin(src: str, name: str) -> bytes:
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(src.encode(), f"{name}.cu".encode(), 0, [], [])
    assert int(err) == 0, err
    opts = [b"--gpu-architecture=sm_90a", b"-std=c++17", b"-lineinfo"]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if int(err) != 0:
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"NVRTC failed for {name}:\n{log.decode(errors='replace')}")
    _, size = nvrtc.nvrtcGetCUBINSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, buf)
    return buf


def load_function(cubin: bytes, name: str, dyn_smem: int):
    d = _STATE["d"]
    mod = _check(d.cuModuleLoadData(cubin), "cuModuleLoadData")
    _STATE.setdefault("mods", []).append(mod)
    fn = _check(d.cuModuleGetFunction(mod, name.encode()), f"cuModuleGetFunction {name}")
    _check(d.cuFuncSetAttribute(
        fn, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dyn_smem), "attr")
    return fn


def dalloc(nbytes: int) -> int:
    d = _STATE["d"]
    return int(_check(d.cuMemAlloc(max(nbytes, 16)), "cuMemAlloc"))


def dfree(ptr: int):
    _STATE["d"].cuMemFree(ptr)


def h2d(ptr: int, arr: np.ndarray):
    arr = np.ascontiguousarray(arr)
    _check(_STATE["d"].cuMemcpyHtoD(ptr, arr.ctypes.data, arr.nbytes), "cuMemcpyHtoD")


def d2h(ptr: int, nbytes: int) -> np.ndarray:
    out = np.empty(nbytes, np.uint8)
    _check(_STATE["d"].cuMemcpyDtoH(out.ctypes.data, ptr, nbytes), "cuMemcpyDtoH")
    return out


def launch(fn, threads: int, dyn_smem: int, params: list[ctypes._SimpleCData | ctypes.Array]):
    """Launch one block; ``params`` are ctypes objects holding each kernel argument's bytes."""
    d = _STATE["d"]
    ptrs = (ctypes.c_void_p * len(params))(*[ctypes.addressof(p) for p in params])
    _check(d.cuLaunchKernel(fn, 1, 1, 1, threads, 1, 1, dyn_smem, 0, ctypes.addressof(ptrs), 0), "launch")
    _check(d.cuCtxSynchronize(), "cuCtxSynchronize")


# ------------------------------------------------------------------------------------ cuTensorMapEncodeTiled

ESIZE = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}


def _libcuda():
    if "libcuda" not in _STATE:
        lib = ctypes.CDLL("libcuda.so.1")
        f = lib.cuTensorMapEncodeTiled
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                      ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        _STATE["libcuda"] = lib
    return _STATE["libcuda"]


def encode_raw(dtype, rank, address, dims, strides, box, estr, interleave=0, swizzle=0, l2=0, oob=0):
    """Call the driver's cuTensorMapEncodeTiled with raw integers. Returns (CUresult, 128 opaque bytes)."""
    lib = _libcuda()
    out = (ctypes.c_uint64 * 24)()
    base = (ctypes.addressof(out) + 63) & ~63
    g = (ctypes.c_uint64 * 8)(*[int(x) for x in dims][:8])
    s = (ctypes.c_uint64 * 8)(*[int(x) for x in strides][:8])
    b = (ctypes.c_uint32 * 8)(*[int(x) & 0xFFFFFFFF for x in box][:8])
    e = (ctypes.c_uint32 * 8)(*[int(x) & 0xFFFFFFFF for x in estr][:8])
    res = lib.cuTensorMapEncodeTiled(base, int(dtype), int(rank), ctypes.c_void_p(int(address)),
                                     ctypes.addressof(g), ctypes.addressof(s), ctypes.addressof(b),
                                     ctypes.addressof(e), int(interleave), int(swizzle), int(l2), int(oob))
    raw = ctypes.string_at(base, 128)
    return int(res), raw


def gen_encode_cases(seed: int = 2026) -> list[dict]:
    """Argument sets spread over every documented (and a few undocumented) rule, valid and invalid."""
    rng = random.Random(seed)
    cases: list[dict] = []
    A = 1 << 20  # a 1 MiB-aligned fake base address; the driver does not dereference it

    def add(tag, dtype, rank, address, dims, strides, box, estr, il=0, sw=0, l2=0, oob=0):
        cases.append(dict(tag=tag, dtype=dtype, rank=rank, address=address, dims=list(dims),
                          strides=list(strides), box=list(box), estr=list(estr), interleave=il,
                          swizzle=sw, l2=l2, oob=oob))

    bases = [
        dict(dtype=9, rank=2, address=A, dims=[8192, 8192], strides=[16384], box=[64, 64], estr=[1, 1], sw=3),
        dict(dtype=7, rank=3, address=A, dims=[64, 33, 7], strides=[256, 256 * 33], box=[32, 8, 2],
             estr=[1, 1, 1], sw=3),
        dict(dtype=0, rank=1, address=A, dims=[1000], strides=[], box=[16], estr=[1], sw=0),
        dict(dtype=6, rank=5, address=A, dims=[16, 3, 4, 5, 6], strides=[32, 96, 384, 1920],
             box=[8, 3, 2, 1, 2], estr=[1, 1, 1, 1, 1], sw=1),
        dict(dtype=9, rank=3, address=A, dims=[8, 20, 30], strides=[16, 320], box=[8, 4, 4],
             estr=[1, 1, 1], il=1, sw=0),
        dict(dtype=9, rank=4, address=A, dims=[16, 10, 10, 2], strides=[32, 320, 3200], box=[16, 4, 4, 1],
             estr=[1, 1, 1, 1], il=2, sw=1),
        dict(dtype=8, rank=2, address=A, dims=[100, 50], strides=[800], box=[16, 4], estr=[1, 1], sw=3),
        dict(dtype=1, rank=2, address=A, dims=[4096, 128], strides=[8192], box=[32, 128], estr=[1, 1], sw=2),
    ]

    def mut(tag, b, **kw):
        c = dict(b)
        c.update(kw)
        add(tag, c["dtype"], c["rank"], c["address"], c["dims"], c["strides"], c["box"], c["estr"],
            c.get("il", 0), c.get("sw", 0), c.get("l2", 0), c.get("oob", 0))

    for bi, b in enumerate(bases):
        t = f"base{bi}"
        mut(t + ":valid", b)
        r = b["rank"]
        for dt in list(range(0, 16)) + [16, 99]:
            mut(t + f":dtype={dt}", b, dtype=dt)
        for off in [4, 8, 16, 24, 32, 48]:
            mut(t + f":addr+{off}", b, address=b["address"] + off)
        mut(t + ":addr0", b, address=0)
        for i in range(r):
            for v in [0, 1, 1 << 31, (1 << 31) + 1, 1 << 32, (1 << 32) + 1]:
                dims = list(b["dims"])
                dims[i] = v
                mut(t + f":dim{i}={v}", b, dims=dims)
        for i in range(r - 1):
            for v in [0, 8, 16, 24, 32, 48, b["strides"][i] + 8, b["strides"][i] + 16, (1 << 40) - 16,
                      1 << 40, (1 << 40) + 16]:
                st = list(b["strides"])
                st[i] = v
                mut(t + f":stride{i}={v}", b, strides=st)
        for i in range(r):
            for v in [0, 1, 2, 3, 4, 24, 255, 256, 257, 1000]:
                bx = list(b["box"])
                bx[i] = v
                mut(t + f":box{i}={v}", b, box=bx)
            for v in [0, 1, 2, 3, 7, 8, 9]:
                es = list(b["estr"])
                es[i] = v
                mut(t + f":estr{i}={v}", b, estr=es)
        for il in [0, 1, 2, 3]:
            for sw in range(0, 8):
                mut(t + f":il={il},sw={sw}", b, il=il, sw=sw)
        for l2 in [0, 1, 2, 3, 4]:
            mut(t + f":l2={l2}", b, l2=l2)
        for oob in [0, 1, 2]:
            mut(t + f":oob={oob}", b, oob=oob)
        for rk in [0, 1, 2, 3, 4, 5, 6]:
            dims = (list(b["dims"]) + [1] * 6)[:max(rk, 1)]
            st = (list(b["strides"]) + [b["strides"][-1] if b["strides"] else 1024] * 6)[:max(rk - 1, 0)]
            # keep strides monotone for added dims
            for i in range(1, len(st)):
                st[i] = max(st[i], st[i - 1] * max(dims[i], 1))
            bx = (list(b["box"]) + [1] * 6)[:max(rk, 1)]
            es = (list(b["estr"]) + [1] * 6)[:max(rk, 1)]
            mut(t + f":rank={rk}", b, rank=rk, dims=dims, strides=st, box=bx, estr=es)

    # targeted probes of the box / swizzle / interleave / element-size rules
    for dt in [0, 1, 2, 4, 6, 7, 8, 9, 11]:
        es_ = ESIZE[dt]
        for sw in range(0, 7):
            for inner_bytes in [16, 32, 48, 64, 96, 128, 144, 256, 512]:
                if inner_bytes % es_:
                    continue
                b0 = inner_bytes // es_
                if b0 > 300:
                    continue
                add(f"probe:dt={dt},sw={sw},inner={inner_bytes}", dt, 2, A, [4096, 64], [8192 * es_],
                    [b0, 8], [1, 1], 0, sw)
        for il in [1, 2]:
            for sw in range(0, 4):
                for inner_bytes in [8, 16, 24, 32, 48, 64, 128]:
                    if inner_bytes % es_:
                        continue
                    b0 = inner_bytes // es_
                    add(f"probe:il={il},dt={dt},sw={sw},inner={inner_bytes}", dt, 3, A,
                        [32 // es_ if il == 2 else max(16 // es_, 1), 64, 64], [64 * es_ * 2, 64 * 64 * es_ * 2],
                        [b0, 8, 2], [1, 1, 1], il, sw)
    # strides smaller than the row they skip, non-monotone strides, overlapping dims
    for v in [16, 32, 64, 112, 128, 144]:
        add(f"probe:short_stride={v}", 9, 2, A, [64, 64], [v], [64, 8], [1, 1], 0, 3)
    add("probe:nonmonotone", 9, 3, A, [64, 8, 8], [1024, 128], [64, 8, 8], [1, 1, 1], 0, 3)
    # big boxes (total bytes)
    for bx in [[256, 256], [128, 256], [64, 256], [256, 256, 2], [256, 256, 256]]:
        add(f"probe:bigbox={bx}", 0, len(bx), A, [4096, 4096, 4096][:len(bx)], [4096, 4096 * 4096][:len(bx) - 1],
            bx, [1] * len(bx))
    # box larger than the tensor
    add("probe:box>dims", 9, 2, A, [8, 4], [16], [64, 64], [1, 1], 0, 3)
    # element strides beyond box
    add("probe:estr>box", 9, 2, A, [64, 64], [128], [64, 2], [1, 8], 0, 3)
    # random mixtures
    dims_pool = [1, 2, 3, 7, 8, 16, 64, 100, 1000, 4096, 1 << 20, 1 << 31, (1 << 31) + 1, 1 << 32, 0]
    box_pool = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 257, 0, 3]
    for _ in range(700):
        dt = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 10, 11, 12, 13, 14, 15])
        rk = rng.choice([1, 2, 2, 3, 3, 4, 5])
        il = rng.choice([0, 0, 0, 0, 1, 2])
        sw = rng.choice([0, 0, 1, 2, 3, 3, 3, 4, 5, 6])
        l2 = rng.choice([0, 1, 2, 3])
        oob = rng.choice([0, 0, 0, 1])
        es_ = ESIZE.get(dt, 1)
        addr = A + rng.choice([0, 0, 0, 0, 16, 32, 64, 8, 48])
        dims = [rng.choice(dims_pool[:12] if rng.random() < 0.9 else dims_pool) for _ in range(rk)]
        if rng.random() < 0.5:
            dims[0] = rng.choice([64, 128, 256, 1024])
        strides = []
        prev = dims[0] * es_
        for i in range(1, rk):
            st = ((prev + 15) // 16) * 16 + 16 * rng.choice([0, 0, 1, 2])
            if rng.random() < 0.1:
                st += rng.choice([8, 4, 24])
            if rng.random() < 0.05:
                st = rng.choice([0, 1 << 40, (1 << 40) - 16, 16])
            strides.append(st)
            prev = st * dims[i]
        box = []
        for i in range(rk):
            if i == 0 and rng.random() < 0.7:
                span = {1: 32, 2: 64, 3: 128}.get(sw, 128 if sw >= 4 else 64)
                inner = rng.choice([16, 32, 64, 128, span, span, 256]) if rng.random() < 0.9 else rng.choice([8, 24, 40])
                box.append(max(inner // es_, 0) if inner >= es_ else 1)
            else:
                box.append(rng.choice(box_pool[:13] if rng.random() < 0.9 else box_pool))
        estr = [rng.choice([1, 1, 1, 2, 3, 4, 8]) if rng.random() < 0.8 else rng.choice([0, 9, 1]) for _ in range(rk)]
        if rng.random() < 0.5:
            estr = [1] * rk
        add("random", dt, rk, addr, dims, strides, box, estr, il, sw, l2, oob)
    return cases


def gen_box_limit_cases() -> list[dict]:
    """Probes of the driver's limit on a box's total size (found after the first capture)."""
    A = 1 << 20
    cases = []

    def add(tag, dtype, box, estr):
        rank = len(box)
        dims = [4096] * rank
        es_ = ESIZE[dtype]
        strides = [4096 * es_ * (4096 ** i) for i in range(rank - 1)]
        cases.append(dict(tag=tag, dtype=dtype, rank=rank, address=A, dims=dims, strides=strides, box=box,
                          estr=estr, interleave=0, swizzle=0, l2=0, oob=0))

    for b1 in [128, 129, 136, 144, 160, 192, 200, 224, 226, 227, 228, 229, 240, 255]:
        add(f"bytes={256 * b1 * 4}", 0, [256, b1, 4], [1, 1, 1])
    for b2 in [2, 3]:
        add(f"bytes={256 * 256 * b2}", 0, [256, 256, b2], [1, 1, 1])
    for es0 in [1, 2, 4, 8]:
        add(f"estr0={es0}", 9, [64, 256, 8], [es0, 1, 1])
    for k in [85, 86, 128, 129, 151, 152, 227, 228]:
        add(f"estr0=3,k={k}", 9, [8, 256, k], [3, 1, 1])
    for k in [128, 129, 130, 131, 132, 133, 227, 228, 233, 234, 235]:
        add(f"estr1=8,k={k}", 9, [16, 249, k], [1, 8, 1])
    return cases


def part_encode2(out: str):
    cases = gen_box_limit_cases()
    for c in cases:
        c["result"], _ = encode_raw(c["dtype"], c["rank"], c["address"], c["dims"], c["strides"], c["box"],
                                    c["estr"], 0, 0, 0, 0)
        print(c["tag"], c["result"])
    with open(os.path.join(out, "tensormap_box_limit.json"), "w") as f:
        json.dump({"meta": meta(), "how": "cuTensorMapEncodeTiled through ctypes (see tensormap_verdicts)",
                   "cases": cases}, f)


def part_encode(out: str):
    cases = gen_encode_cases()
    t0 = time.time()
    for c in cases:
        res, _ = encode_raw(c["dtype"], c["rank"], c["address"], c["dims"], c["strides"], c["box"], c["estr"],
                            c["interleave"], c["swizzle"], c["l2"], c["oob"])
        c["result"] = res
    ok = sum(c["result"] == 0 for c in cases)
    print(f"encode: {len(cases)} cases, {ok} accepted, {time.time() - t0:.2f}s")
    import gzip
    with gzip.open(os.path.join(out, "tensormap_verdicts.json.gz"), "wt") as f:
        json.dump({"meta": meta(), "how": "cuTensorMapEncodeTiled called through ctypes with raw integer "
                   "arguments (arrays padded to 8 entries); result is the CUresult (0 = accepted)",
                   "cases": cases}, f, separators=(",", ":"))


# ------------------------------------------------------------------------------------------------ TMA

TMA_SRC = r"""
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
struct LoadParams { int coords[5]; int rank; unsigned dst_offset; unsigned expect_bytes; unsigned window;
                    unsigned char* out; int* status; };
struct StoreParams { int coords[5]; int rank; unsigned dst_offset; unsigned nbytes; const unsigned char* src; };

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ int wait_parity(unsigned bar, unsigned parity, long long budget) {
  long long t0 = clock64();
  while (true) {
    unsigned ok;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    if (ok) return 1;
    if (clock64() - t0 > budget) return 0;
  }
}

extern "C" __global__ void tma_load(const __grid_constant__ CUtensorMap tmap, const LoadParams* pp) {
  extern __shared__ __align__(128) unsigned char dsmem[];
  __shared__ alignas(8) unsigned long long bar;
  LoadParams p = *pp;
  unsigned raw = smem_u32(dsmem);
  unsigned aligned = (raw + 1023u) & ~1023u;
  unsigned char* base = dsmem + (aligned - raw);
  for (unsigned i = threadIdx.x; i < p.window; i += blockDim.x) base[i] = 0xA5;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  unsigned b = smem_u32(&bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned dst = aligned + p.dst_offset;
    const void* tm = &tmap;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(p.expect_bytes) : "memory");
    int* c = p.coords;
    switch (p.rank) {
      case 1: asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];"
                :: "r"(dst), "l"(tm), "r"(c[0]), "r"(b) : "memory"); break;
      case 2: asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                :: "r"(dst), "l"(tm), "r"(c[0]), "r"(c[1]), "r"(b) : "memory"); break;
      case 3: asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                :: "r"(dst), "l"(tm), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(b) : "memory"); break;
      case 4: asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
                :: "r"(dst), "l"(tm), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(b) : "memory"); break;
      default: asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];"
                :: "r"(dst), "l"(tm), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(b) : "memory"); break;
    }
    int ok0 = wait_parity(b, 0, 20000000LL);
    int ok1 = 0;
    if (ok0) {
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b) : "memory");
      ok1 = wait_parity(b, 1, 2000000LL);
    }
    p.status[0] = ok0;
    p.status[1] = ok1;
  }
  __syncthreads();
  for (unsigned i = threadIdx.x; i < p.window; i += blockDim.x) p.out[i] = base[i];
}

extern "C" __global__ void tma_store(const __grid_constant__ CUtensorMap tmap, const StoreParams* pp) {
  extern __shared__ __align__(128) unsigned char dsmem[];
  StoreParams p = *pp;
  unsigned raw = smem_u32(dsmem);
  unsigned aligned = (raw + 1023u) & ~1023u;
  unsigned char* base = dsmem + (aligned - raw) + p.dst_offset;
  for (unsigned i = threadIdx.x; i < p.nbytes; i += blockDim.x) base[i] = p.src[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned src = aligned + p.dst_offset;
    const void* tm = &tmap;
    int* c = p.coords;
    switch (p.rank) {
      case 1: asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group [%0, {%2}], [%1];"
                :: "l"(tm), "r"(src), "r"(c[0]) : "memory"); break;
      case 2: asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];"
                :: "l"(tm), "r"(src), "r"(c[0]), "r"(c[1]) : "memory"); break;
      case 3: asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];"
                :: "l"(tm), "r"(src), "r"(c[0]), "r"(c[1]), "r"(c[2]) : "memory"); break;
      case 4: asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
                :: "l"(tm), "r"(src), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]) : "memory"); break;
      default: asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];"
                :: "l"(tm), "r"(src), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]) : "memory"); break;
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
  __syncthreads();
}
"""

DYN_SMEM = 200 * 1024


def global_pattern(nbytes: int, esize: int) -> np.ndarray:
    """The bytes every TMA test tensor holds: element i (of the whole allocation) = i + 1, little-endian."""
    n = nbytes // esize
    dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[esize]
    return (np.arange(n, dtype=np.uint64) + 1).astype(dt).view(np.uint8)


def box_bytes(c) -> int:
    n = ESIZE[c["dtype"]]
    for i, (b, e) in enumerate(zip(c["box"], c["estr"], strict=True)):
        n *= b if i == 0 else -(-b // e)
    return n


def gen_load_cases(extra: bool) -> list[dict]:
    cases = []

    def add(dtype, dims, strides, box, coords, sw=0, estr=None, oob=0, dst=0, tag=""):
        rank = len(dims)
        cases.append(dict(tag=tag, dtype=dtype, rank=rank, dims=dims, strides=strides, box=box,
                          estr=estr or [1] * rank, swizzle=sw, oob=oob, coords=coords, dst_offset=dst))

    if not extra:
        span = {0: 256, 1: 32, 2: 64, 3: 128}
        for dt in [0, 9, 7, 8]:
            e = ESIZE[dt]
            W, H = 200 // e * 2 + 3, 70
            pitch = ((W * e + 15) // 16) * 16 + 32
            for sw in [0, 1, 2, 3]:
                inners = sorted({span[sw], span[sw] // 2, 16} - {8}) if sw else [16, 48, 128]
                for inner in inners:
                    b0 = inner // e
                    for rows in ([8, 64] if inner == span.get(sw) else [5]):
                        a = 16 // e
                        for coords in ([[0, 0], [b0 + a, 9], [-((b0 // 2) // a + 1) * a, -3],
                                        [((W - b0 // 2) // a) * a, H - 2], [((W + 5) // a + 1) * a, 0],
                                        [-1024, 1 << 20]] if rows == 8 else [[0, 0], [3 * a, 60]]):
                            add(dt, [W, H], [pitch], [b0, rows], coords, sw, tag="2d")
        # the course's tile: 64x64 bf16, 128B swizzle
        add(9, [256, 192], [512], [64, 64], [64, 128], 3, tag="course")
        add(9, [256, 192], [512], [64, 64], [200, 160], 3, tag="course-oob")
        # 1D
        add(0, [1000], [], [64], [960], 0, tag="1d")
        add(0, [1000], [], [64], [-32], 0, tag="1d")
        add(7, [300], [], [32], [0], 3, tag="1d")
        # 3D, 4D, 5D
        add(9, [40, 12, 5], [96, 96 * 12], [16, 4, 3], [8, 10, 3], 1, tag="3d")
        add(9, [40, 12, 5], [96, 96 * 12], [32, 4, 3], [-8, -1, -1], 2, tag="3d")
        add(7, [40, 12, 5], [176, 176 * 12], [32, 5, 2], [4, 2, 1], 3, tag="3d")
        add(6, [24, 5, 4, 3], [64, 320, 1280], [16, 2, 3, 2], [16, 4, 2, 2], 1, tag="4d")
        add(0, [48, 3, 3, 3, 4], [64, 192, 576, 1728], [32, 2, 2, 2, 2], [16, 2, 2, -1, 3], 2, tag="5d")
        # element strides
        add(9, [128, 64], [256], [64, 8], [0, 0], 3, estr=[1, 2], tag="estr")
        add(9, [128, 64], [256], [64, 8], [0, 1], 3, estr=[1, 3], tag="estr")
        add(9, [128, 64], [256], [64, 8], [0, 60], 0, estr=[1, 4], tag="estr")
        add(9, [128, 64], [256], [64, 8], [0, 0], 3, estr=[2, 1], tag="estr0")
        add(9, [128, 64], [256], [64, 8], [0, 0], 0, estr=[4, 1], tag="estr0")
        add(7, [32, 16, 8], [128, 2048], [32, 6, 5], [0, 3, 2], 3, estr=[1, 2, 3], tag="estr3d")
        # OOB fill with NaN
        add(9, [100, 70], [224], [64, 8], [56, -3], 3, oob=1, tag="nanfill")
        add(7, [100, 70], [416], [32, 8], [80, 66], 3, oob=1, tag="nanfill")
        add(6, [100, 70], [224], [64, 8], [-8, 0], 0, oob=1, tag="nanfill")
        # big boxes
        add(9, [256, 256], [512], [64, 256], [0, 0], 3, tag="big")
        add(0, [512, 300], [512], [128, 256], [400, 100], 3, tag="big")
        # dim-0 start not a multiple of 16 bytes (the hardware faults: recorded as such)
        add(0, [403, 70], [448], [16, 5], [7, 60], 0, tag="fault")
        add(0, [403, 70], [448], [16, 8], [-9, -3], 0, tag="fault")
        add(9, [128, 64], [256], [64, 8], [3, 0], 3, tag="fault")
        add(7, [100, 70], [416], [32, 8], [2, 0], 3, tag="fault")
        add(9, [128, 64], [256], [64, 8], [-1001, 0], 3, tag="fault")
        add(9, [128, 64], [256], [64, 8], [1001, 0], 0, tag="fault")
        add(8, [100, 70], [800], [16, 8], [1, 0], 3, tag="fault")
        add(8, [100, 70], [800], [16, 8], [2, 0], 3, tag="aligned")
    else:
        # destinations not aligned to the swizzle repeat (hardware swizzles on address bits)
        for sw in [1, 2, 3]:
            for dst in [128, 256, 384, 512, 896]:
                add(9, [200, 70], [416], [{1: 16, 2: 32, 3: 64}[sw], 16], [8, 2], sw, dst=dst, tag="dst")
        add(9, [200, 70], [416], [64, 16], [8, 2], 0, dst=16, tag="dst16")
        add(9, [200, 70], [416], [64, 16], [8, 2], 0, dst=48, tag="dst48")
    return cases


def _encode_for(c, addr):
    e = ESIZE[c["dtype"]]
    res, raw = encode_raw(c["dtype"], c["rank"], addr, c["dims"], c["strides"], c["box"], c["estr"],
                          0, c["swizzle"], 0, c["oob"])
    return res, raw, e


def gen_store_cases() -> list[dict]:
    cases = []

    def add(dtype, dims, strides, box, coords, sw=0):
        cases.append(dict(dtype=dtype, rank=len(dims), dims=dims, strides=strides, box=box, estr=[1] * len(dims),
                          swizzle=sw, oob=0, coords=coords, dst_offset=0))

    for sw, b0 in [(0, 64), (1, 16), (2, 32), (3, 64), (3, 32)]:
        add(9, [72, 40], [160], [b0, 16], [0, 0], sw)
        add(9, [72, 40], [160], [b0, 16], [40, 30], sw)
        add(9, [72, 40], [160], [b0, 16], [-8, -5], sw)
    add(7, [40, 12, 5], [176, 176 * 12], [32, 5, 2], [20, 10, 4], 3)
    add(0, [300], [], [128], [240], 0)
    add(9, [72, 40], [160], [64, 16], [3, 0], 0)
    return cases


def _alloc_for(c) -> int:
    e = ESIZE[c["dtype"]]
    extent = c["dims"][0] * e if c["rank"] == 1 else c["strides"][-1] * c["dims"][-1]
    return ((extent + 255) // 256) * 256 + 256


def tma_worker(kind: str, workdir: str, start: int):
    """Run cases from ``start``; each result goes to its own file so a fault loses only the faulting case."""
    init_driver()
    fn = load_function(compile_cubin(TMA_SRC, "tma"), "tma_store" if kind == "store" else "tma_load", DYN_SMEM)
    cases = gen_store_cases() if kind == "store" else gen_load_cases(kind == "tma_extra")
    status = dalloc(8)
    pbuf = dalloc(64)
    for i in range(start, len(cases)):
        c = dict(cases[i])
        with open(os.path.join(workdir, "pending"), "w") as f:
            f.write(str(i))
        e = ESIZE[c["dtype"]]
        rank = c["rank"]
        alloc = _alloc_for(c)
        c["alloc_bytes"] = alloc
        gptr = dalloc(alloc)
        h2d(gptr, np.full(alloc, 0xEE, np.uint8) if kind == "store" else global_pattern(alloc, e))
        res, raw, _ = _encode_for(c, gptr)
        c["encode_result"] = res
        nb = box_bytes(c)
        c["expect_bytes"] = nb
        tm = (ctypes.c_uint8 * 128).from_buffer_copy(raw)
        coords = bytes((ctypes.c_int32 * 6)(*(c["coords"] + [0] * (5 - rank)), rank))
        arr = None
        if res == 0 and kind == "store":
            sbuf = dalloc(nb)
            h2d(sbuf, global_pattern(nb, e))
            hostp = coords + bytes((ctypes.c_uint32 * 2)(0, nb)) + int(sbuf).to_bytes(8, "little")
            h2d(pbuf, np.frombuffer(hostp, np.uint8))
            launch(fn, 128, DYN_SMEM, [tm, ctypes.c_uint64(pbuf)])
            arr = d2h(gptr, alloc)
            dfree(sbuf)
        elif res == 0:
            window = min(((c["dst_offset"] + nb + 1024 + 15) // 16) * 16, DYN_SMEM - 1024)
            c["window"] = window
            obuf = dalloc(window)
            hostp = coords + bytes((ctypes.c_uint32 * 3)(c["dst_offset"], nb, window)) + b"\0" * 4 + \
                int(obuf).to_bytes(8, "little") + int(status).to_bytes(8, "little")
            h2d(pbuf, np.frombuffer(hostp, np.uint8))
            h2d(status, np.zeros(2, np.int32))
            launch(fn, 128, DYN_SMEM, [tm, ctypes.c_uint64(pbuf)])
            st = d2h(status, 8).view(np.int32)
            c["tx_complete"], c["tx_exact"] = int(st[0]), int(st[1])
            arr = d2h(obuf, window)
            dfree(obuf)
        dfree(gptr)
        c["fault"] = None
        if arr is not None:
            np.save(os.path.join(workdir, f"{i}.npy"), arr)
        with open(os.path.join(workdir, f"{i}.json"), "w") as f:
            json.dump(c, f)
        print(f"{kind} case {i}: encode {res} {c.get('tx_complete', '')}{c.get('tx_exact', '')}")


def run_resumable(kind: str, out: str):
    """Drive tma_worker in subprocesses, recording a case that kills its context as a fault, then going on."""
    workdir = os.path.join("/tmp", "capture_work_" + kind)
    os.makedirs(workdir, exist_ok=True)
    cases = gen_store_cases() if kind == "store" else gen_load_cases(kind == "tma_extra")
    start = 0
    while start < len(cases):
        pend = os.path.join(workdir, "pending")
        if os.path.exists(pend):
            os.remove(pend)
        r = subprocess.run([sys.executable, __file__, "--out", out, "--part", "worker", "--kind", kind,
                            "--start", str(start)], capture_output=True, text=True)
        print(r.stdout[-2000:], r.stderr[-1500:])
        if r.returncode == 0:
            break
        if not os.path.exists(pend):
            raise RuntimeError(f"worker for {kind} died before any case: {r.stderr[-2000:]}")
        i = int(open(pend).read())
        err = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"rc {r.returncode}"
        c = dict(cases[i], fault=err)
        with open(os.path.join(workdir, f"{i}.json"), "w") as f:
            json.dump(c, f)
        print(f"{kind} case {i}: FAULT {err}")
        start = i + 1
    done, arrays = [], {}
    for i in range(len(cases)):
        with open(os.path.join(workdir, f"{i}.json")) as f:
            done.append(json.load(f))
        npy = os.path.join(workdir, f"{i}.npy")
        if os.path.exists(npy):
            arrays[f"case{i}"] = np.load(npy)
    name = {"tma": "tma_loads", "tma_extra": "tma_loads_extra", "store": "tma_stores"}[kind]
    np.savez_compressed(os.path.join(out, name + ".npz"), **arrays)
    how = ("one CTA of 128 threads fills a 1024-aligned shared window with 0xA5, thread 0 issues "
           "cp.async.bulk.tensor (tile) to window+dst_offset with an mbarrier expecting expect_bytes; "
           "tx_complete = phase 0 completed, tx_exact = a following plain arrive completed phase 1 (no leftover "
           "tx); the window is copied out (npz caseI). Global tensor bytes: element i of the allocation = i+1 "
           "(little-endian, wrapped to the element width). fault = the error that killed the context.")
    if kind == "store":
        how = ("global buffer prefilled with 0xEE; a shared image of the box (element i = i+1) written at a "
               "1024-aligned shared address; cp.async.bulk.tensor store + commit + wait_group 0; the whole global "
               "buffer copied back (npz caseI). fault = the error that killed the context.")
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump({"meta": meta(), "how": how, "cases": done}, f)


# ---------------------------------------------------------------------------------------------- WGMMA

def wgmma_src(ns) -> str:
    head = r"""
struct MmaParams { unsigned long long desc_a, desc_b; int scale_d; unsigned img_bytes;
                   const unsigned char* img; const float* c_in; float* c_out; };
"""
    body = []
    for n in ns:
        r = n // 2
        outs = ", ".join(f"%{j}" for j in range(r))
        cons = ", ".join(f'"+f"(d[{j}])' for j in range(r))
        body.append(f"""
extern "C" __global__ void __launch_bounds__(128) wgmma_n{n}(const MmaParams* pp) {{
  extern __shared__ __align__(128) unsigned char dsmem[];
  MmaParams p = *pp;
  unsigned raw = (unsigned)__cvta_generic_to_shared(dsmem);
  unsigned aligned = (raw + 1023u) & ~1023u;
  unsigned char* base = dsmem + (aligned - raw);
  const uint4* src = reinterpret_cast<const uint4*>(p.img);
  uint4* dst = reinterpret_cast<uint4*>(base);
  for (unsigned i = threadIdx.x; i < p.img_bytes / 16; i += blockDim.x) dst[i] = src[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  float d[{r}];
  #pragma unroll
  for (int j = 0; j < {r}; ++j) d[j] = p.c_in[threadIdx.x * {r} + j];
  unsigned long long da = p.desc_a + (unsigned long long)((aligned >> 4) & 0x3FFF);
  unsigned long long db = p.desc_b + (unsigned long long)((aligned >> 4) & 0x3FFF);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile("{{ .reg .pred p; setp.ne.b32 p, %{r + 2}, 0;\\n"
               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{outs}}}, %{r}, %{r + 1}, p, 1, 1, 0, 0; }}"
               : {cons} : "l"(da), "l"(db), "r"(p.scale_d) : "memory");
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  #pragma unroll
  for (int j = 0; j < {r}; ++j) p.c_out[threadIdx.x * {r} + j] = d[j];
}}
""")
    return head + "".join(body)


WG_NS = [8, 16, 24, 32, 64, 96, 128, 192, 256]
IMG_BYTES = 64 * 1024


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even (inputs here are exactly representable anyway)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def make_desc(start, lbo, sbo, swz, base_offset=0) -> int:
    """Hopper shared-memory matrix descriptor: start>>4 [0,14), LBO>>4 [16,30), SBO>>4 [32,46),
    base offset [49,52), layout (0 none, 1 128B, 2 64B, 3 32B) [62,64)."""
    return ((start >> 4) & 0x3FFF) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | \
        ((base_offset & 7) << 49) | ((swz & 3) << 62)


def sw128_image(mat_bits: np.ndarray, img: np.ndarray, offset: int):
    """Write a (rows, 64) bf16 matrix (bits) K-major into img at offset, 128B swizzle (chunk c of row r at
    chunk c ^ (r % 8))."""
    rows = mat_bits.shape[0]
    b = mat_bits.reshape(rows, 8, 8)  # row, chunk, element
    for r in range(rows):
        for c in range(8):
            pos = offset + r * 128 + ((c ^ (r % 8)) * 16)
            img[pos:pos + 16] = b[r, c].view(np.uint8)


def part_wgmma(out: str, desc_part: bool):
    init_driver()
    ns = WG_NS if not desc_part else [8, 64]
    cub = compile_cubin(wgmma_src(ns), "wgmma")
    fns = {n: load_function(cub, f"wgmma_n{n}", IMG_BYTES + 2048) for n in ns}
    ibuf = dalloc(IMG_BYTES)
    cbuf = dalloc(128 * 128 * 4)
    obuf = dalloc(128 * 128 * 4)
    pbuf = dalloc(64)
    cases, arrays = [], {}

    def run(n, img, desc_a, desc_b, c_in, scale_d, tag, extra=None):
        h2d(ibuf, img)
        h2d(cbuf, c_in.astype(np.float32))
        hostp = int(desc_a).to_bytes(8, "little") + int(desc_b).to_bytes(8, "little") + \
            int(scale_d).to_bytes(4, "little", signed=True) + int(IMG_BYTES).to_bytes(4, "little") + \
            int(ibuf).to_bytes(8, "little") + int(cbuf).to_bytes(8, "little") + int(obuf).to_bytes(8, "little")
        h2d(pbuf, np.frombuffer(hostp, np.uint8))
        launch(fns[n], 128, IMG_BYTES + 2048, [ctypes.c_uint64(pbuf)])
        res = d2h(obuf, 128 * (n // 2) * 4).view(np.float32).reshape(128, n // 2)
        i = len(cases)
        key_img = extra.pop("img_key") if extra and "img_key" in extra else None
        cases.append(dict(tag=tag, n=n, desc_a=str(desc_a), desc_b=str(desc_b), scale_d=scale_d,
                          img=key_img, **(extra or {})))
        arrays[f"out{i}"] = res
        if scale_d:
            arrays[f"cin{i}"] = c_in.astype(np.float32)
        print(f"wgmma case {i} {tag} n={n}")
        return res

    rng = np.random.default_rng(7)
    try:
        _wgmma_cases(desc_part, ns, run, arrays, rng)
    finally:
        name = "wgmma_desc" if desc_part else "wgmma"
        np.savez_compressed(os.path.join(out, name + ".npz"), **arrays)
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump({"meta": meta(), "how": "one warpgroup copies a 64 KiB image (npz img_*) into a 1024-aligned "
                       "shared buffer, loads c_in as accumulators (thread, register), runs one wgmma.mma_async "
                       "m64nNk16.f32.bf16.bf16 with the given descriptors (start address field relative to the "
                       "buffer; the kernel adds the buffer's address>>4) and scale-d predicate, and writes the "
                       "accumulators out[thread, register]", "cases": cases}, f)


def _wgmma_cases(desc_part, ns, run, arrays, rng):
    if not desc_part:
        # identifiable: A[r,0]=r, A[r,1]=1; B[c,0]=256, B[c,1]=c  ->  D[r,c] = 256 r + c
        A = np.zeros((64, 64), np.float32)
        A[:, 0] = np.arange(64)
        A[:, 1] = 1
        for n in ns:
            B = np.zeros((n, 64), np.float32)
            B[:, 0] = 256
            B[:, 1] = np.arange(n)
            img = np.zeros(IMG_BYTES, np.uint8)
            sw128_image(_bf16_bits(A), img, 0)
            sw128_image(_bf16_bits(B), img, 8192)
            arrays[f"img_ident{n}"] = img
            run(n, img, make_desc(0, 16, 1024, 1), make_desc(8192, 16, 1024, 1), np.zeros((128, n // 2)), 0,
                "ident", {"img_key": f"img_ident{n}"})
        # small random integers, every K step, with and without accumulation
        for n in ns:
            A = rng.integers(-3, 4, (64, 64)).astype(np.float32)
            B = rng.integers(-3, 4, (n, 64)).astype(np.float32)
            img = np.zeros(IMG_BYTES, np.uint8)
            sw128_image(_bf16_bits(A), img, 0)
            sw128_image(_bf16_bits(B), img, 8192)
            arrays[f"img_int{n}"] = img
            for k in range(4):
                c_in = rng.integers(-64, 65, (128, n // 2)).astype(np.float32)
                run(n, img, make_desc(32 * k, 16, 1024, 1), make_desc(8192 + 32 * k, 16, 1024, 1), c_in,
                    int(k % 2 == 1), "int", {"img_key": f"img_int{n}", "kstep": k})
            # scale_d = 0 with a nonzero c_in (must be ignored)
            run(n, img, make_desc(0, 16, 1024, 1), make_desc(8192, 16, 1024, 1),
                rng.integers(-64, 65, (128, n // 2)).astype(np.float32), 0, "int-scale0",
                {"img_key": f"img_int{n}"})
        # random normal data for the numerics (rounding) model
        for n, wide in [(64, False), (256, False), (256, True), (128, True)]:
            A = rng.standard_normal((64, 64)).astype(np.float32)
            B = rng.standard_normal((n, 64)).astype(np.float32)
            if wide:
                A *= np.exp2(rng.integers(-12, 13, A.shape)).astype(np.float32)
                B *= np.exp2(rng.integers(-12, 13, B.shape)).astype(np.float32)
            img = np.zeros(IMG_BYTES, np.uint8)
            sw128_image(_bf16_bits(A), img, 0)
            sw128_image(_bf16_bits(B), img, 8192)
            key = f"img_rand{n}_{int(wide)}"
            arrays[key] = img
            for k in range(2):
                c_in = rng.standard_normal((128, n // 2)).astype(np.float32) * (64 if wide else 4)
                run(n, img, make_desc(32 * k, 16, 1024, 1), make_desc(8192 + 32 * k, 16, 1024, 1), c_in,
                    1, "rand-wide" if wide else "rand", {"img_key": key, "kstep": k})
    else:
        # one image of small random integers everywhere; descriptors pick various regions / layouts
        vals = rng.integers(-3, 4, IMG_BYTES // 2).astype(np.float32)
        img = _bf16_bits(vals).view(np.uint8).copy()
        arrays["img_desc"] = img
        starts = [0, 16, 32, 48, 64, 96, 128, 256, 512, 1024, 1056, 2048 + 96, 4096 + 16]
        lbos = [0, 16, 64, 128, 256, 1024, 2048]
        sbos = [0, 16, 128, 256, 512, 1024, 2048]
        combos = []
        for swz in [0, 1, 2, 3]:
            combos.append((swz, 0, {0: 128, 1: 16, 2: 16, 3: 16}[swz], {0: 256, 1: 1024, 2: 512, 3: 256}[swz], 0))
        r2 = random.Random(11)
        for _ in range(84):
            combos.append((r2.choice([0, 1, 2, 3]), r2.choice(starts), r2.choice(lbos), r2.choice(sbos),
                           r2.choice([0, 0, 0, 1, 3, 7])))
        for j, (swz, st, lbo, sbo, bo) in enumerate(combos):
            n = 64 if j % 4 else 8
            # vary A's descriptor in even cases, B's in odd ones; the other one is a plain valid one
            plain_a = make_desc(8192, 128, 256, 0)
            plain_b = make_desc(16384, 128, 256, 0)
            vd = make_desc(st, lbo, sbo, swz, bo)
            da, db = (vd, plain_b) if j % 2 == 0 else (plain_a, vd)
            run(n, img, da, db, np.zeros((128, n // 2)), 0, "desc",
                {"img_key": "img_desc", "varied": "a" if j % 2 == 0 else "b",
                 "start": st, "lbo": lbo, "sbo": sbo, "swizzle_field": swz, "base_offset": bo})


def run_one(kind, c, repeat):
    init_driver()
    fn = load_function(compile_cubin(TMA_SRC, "tma"), "tma_load" if kind == "load" else "tma_store", DYN_SMEM)
    e = ESIZE[c["dtype"]]
    extent = c["dims"][0] * e if c["rank"] == 1 else c["strides"][-1] * c["dims"][-1]
    alloc = ((extent + 255) // 256) * 256 + 256
    gptr = dalloc(alloc)
    h2d(gptr, global_pattern(alloc, e))
    res, raw, _ = _encode_for(c, gptr)
    print("encode", res)
    nb = box_bytes(c)
    pbuf = dalloc(64)
    tm = (ctypes.c_uint8 * 128).from_buffer_copy(raw)
    for _ in range(repeat):
        if kind == "load":
            status = dalloc(8)
            window = nb + 1024
            obuf = dalloc(window)
            hostp = bytes((ctypes.c_int32 * 6)(*(c["coords"] + [0] * (5 - c["rank"])), c["rank"])) + \
                bytes((ctypes.c_uint32 * 3)(0, nb, window)) + b"\0" * 4 + int(obuf).to_bytes(8, "little") + \
                int(status).to_bytes(8, "little")
            h2d(pbuf, np.frombuffer(hostp, np.uint8))
            launch(fn, 128, DYN_SMEM, [tm, ctypes.c_uint64(pbuf)])
            print("ok", d2h(status, 8).view(np.int32))
        else:
            sbuf = dalloc(nb)
            h2d(sbuf, global_pattern(nb, e))
            hostp = bytes((ctypes.c_int32 * 6)(*(c["coords"] + [0] * (5 - c["rank"])), c["rank"])) + \
                bytes((ctypes.c_uint32 * 2)(0, nb)) + int(sbuf).to_bytes(8, "little")
            h2d(pbuf, np.frombuffer(hostp, np.uint8))
            launch(fn, 128, DYN_SMEM, [tm, ctypes.c_uint64(pbuf)])
            print("ok")


# ------------------------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "silicon_out"))
    ap.add_argument("--part", default="all", choices=["all", "diag", "one", "worker"] + PARTS)
    ap.add_argument("--case", default="")
    ap.add_argument("--kind", default="load")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--parts", default="", help="comma-separated subset of parts for --part all")
    args = ap.parse_args()
    if args.part == "diag":
        diag = [("load", dict(dtype=0, rank=2, dims=[403, 70], strides=[448], box=[16, 5], estr=[1, 1], swizzle=0,
                              oob=0, coords=[0, 0], dst_offset=0), 2)]
        for co in ([16, 60], [7, 60], [0, 60], [-16, 0], [-9, -3]):
            diag.append(("load", dict(diag[0][1], coords=co), 1))
        diag.append(("load", dict(dtype=9, rank=2, dims=[256, 192], strides=[512], box=[64, 64], estr=[1, 1],
                                  swizzle=3, oob=0, coords=[64, 128], dst_offset=0), 1))
        st = dict(dtype=9, rank=2, dims=[72, 40], strides=[160], box=[64, 16], estr=[1, 1], swizzle=0, oob=0,
                  coords=[0, 0], dst_offset=0)
        diag += [("store", st, 1), ("store", dict(st, swizzle=3), 1), ("store", dict(st, dims=[64, 40]), 1),
                 ("store", dict(st, strides=[256], dims=[128, 40]), 1)]
        for kind, c, rep in diag:
            r = subprocess.run([sys.executable, __file__, "--out", args.out, "--part", "one", "--kind", kind,
                                "--case", json.dumps(c), "--repeat", str(rep)], capture_output=True, text=True)
            print(kind, c["coords"], c["swizzle"], c["dims"], "rc", r.returncode, r.stdout.strip()[-300:],
                  r.stderr.strip()[-200:])
        return
    if args.part == "one":
        run_one(args.kind, json.loads(args.case), args.repeat)
        return
    os.makedirs(args.out, exist_ok=True)
    if args.part == "all":
        summary = {}
        for part in (args.parts.split(",") if args.parts else PARTS):
            t0 = time.time()
            r = subprocess.run([sys.executable, __file__, "--out", args.out, "--part", part])
            summary[part] = {"rc": r.returncode, "seconds": round(time.time() - t0, 2)}
            print(f"== part {part}: rc={r.returncode} in {time.time() - t0:.1f}s", flush=True)
        print(json.dumps(summary))
        return
    if args.part == "encode":
        init_driver()
        part_encode(args.out)
    elif args.part == "encode2":
        init_driver()
        part_encode2(args.out)
    elif args.part in ("tma", "tma_extra", "store"):
        init_driver()
        run_resumable(args.part, args.out)
    elif args.part == "worker":
        tma_worker(args.kind, os.path.join("/tmp", "capture_work_" + args.kind), args.start)
    elif args.part in ("wgmma", "wgmma_desc"):
        init_driver()
        part_wgmma(args.out, args.part == "wgmma_desc")


if __name__ == "__main__":
    _ = math
    main()
