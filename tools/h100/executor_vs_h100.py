"""Truth from silicon for the PTX executor: run every course kernel and the corpus of kernels in published style
(tests/ptx/foreign.py: cuda::ptx calls, 5-D maps, multicast, spills, the wgmma ladder, setmaxnreg, a persistent TMA
transpose, maps by value and by pointer, ...) on the H100 and on the executor with the same random inputs and compare
the outputs bit for bit; compare the failure sentences of the demo kernels, ask the driver and the executor about the
same launches (launch_refusals: which it refuses, with which error), keep ptxas's report of each foreign kernel, and
run a launch whose tensor map outlives its array (freed_maps: what the H100 reads there; the executor refuses it).

    python tools/h100/executor_vs_h100.py          # on a machine with one H100, from the repository root
    python tools/h100/executor_vs_h100.py --dry    # without a GPU: checks the script (emulator against itself)
    -> $OUT/ptx_vs_<gpu>.json, e.g. ptx_vs_h200.json (copy it to tests/data/; tests/ptx/test_silicon.py asserts it)
       and a summary

GPU time: well under a minute (the emulator runs on this machine's CPU; about a minute of CPU in all).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ptx"))


DRY = "--dry" in sys.argv  # plumbing check without a GPU: the "GPU" side runs on the emulator too
#: the record of Lab 9's kernel with 128×128 tiles (-DLAB9_BN=128, what gpu.matmul runs where 128×256 tiles are few
#: and the narrow ones need Stream-K)
NARROW_CASE = "lab9 Stream-K, 128x128 tiles"
#: the record of Lab 7's kernel with 128×128 tiles (-DLAB7_BN=128: one consumer warpgroup computes a whole tile), what
#: gpu.matmul runs where those tiles fill their wave of clusters
ONE_CONSUMER_CASE = "lab7 128x128 tiles, one consumer warpgroup"
#: the records of Lab 9's kernel as gpu.matmul builds it (gemm.OPTIONS: the parallel fix-up and the producer's
#: tail), at both tile widths
PARALLEL_CASE = "lab9 Stream-K, parallel fix-up"
#: the records of Lab 7's kernel as gpu.matmul builds it (gemm.OPTIONS: the producer's tail instead of the last cluster
#: barrier), at both tile widths
TAIL_CASE = "lab7 as gpu.matmul builds it, producer tail"


def _mode(mode: str) -> None:
    os.environ["HELPERS_EXECUTOR"] = "force" if DRY else {"gpu": "off", "emulator": "force"}[mode]


def _solutions() -> dict[str, Any]:
    """The solution notebooks' names (imports cell and solution cells executed), without nbformat if need be."""
    ns: dict[str, Any] = {}
    for nb in ("lab1_tma", "lab2_mbarrier", "lab3_wgmma"):  # the CUDA strings of Labs 1-3 (wrappers + kernels)
        path = ROOT / "solutions" / f"{nb}.ipynb"
        try:
            from helpers.course import labgen

            ns.update(labgen.solution_namespace(path))
        except ImportError:
            cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
            src = ["".join(c["source"]) for c in cells]
            exec(src[0], ns)  # noqa: S102
            for c, s in zip(cells[1:], src[1:], strict=True):
                if c.get("metadata", {}).get("nbgrader", {}).get("solution"):
                    exec(s, ns)  # noqa: S102
    return ns


def _lesson_kernel(nb: str, name: str) -> str:
    """The CUDA string of a lesson's code cell that defines kernel ``name`` (read without nbformat)."""
    from helpers.course import ptx_coverage as coverage

    path = next((ROOT / "lessons").glob(f"{nb}*.ipynb"))
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            for src in coverage._cuda_strings("".join(cell["source"])):
                if name in coverage.kernel_names(src):
                    return src
    raise KeyError(name)


