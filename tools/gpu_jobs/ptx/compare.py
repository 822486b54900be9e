"""Truth from silicon for the PTX executor: run every course kernel on the H100 and on the executor with the same
random inputs and compare the outputs bit for bit; compare the failure sentences of the demo kernels.

    python tools/gpu_jobs/ptx/compare.py          # on a machine with one H100, from the repository root
    python tools/gpu_jobs/ptx/compare.py --dry    # without a GPU: checks the script (emulator against itself)
    -> $OUT/ptx_vs_h100.json (copy it to tests/data/; tests/ptx/test_silicon.py asserts it) and a summary

GPU time: well under a minute (the emulator runs on this machine's CPU; about a minute of CPU in all).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ptx"))


DRY = "--dry" in sys.argv  # plumbing check without a GPU: the "GPU" side runs on the emulator too


def _mode(mode: str) -> None:
    os.environ["HELPERS_EXECUTOR"] = "force" if DRY else {"gpu": "off", "emulator": "force"}[mode]


def _solutions() -> dict[str, Any]:
    """The solution notebooks' names (imports cell and solution cells executed), without nbformat if need be."""
    ns: dict[str, Any] = {}
    for nb in ("lab1_tma", "lab2_mbarrier", "lab3_wgmma"):
        path = ROOT / "solutions" / f"{nb}.ipynb"
        try:
            from helpers import labgen

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
    from helpers.ptx import coverage

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
    from helpers.ptx.probes import ALU_OPS, ALU_PROBE, SMEM_LAYOUT_PROBE, alu_inputs

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

    def copy_tiles() -> np.ndarray:
        k = gpu.compile('#include "hopper.cuh"\n' + sol["COPY_TILES"], "copy_tiles")
        da = gpu.to_device(tile_src)
        o = gpu.poison((128, 192), np.uint16)
        gpu.launch(k, (3, 2), 128, 0, gpu.tensor_map_2d(da, 64, 64), da, o, np.int32(192))
        return o.to_host()

    out["lab1 copy_tiles"] = ("128x192 bf16", copy_tiles)

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

    rows = gpu.random_host((128, 320), gpu.bfloat16, seed=4)

    def row_sums() -> np.ndarray:
        k = gpu.compile('#include "hopper.cuh"\n' + sol["ROW_SUMS"], "row_sums")
        da = gpu.to_device(rows)
        o = gpu.poison(128, np.float32)
        gpu.launch(k, 2, 128, 0, gpu.tensor_map_2d(da, 64, 64), da, o, np.int32(5))
        return o.to_host()

    out["lab2 row_sums"] = ("128x320 bf16", row_sums)
    out["lab2_gemm (lineage)"] = ("128x128x256", _gemm(LAB2_GEMM, "lab2_gemm", 128, 128, 256, (2, 2), 128, 0,
                                                        (64, 64), (64, 64), 5))
    out["lab3_gemm"] = ("256x192x320", _gemm(sol["GEMM_SRC"], "lab3_gemm", 256, 192, 320, (3, 4), 128, 0, (64, 64),
                                             (64, 64), 6))
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
            gpu.launch(k, 2 * size, 128, 0, gpu.tensor_map_2d(gpu.to_device(cl_src), 64, 64, swizzle=0), ids, tiles,
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
        out.append({"demo": demo, "gpu": g, "emulator": e, "identical": bool(same)})
    return out


def run_all() -> dict[str, Any]:
    from helpers import gpu
    from helpers.ptx.probes import ALU_OPS

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
    for s in results["sentences"]:
        print(f"{s['demo']}: {'same sentence' if s['identical'] else 'DIFFERENT'}")
    _mode("gpu")
    drv = None
    if not DRY:
        from cuda.bindings import driver

        _, drv = driver.cuDriverGetVersion()
    results["meta"] = {
        "what": "every course kernel on the H100 and on helpers.ptx with the same inputs, outputs compared bit for bit",
        "gpu": info.name if info else "?", "driver_cuda_version": drv,
        "nvrtc": ".".join(map(str, gpu.nvrtc_version() or ())),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "made_by": "tools/gpu_jobs/ptx/compare.py",
    }
    return results


def main() -> int:
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    res = run_all()
    path = out / "ptx_vs_h100.json"
    path.write_text(json.dumps(res, indent=1))
    bad = [k["name"] for k in res["kernels"] if not k["bit_identical"]] + \
        [s["demo"] for s in res["sentences"] if not s["identical"]]
    print(f"{len(res['kernels'])} kernels, {len(res['alu'])} ALU ops compared in {time.time() - t0:.0f} s -> {path}")
    print("all bit-identical" if not bad else f"differences: {bad}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