# ------------------------------------------------------------------------------------------- the cases
def _gemm(src: str, name: str, m: int, n: int, k: int, grid: Any, block: int, smem: int, box_a: tuple[int, int],
          box_b: tuple[int, int], seed: int) -> Callable[[], np.ndarray]:
    from helpers import gpu

    a = gpu.random_host((m, k), gpu.bfloat16, seed=seed)
    b = gpu.random_host((n, k), gpu.bfloat16, seed=seed + 1)

    def run() -> np.ndarray:
        kern = gpu.compile(src, name)
        da, db, dc = gpu.to_device(a), gpu.to_device(b), gpu.poison((m, n), np.float32)
        gpu.launch(kern, grid, block, smem, gpu.tensor_map_2d(da, *box_a), gpu.tensor_map_2d(db, *box_b), dc,
                   np.int32(m), np.int32(n), np.int32(k))
        return dc.to_host()

    return run


def cases() -> dict[str, tuple[str, Callable[[], Any]]]:
    """name -> (shape, run) where run() gives the kernel's outputs (numpy) in the current mode."""
    from kernels import LAB2_GEMM, WS_GEMM, ws_smem
    from test_clusters import CLUSTER
    from test_control import DIVERGE, FLAGS, LOCAL_CALLS, MATRIX, NAMED, WARP

    from helpers import gpu
    from helpers.gpu import examples
    from helpers.gpu.executor.probes import ALU_OPS, ALU_PROBE, SMEM_LAYOUT_PROBE, alu_inputs

    sol = _solutions()
    out: dict[str, tuple[str, Callable[[], Any]]] = {}

    a, b, c = alu_inputs(4096, seed=2026)

    def alu() -> np.ndarray:
        k = gpu.compile(ALU_PROBE, "alu_probe")
        o = gpu.poison(len(ALU_OPS) * len(a), np.uint32)
        gpu.launch(k, len(a) // 128, 128, 0, gpu.to_device(a), gpu.to_device(b), gpu.to_device(c), o, np.int32(len(a)))
        return o.to_host().reshape(len(ALU_OPS), len(a))

    out["alu_probe"] = (f"{len(ALU_OPS)} ops x {len(a)} operand triples", alu)

    x, y = (np.random.default_rng(s).standard_normal(5000).astype(np.float32) for s in (1, 2))

    def vadd() -> np.ndarray:
        k = gpu.compile(examples.VECTOR_ADD, "vadd")
        o = gpu.poison(5000, np.float32)
        gpu.launch(k, 40, 128, 0, gpu.to_device(x), gpu.to_device(y), o, np.int32(5000), np.float32(0.75))
        return o.to_host()

    out["vadd"] = ("n=5000", vadd)

    tile_src = gpu.random_host((128, 192), gpu.bfloat16, seed=3).view(np.uint16)

    lab1 = '#include "hopper.cuh"\n' + sol["TMA_LOAD"] + sol["LAB1_KERNEL"]

    def copy_tiles() -> np.ndarray:
        k = gpu.compile(lab1, "lab1_copy")
        da = gpu.to_device(tile_src)
        o = gpu.poison((128, 192), np.uint16)
        gpu.launch(k, (3, 2), 128, 0, gpu.tensor_map_2d(da, 64, 64), da, o, np.int32(192))
        return o.to_host()

    out["lab1 lab1_copy"] = ("128x192 bf16", copy_tiles)

    def one_tile() -> np.ndarray:
        k = gpu.compile(_lesson_kernel("01_tma", "tma_one_tile"), "tma_one_tile")
        dev = gpu.to_device(tile_src)
        res = []
        for coords in [(0, 0), (64, 64), (128, 0)]:
            o = gpu.poison(8192, np.uint8)
            gpu.launch(k, 1, 128, 0, gpu.tensor_map_2d(dev, 64, 64, swizzle=128), o, np.int32(coords[0]),
                       np.int32(coords[1]))
            res.append(o.to_host())
        return np.stack(res)

    out["lesson01 tma_one_tile"] = ("3 boxes, 128B swizzle", one_tile)
    wrappers = '#include "hopper.cuh"\n' + sol["TMA_LOAD"] + sol["MBAR_INIT_ARRIVE"] + sol["MBAR_TX_WAIT"]
    out["lab2_gemm (CUDA cores)"] = ("128x128x256", _gemm(wrappers + sol["LAB2_KERNEL"], "lab2_gemm", 128, 128, 256,
                                                          (2, 2), 128, 0, (64, 64), (64, 64), 5))
    out["lab2_gemm (lineage)"] = ("128x128x256", _gemm(LAB2_GEMM, "lab2_gemm", 128, 128, 256, (2, 2), 128, 0,
                                                        (64, 64), (64, 64), 5))
    out["lab3_gemm"] = ("256x192x320", _gemm(wrappers + sol["WGMMA"] + sol["LAB3_KERNEL"], "lab3_gemm", 256, 192,
                                             320, (3, 4), 128, 0, (64, 64), (64, 64), 6))
    out.update(_ladder_cases())
    bench = (ROOT / "bench" / "kernels" / "gemm_64x64.cu").read_text()
    out["bench gemm_64x64"] = ("256x256x256", _gemm(bench, "gemm_64x64", 256, 256, 256, (4, 4), 128, 0, (64, 64),
                                                    (64, 64), 7))
    for bn, stages, regs, preg in ((128, 4, 232, 40), (256, 3, 240, 24)):
        src = f"#define BN {bn}\n#define STAGES {stages}\n#define CONSUMER_REGS {regs}\n#define PRODUCER_REGS {preg}\n"
        out[f"ws_gemm 128x{bn}"] = ("256x256x512", _gemm(src + WS_GEMM, "ws_gemm", 256, 256, 512, (256 // bn, 2), 384,
                                                          ws_smem(bn, stages), (128, 64), (bn, 64), 8))

    probe_src = _lesson_kernel("03_wgmma", "probe")
    pa = gpu.random_host((64, 64), gpu.bfloat16, seed=9).view(np.uint16)
    pb = gpu.random_host((64, 64), gpu.bfloat16, seed=10).view(np.uint16)

    def wgmma_probe() -> np.ndarray:
        k = gpu.compile(probe_src, "probe")
        res = []
        for off in (0, 16, 32):
            o = gpu.poison(128 * 32, np.float32)
            gpu.launch(k, 1, 128, 0, gpu.to_device(pa), gpu.to_device(pb), o, np.int32(off))
            res.append(o.to_host())
        return np.stack(res)

    out["lesson03 wgmma probe"] = ("offsets 0, 16, 32", wgmma_probe)

    cl_src = gpu.random_host((128, 64), gpu.bfloat16, seed=11).view(np.uint16)

    def cluster(size: int) -> Callable[[], np.ndarray]:
        def run() -> np.ndarray:
            k = gpu.compile(CLUSTER, "cluster_demo")
            ids, tiles = gpu.poison(2 * size, np.int32), gpu.poison((2 * size, 64, 64), np.uint16)
            dsrc = gpu.to_device(cl_src)  # held until the launch is done: a tensor map holds only the address
            gpu.launch(k, 2 * size, 128, 0, gpu.tensor_map_2d(dsrc, 64, 64, swizzle=0), ids, tiles,
                       cluster=(size, 1, 1))
            return np.concatenate([ids.to_host().view(np.uint32).astype(np.uint16), tiles.to_host().ravel()])

        return run

    out["cluster_demo x2"] = ("cluster of 2", cluster(2))
    out["cluster_demo x4"] = ("cluster of 4", cluster(4))

    def layout() -> np.ndarray:
        k = gpu.compile(SMEM_LAYOUT_PROBE, "smem_layout")
        o = gpu.poison(16, np.uint32)
        gpu.launch(k, 2, 32, 256, o, cluster=(2, 1, 1))
        return o.to_host()

    out["shared-memory layout"] = ("static vars, dynamic base, cluster ranks", layout)

    ints = np.random.default_rng(12).integers(0, 20, 96).astype(np.int32)

    def diverge() -> np.ndarray:
        k = gpu.compile(DIVERGE, "diverge")
        o = gpu.poison(96, np.int32)
        gpu.launch(k, 1, 96, 0, gpu.to_device(ints), o)
        return o.to_host()

    out["divergence"] = ("96 threads", diverge)
    wv = np.random.default_rng(13).integers(0, 100, 64).astype(np.int32)

    def warp() -> np.ndarray:
        k = gpu.compile(WARP, "warp_ops")
        o = gpu.poison(640, np.int32)
        gpu.launch(k, 1, 64, 0, gpu.to_device(wv), o)
        return o.to_host()

    out["warp collectives"] = ("64 threads", warp)
    idx = np.random.default_rng(14).integers(0, 12, 32).astype(np.int32)

    def local_calls() -> np.ndarray:
        k = gpu.compile(LOCAL_CALLS, "local_calls")
        o = gpu.poison(32, np.float32)
        gpu.launch(k, 1, 32, 0, gpu.to_device(idx), o)
        return o.to_host()

    out["local memory and calls"] = ("32 threads", local_calls)

    def named() -> np.ndarray:
        k = gpu.compile(NAMED, "named")
        o = gpu.poison(64, np.int32)
        gpu.launch(k, 1, 128, 0, o)
        return o.to_host()

    out["named barriers"] = ("128 threads", named)
    mats = np.random.default_rng(15).integers(0, 1 << 16, (4, 8, 8)).astype(np.uint16)

    def matrix() -> np.ndarray:
        k = gpu.compile(MATRIX, "matrix_ops")
        regs, o = gpu.poison(256, np.uint32), gpu.poison(256, np.uint16)
        gpu.launch(k, 1, 32, 0, gpu.to_device(mats), regs, o)
        return np.concatenate([regs.to_host().view(np.uint16), o.to_host()])

    out["ldmatrix/stmatrix"] = ("x4, plain and .trans", matrix)

    def handoff() -> np.ndarray:
        k = gpu.compile(FLAGS, "handoff")
        o = gpu.poison(32, np.float32)
        gpu.launch(k, 2, 64, 0, gpu.zeros(32), gpu.zeros(1, np.uint32), o)
        return o.to_host()

    out["acquire/release between blocks"] = ("2 blocks", handoff)
    from foreign import cases as foreign_cases  # kernels in the idioms of published Hopper code

    for name, (shape, run, _want) in foreign_cases().items():
        out[f"foreign: {name}"] = (shape, run)
    from foreign_tensor import cases as tensor_cases  # the same around the warp-level tensor cores

    for name, (shape, run, _want) in tensor_cases().items():
        out[f"foreign: {name}"] = (shape, run)
    return out


#: The launches the driver is asked about (and the executor's launch rules must answer the same): the case of a
#: kernel in published style the H100 refused (grid 4, 128 threads, 32 KB dynamic shared memory, two static
#: mbarriers, tensor maps by pointer) taken apart one feature at a time, and one launch per rule.
REFUSAL_SRC = r'''
#define BODY { __shared__ alignas(8) unsigned long long full, empty; extern __shared__ unsigned char dyn[]; \
  if (threadIdx.x == 0) { full = (unsigned long long)a; empty = (unsigned long long)b; dyn[0] = 1; } \
  __syncthreads(); if (threadIdx.x == 0 && o) o[blockIdx.x] = int(full != empty) + dyn[0]; }
extern "C" __global__ void probe(const void* a, const void* b, int* o) BODY
extern "C" __global__ void __cluster_dims__(2, 1, 1) probe_cluster(const void* a, const void* b, int* o) BODY
extern "C" __global__ void __launch_bounds__(64) bounds64(const void* a, const void* b, int* o) BODY
extern "C" __global__ void __launch_bounds__(128, 1, 2) rank2(const void* a, const void* b, int* o) BODY
extern "C" __global__ void big_static(const void* a, const void* b, int* o) {
  __shared__ unsigned char pad[40 * 1024];
  pad[threadIdx.x] = 1; __syncthreads(); if (threadIdx.x == 0 && o) o[blockIdx.x] = pad[5]; }
'''
REFUSALS = [  # (name, kernel, grid, block, dynamic smem, cluster)
    ("grid 4, 128 threads, 32 KB dynamic, 2 static mbarriers, maps by pointer", "probe", 4, 128, 32768, None),
    ("the same with __cluster_dims__(2), no launch cluster", "probe_cluster", 4, 128, 32768, None),
    ("__cluster_dims__(2) and the same launch cluster", "probe_cluster", 4, 128, 32768, (2, 1, 1)),
    ("__cluster_dims__(2) and a launch cluster of 4", "probe_cluster", 4, 128, 32768, (4, 1, 1)),
    ("__cluster_dims__(2) on a grid of 3", "probe_cluster", 3, 128, 0, None),
    ("__launch_bounds__(64) launched with 128 threads", "bounds64", 4, 128, 0, None),
    ("__launch_bounds__(128, 1, 2) in clusters of 4", "rank2", 4, 128, 0, (4, 1, 1)),
    ("grid y of 70000", "probe", (1, 70000), 32, 0, None),
    ("block z of 128", "probe", 1, (1, 1, 128), 0, None),
    ("40 KB static + 16 KB dynamic (the course opts in)", "big_static", 2, 128, 16384, None),
    ("clusters of 16 (the course allows non-portable sizes)", "probe", 16, 128, 16, (16, 1, 1)),
]


def launch_refusals() -> list[dict[str, Any]]:
    """Each launch of REFUSALS on the GPU and on the executor: 'ok' or the driver's error name, and the sentence."""
    from helpers import gpu

    out = []
    for name, kernel, grid, block, smem, cluster in REFUSALS:
        got = {}
        for mode in ("gpu", "emulator"):
            _mode(mode)
            try:
                k = gpu.compile(REFUSAL_SRC, kernel)
                o = gpu.zeros(70000, np.int32)
                gpu.launch(k, grid, block, smem, gpu.zeros(16, np.uint8), gpu.zeros(16, np.uint8), o,
                           cluster=cluster)
                got[mode] = ("ok", "")
            except gpu.GpuError as e:
                m = re.search(r"\[(CUDA_ERROR_\w+)\]", str(e))
                got[mode] = (m.group(1) if m else type(e).__name__, str(e))
        out.append({"launch": name, "gpu": got["gpu"][0], "emulator": got["emulator"][0],
                    "gpu_sentence": got["gpu"][1], "emulator_sentence": got["emulator"][1],
                    "identical": got["gpu"][0] == got["emulator"][0]})
        print(f"{name}: GPU {got['gpu'][0]}, executor {got['emulator'][0]}")
    _mode("gpu")
    return out


def _ladder_cases() -> dict[str, tuple[str, Callable[[], Any]]]:
    """The ladder's kernels (bench/kernels, the same code as the Labs 4-7 solutions) on small shapes: Lab 5-7 on
    shapes with partial tiles, Labs 6-7 on 2 and 3 clusters so each cluster takes several pairs / pieces."""
    from helpers import gpu

    kdir = ROOT / "bench" / "kernels"
    out: dict[str, tuple[str, Callable[[], Any]]] = {}
    out["lab4 128x128 ring"] = ("256x256x320", _gemm((kdir / "lab4_128x128.cu").read_text(), "lab4_gemm_128x128",
                                                      256, 256, 320, (2, 2), 384, 4 * 32 * 1024 + 1024, (128, 64),
                                                      (128, 64), 21))
    out["lab4 128x256 warp-specialized"] = ("256x512x320", _gemm((kdir / "lab4_ws.cu").read_text(), "lab4_gemm_ws",
                                                                  256, 512, 320, (2, 2), 384, 4 * 48 * 1024 + 1024,
                                                                  (128, 64), (256, 64), 22))
    smem = 4 * 48 * 1024 + 32 * 1024 + 1024

    def bf16_gemm(file: str, name: str, m: int, n: int, k: int, seed: int, grid: Any, cluster: Any = None,
                  streamk: int = 0, bn: int = 256, options: tuple[str, ...] = ()) -> Callable[[], np.ndarray]:
        a = gpu.random_host((m, k), gpu.bfloat16, seed=seed)
        b = gpu.random_host((n, k), gpu.bfloat16, seed=seed + 1)

        def run() -> np.ndarray:
            from helpers.gpu import gemm

            # the tile width: LAB7_BN or LAB9_BN
            width = () if bn == 256 else (f"-D{file[:4].upper()}_BN={bn}",)
            kern = gpu.compile((kdir / file).read_text(), name, options=width + options)
            da, db = gpu.to_device(a), gpu.to_device(b)
            dc = gpu.poison((m, n), gpu.bfloat16)
            box_b = (256, 64) if cluster is None else (bn // 2, 64)
            extra = ()
            if streamk:
                extra = (gpu.zeros((streamk * 2 * 128 * bn,), np.float32), gpu.zeros((streamk * 2,), np.uint32))
            gpu.launch(kern, grid, 384, smem if bn == 256 else gemm.smem_bytes(bn), gpu.tensor_map_2d(da, 128, 64),
                       gpu.tensor_map_2d(db, *box_b), gpu.tensor_map_2d(dc, 64, 64), np.int32(m), np.int32(n),
                       np.int32(k), *extra, cluster=cluster)
            return dc.to_host()

        return run

    out["lab5 TMA-store epilogue"] = ("264x520x200", bf16_gemm("lab5_epilogue.cu", "lab5_gemm", 264, 520, 200, 23,
                                                               (3, 3)))

    def fused_gemm(m: int, n: int, k: int, seed: int) -> Callable[[], np.ndarray]:
        from helpers.gpu import gemm

        a = gpu.random_host((m, k), gpu.bfloat16, seed=seed)
        b = gpu.random_host((n, k), gpu.bfloat16, seed=seed + 1)
        c = gpu.random_host((m, n), gpu.bfloat16, seed=seed + 2)
        bias = np.random.default_rng(seed + 3).standard_normal(n).astype(np.float32)

        def run() -> np.ndarray:
            dd = gpu.poison((m, n), gpu.bfloat16)
            kern = gpu.compile(gemm.fused_source("gelu", "f32"), "lab5_fused")
            da, db, dc, dbias = gpu.to_device(a), gpu.to_device(b), gpu.to_device(c), gpu.to_device(bias)
            gemm.fused_launcher(kern, da, db, dc, dd, alpha=1.25, beta=-0.5, bias=dbias)()
            gpu.wait()
            return dd.to_host()

        return run

    out["lab5 fused epilogue (β·C, fp32 bias, GELU)"] = ("264x520x200", fused_gemm(264, 520, 200, 26))
    out["lab6 persistent"] = ("264x296x200 on 2 blocks", bf16_gemm(
        "lab6_persistent.cu", "lab6_gemm", 264, 296, 200, 27, (2, 1, 1)))
    # the next two names are the records of tests/data/ptx_vs_h100.json, captured before the labs were renumbered:
    # "lab6 persistent clusters" is today's Lab 7 kernel, "lab7 Stream-K" today's Lab 9
    out["lab6 persistent clusters"] = ("776x520x200 on 2 clusters", bf16_gemm(
        "lab7_clusters.cu", "lab7_gemm", 776, 520, 200, 24, (4, 1, 1), cluster=(2, 1, 1)))
    out["lab7 Stream-K"] = ("520x264x1000 on 4 clusters", bf16_gemm(
        "lab9_streamk.cu", "lab9_gemm", 520, 264, 1000, 25, (8, 1, 1), cluster=(2, 1, 1), streamk=4))
    out[ONE_CONSUMER_CASE] = ("776x520x200 on 2 clusters", bf16_gemm(
        "lab7_clusters.cu", "lab7_gemm", 776, 520, 200, 30, (4, 1, 1), cluster=(2, 1, 1), bn=128))
    out[NARROW_CASE] = ("520x264x1000 on 4 clusters", bf16_gemm(
        "lab9_streamk.cu", "lab9_gemm", 520, 264, 1000, 28, (8, 1, 1), cluster=(2, 1, 1), streamk=4, bn=128))
    # gpu.matmul's build of Lab 9 (the partial sums handed on in parallel): splits three deep on 5 clusters
    from helpers.gpu import gemm as gemm_mod

    for bn, (m, n) in ((256, (300, 232)), (128, (300, 104))):
        out[f"{PARALLEL_CASE}, {bn} wide"] = (f"{m}x{n}x1000 on 5 clusters", bf16_gemm(
            "lab9_streamk.cu", "lab9_gemm", m, n, 1000, 29, (10, 1, 1), cluster=(2, 1, 1), streamk=5, bn=bn,
            options=gemm_mod.OPTIONS["lab9"]))
    for bn in (256, 128):
        out[f"{TAIL_CASE}, {bn} wide"] = ("776x520x200 on 2 clusters", bf16_gemm(
            "lab7_clusters.cu", "lab7_gemm", 776, 520, 200, 31, (4, 1, 1), cluster=(2, 1, 1), bn=bn,
            options=gemm_mod.OPTIONS["lab7"]))
    return out


def compare(g: np.ndarray, e: np.ndarray) -> dict[str, Any]:
    gb = np.ascontiguousarray(g).reshape(-1).view(np.uint8)
    eb = np.ascontiguousarray(e).reshape(-1).view(np.uint8)
    item = np.asarray(g).dtype.itemsize
    if gb.size != eb.size:
        return {"bit_identical": False, "error": f"sizes differ: {gb.size} vs {eb.size} bytes"}
    gw, ew = gb.reshape(-1, item), eb.reshape(-1, item)
    diff = np.flatnonzero((gw != ew).any(axis=1))
    res: dict[str, Any] = {"bit_identical": not diff.size, "elements": int(gw.shape[0]), "differing": int(diff.size)}
    if diff.size:
        i = int(diff[0])
        res["first_difference"] = {"index": i, "gpu": gw[i].tobytes()[::-1].hex(),
                                   "emulator": ew[i].tobytes()[::-1].hex()}
    return res


def sentences() -> list[dict[str, Any]]:
    from helpers import gpu

    out = []
    for demo in ("deadlock_demo", "out_of_bounds_demo", "misaligned_demo"):
        got = {}
        for mode in ("gpu", "emulator"):
            _mode(mode)
            try:
                gpu.run_isolated(f"helpers.gpu.examples:{demo}", timeout=60)
                got[mode] = "(no error)"
            except gpu.GpuError as e:
                got[mode] = str(e)
        g, e = got["gpu"], got["emulator"]
        head = e.split(" On the emulator: ")[0]
        same = g == e or (g.endswith(" This notebook is unaffected.") and
                          g[:-len(" This notebook is unaffected.")].rstrip(".") == head.rstrip("."))
        # A deadlock is reported by the first waiting thread to give up: on the GPU that is a race among the
        # waiters, so the same report may name another waiting warp. Same barrier, parity and block is the same
        # report.
        def waiter_free(t: str) -> str:
            return re.sub(r"warp \d+|\(thread \d+;", "<waiter>", t)

        same_but_waiter = bool(same) or waiter_free(g) == waiter_free(head) or (
            g.endswith(" This notebook is unaffected.")
            and waiter_free(g[:-len(" This notebook is unaffected.")]).rstrip(".") == waiter_free(head).rstrip("."))
        out.append({"demo": demo, "gpu": g, "emulator": e, "identical": bool(same),
                    "same_but_waiter": same_but_waiter})
    return out


def freed_maps() -> list[dict[str, Any]]:
    """A tensor map over a device array the program drops before the launch (``tensor_map_2d(to_device(A), ...)``
    written inline), beside the same launch with the arrays kept, on the GPU and on the executor: the wgmma ladder
    at N = 64. Also whether the next allocation of the same size takes a freed array's address. The H100 computes
    from whatever the next allocation left in the freed memory (B.B^T when B's array takes A's place); the
    executor refuses the copy with a sentence naming the freed array."""
    from foreign import _h100_gemm, wgmma_ladder_source

    from helpers import gpu

    a = gpu.random_host((64, 64), gpu.bfloat16, seed=41)
    b = gpu.random_host((64, 64), gpu.bfloat16, seed=42)
    known = {"A.B^T (right)": _h100_gemm(a, b), "B.B^T (B's array in A's place)": _h100_gemm(b, b)}
    out = []
    for mode in ("gpu", "emulator"):
        _mode(mode)
        k = gpu.compile(wgmma_ladder_source(64), "wgmma_ladder")
        first = gpu.to_device(a)
        freed_ptr = first.ptr
        del first
        second = gpu.to_device(b)
        row: dict[str, Any] = {"mode": mode, "next_allocation_takes_the_freed_address": second.ptr == freed_ptr}
        del second
        for how in ("arrays kept", "A dropped before the launch"):
            c = gpu.poison((64, 64), np.float32)
            try:
                if how == "arrays kept":
                    da, db = gpu.to_device(a), gpu.to_device(b)
                    gpu.launch(k, 1, 128, 0, gpu.tensor_map_2d(da, 64, 64), gpu.tensor_map_2d(db, 64, 64), c)
                else:
                    gpu.launch(k, 1, 128, 0, gpu.tensor_map_2d(gpu.to_device(a), 64, 64),
                               gpu.tensor_map_2d(gpu.to_device(b), 64, 64), c)
                got = c.to_host()
                row[how] = next((name for name, want in known.items() if np.array_equal(got.view(np.uint32),
                                                                                         want.view(np.uint32))),
                                f"other: C[0,0] = {float(got[0, 0])!r}")
            except gpu.GpuError as e:
                m = re.search(r"\[(CUDA_ERROR_\w+)\]", str(e))
                row[how] = f"refused {m.group(1) if m else type(e).__name__}: {str(e)[:400]}"
        out.append(row)
        print(f"freed map on the {mode}: next allocation takes the freed address: "
              f"{row['next_allocation_takes_the_freed_address']}; kept: {row['arrays kept']}; "
              f"A dropped: {row['A dropped before the launch'][:60]}")
    _mode("gpu")
    return out


def compile_reports() -> dict[str, str]:
    """What ptxas made of each foreign-style kernel on this machine (registers, spills, local memory): the spill
    case must spill here as it does where the CPU tests compile it."""
    from foreign import idioms

    from helpers import gpu

    out = {name: gpu.compile(src, kernel).report.summary() for name, (src, kernel, _frags) in idioms().items()}
    print(f"register spills and a local table: {out.get('register spills and a local table')}")
    return out


def run_all() -> dict[str, Any]:
    from helpers import gpu
    from helpers.gpu.executor.probes import ALU_OPS

    _mode("gpu")
    info = gpu.device_info()
    results: dict[str, Any] = {"kernels": [], "alu": [], "sentences": []}
    for name, (shape, run) in cases().items():
        t0 = time.time()
        try:
            _mode("gpu")
            g = run()
            _mode("emulator")
            e = run()
        except Exception as exc:  # a case that fails in one mode is recorded, the others still run
            results["kernels"].append({"name": name, "shape": shape, "bit_identical": False,
                                       "error": f"{type(exc).__name__}: {exc}"[:600],
                                       "traceback": traceback.format_exc()[-1500:]})
            print(f"{name}: ERROR {exc}")
            continue
        entry = {"name": name, "shape": shape, **compare(g, e), "seconds": round(time.time() - t0, 2)}
        results["kernels"].append(entry)
        if name == "alu_probe":
            for k, (op, _asm, _kinds) in enumerate(ALU_OPS):
                results["alu"].append({"op": op, **compare(g[k], e[k])})
        print(f"{name}: {'bit-identical' if entry['bit_identical'] else 'DIFFERENT'} ({entry['seconds']} s)")
    results["sentences"] = sentences()
    results["refusals"] = launch_refusals()
    results["compile_reports"] = compile_reports()
    results["freed_maps"] = freed_maps()
    for s in results["sentences"]:
        print(f"{s['demo']}: {'same sentence' if s['identical'] else 'DIFFERENT'}")
    _mode("gpu")
    drv = None
    if not DRY:
        from cuda.bindings import driver

        _, drv = driver.cuDriverGetVersion()
    results["meta"] = {
        "what": "every course kernel on the GPU (meta.gpu) and on the PTX executor with the same inputs, outputs "
                "compared bit for bit",
        "gpu": info.name if info else "?", "driver_cuda_version": drv,
        "nvrtc": ".".join(map(str, gpu.nvrtc_version() or ())),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "made_by": "tools/h100/executor_vs_h100.py",
    }
    return results


def main() -> int:
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    res = run_all()
    from helpers import gpu

    short = "dry" if DRY else gpu.this_gpu().short.lower()
    path = out / f"ptx_vs_{short}.json"  # ptx_vs_h100.json on an H100, ptx_vs_h200.json on an H200
    path.write_text(json.dumps(res, indent=1))
    bad = [k["name"] for k in res["kernels"] if not k["bit_identical"]] + \
        [s["demo"] for s in res["sentences"] if not s["identical"]] + \
        [r["launch"] for r in res["refusals"] if not r["identical"]]
    print(f"{len(res['kernels'])} kernels, {len(res['alu'])} ALU ops compared in {time.time() - t0:.0f} s -> {path}")
    print("all bit-identical" if not bad else f"differences: {bad}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
