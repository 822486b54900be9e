"""Kernels written in the idioms of published Hopper code (tests/ptx/foreign.py) run on the executor unchanged and
give the outputs a correct run gives, bit for bit, with and without the hazard checker; the same cases run on the
H100 in tools/h100/executor_vs_h100.py. Also: the scoping of labels that made such kernels jump to the wrong place,
and the launch rules the driver applies."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from foreign import SPILLS, _h100_gemm, cases, idioms, wgmma_ladder_source

from helpers import gpu
from helpers.gpu import executor

CASES = cases()


@pytest.fixture(autouse=True)
def _bounded() -> object:
    """A kernel that never finishes ends as the executor's limit within seconds: at most 2 million warp
    instructions a launch (the largest case runs well under 100,000) and 120 s of wall clock."""
    with executor.executor_options(step_limit=2_000_000, time_limit=120.0):
        yield


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    bad = np.flatnonzero(got.view(np.uint8) != want.view(np.uint8))
    assert bad.size == 0, f"{bad.size} bytes differ, first at byte {bad[0]}"


@pytest.mark.parametrize("name", list(CASES))
def test_foreign_kernel_runs_bit_for_bit(name: str) -> None:
    _shape, run, want = CASES[name]
    _same_bits(run(), want)


@pytest.mark.parametrize("name", list(CASES))
def test_foreign_kernel_has_no_hazard(name: str) -> None:
    """The hazard checker (which lands copies and TMA stores at the latest moment the rules allow) finds nothing to
    report in these correct kernels, and they still give the same bits."""
    _shape, run, want = CASES[name]
    with executor.executor_options(hazards=True):
        got = run()
    _same_bits(got, want)


@pytest.mark.parametrize("name", list(CASES))
def test_each_case_compiles_to_the_idiom_it_is_for(name: str) -> None:
    source, kernel, fragments = idioms()[name]
    ptx = gpu.compile(source, kernel).ptx
    assert [f for f in fragments if f not in ptx] == []


def test_the_spill_case_spills() -> None:
    """ptxas (run by NVRTC on this machine too) kept SPILLS to 32 registers and moved the rest to local memory: on
    the H100 the kernel really reads and writes spilled registers; the executor runs the PTX, where they are
    registers, and the local table, which is local memory in both."""
    report = gpu.compile(SPILLS, "spills").report
    assert report.registers <= 32 and report.spill_stores > 0 and report.spill_loads > 0, report.summary()


@pytest.mark.parametrize("hazards", [False, True])
def test_a_map_over_a_freed_array_faults_in_words(hazards: bool) -> None:
    """The ladder's launch as the corpus first wrote it: A's device array made inline, so only its tensor map is
    left when B is allocated. The map holds an address, not the array (like the driver's CUtensorMap), so the
    copy through it faults, in both modes, naming the freed array and the fix, where the H100 read B's data."""
    a = gpu.random_host((64, 64), gpu.bfloat16, seed=41)
    b = gpu.random_host((64, 64), gpu.bfloat16, seed=42)
    k = gpu.compile(wgmma_ladder_source(64), "wgmma_ladder")
    c = gpu.poison((64, 64), np.float32)
    with executor.executor_options(hazards=hazards), pytest.raises(gpu.KernelFault) as e:
        gpu.launch(k, 1, 128, 0, gpu.tensor_map_2d(gpu.to_device(a), 64, 64),
                   gpu.tensor_map_2d(gpu.to_device(b), 64, 64), c)
    words = str(e.value)
    assert "[CUDA_ERROR_ILLEGAL_ADDRESS]" in words and "the TMA load goes through a tensor map over byte 0 of a " \
        "device array (64, 64) bfloat16" in words and "freed before the kernel ran" in words
    assert "Keep the array in a variable until the kernel has finished" in words and "cp.async.bulk.tensor" in words
    assert np.isnan(c.to_host()).all()  # nothing was computed from memory nobody owns


@pytest.mark.parametrize("run", ["run_isolated", "run_on_executor"])
def test_isolated_runs_keep_the_arrays_behind_their_maps(run: str) -> None:
    """``TensorMapArg`` arguments: the runtime copies each array in and keeps it until the kernel is done (the
    first map's array must outlive the second's copy)."""
    a = gpu.random_host((64, 64), gpu.bfloat16, seed=41)
    b = gpu.random_host((64, 64), gpu.bfloat16, seed=42)
    k = gpu.compile(wgmma_ladder_source(64), "wgmma_ladder")
    res = getattr(gpu, run)(k, 1, 128, 0, gpu.TensorMapArg(a, (64, 64)), gpu.TensorMapArg(b, (64, 64)),
                            np.full((64, 64), np.nan, np.float32))
    _same_bits(res.arrays[-1], _h100_gemm(a, b))


def test_a_freed_array_is_named_in_any_fault_on_its_memory() -> None:
    from helpers.gpu.executor.memory import DeviceMemory, MemoryFault

    mem = DeviceMemory()
    a = mem.alloc(256, label="a device array (64,) float32")
    mem.alloc(16)
    mem.free(a)
    assert a.freed and mem.find(a.base + 8) is None
    assert mem.describe(a.base + 8) == ("byte 8 of a device array (64,) float32 (256 bytes at "
                                        f"{a.base:#x}), freed before this access")
    with pytest.raises(MemoryFault, match="freed before this access"):
        mem.load(np.array([a.base + 8], np.uint64), np.dtype(np.float32))


FREED_MAPS = Path(__file__).resolve().parents[1] / "data" / "foreign_freed_maps_h100.json"


def test_the_h100_differences_were_the_next_allocations_data() -> None:
    """Truth from silicon: the three corpus kernels the H100 and the executor disagreed on (an H100 run of
    tools/h100/executor_vs_h100.py while the corpus still made A's array inline). Every first difference is what
    the kernel computes when the next allocation takes A's freed memory: the ladder (N = 64) and the
    warp-specialized GEMM got B.B^T (B's array took A's place), the transpose read the schedule's 32 bytes (the
    next allocation) as X's first 16 elements; the executor's values are the right ones, A.B^T and X."""
    fix = json.loads(FREED_MAPS.read_text())
    assert "H100" in fix["meta"]["gpu"] and fix["meta"]["driver"] and fix["meta"]["date"]
    got = {k["name"].removeprefix("foreign: "): k for k in fix["kernels"]}

    def bits(x: np.ndarray) -> str:
        return x.tobytes()[::-1].hex()

    lad = got["wgmma m64nNk16 ladder, descriptors from shared memory"]
    a = gpu.random_host((64, 64), gpu.bfloat16, seed=41)
    b = gpu.random_host((256, 64), gpu.bfloat16, seed=42)
    assert lad["first_difference"] == {"index": 0, "gpu": bits(_h100_gemm(b[:1], b[:1])[0, 0]),
                                       "emulator": bits(_h100_gemm(a[:1], b[:1])[0, 0])}
    assert lad["differing"] == 64 * 64 + 64 * 128  # N = 64 and 128 took A's place; N = 192 and 256 did not

    ws = got["warp-specialized, setmaxnreg dec/inc"]
    wa = gpu.random_host((128, 256), gpu.bfloat16, seed=43)
    wb = gpu.random_host((128, 256), gpu.bfloat16, seed=44)
    assert ws["first_difference"] == {"index": 0, "gpu": bits(_h100_gemm(wb[:1], wb[:1])[0, 0]),
                                      "emulator": bits(_h100_gemm(wa[:1], wb[:1])[0, 0])}
    assert ws["differing"] == ws["elements"] == 128 * 128

    tr = got["persistent TMA transpose: elect.sync, named barriers, ldmatrix/stmatrix .trans"]
    xt = np.random.default_rng(45).integers(0, 1 << 16, (64, 128)).astype(np.uint16)
    sched = np.random.default_rng(46).permutation(8).astype(np.int32)
    assert tr["first_difference"] == {"index": 0, "gpu": bits(sched.view(np.uint16)[0]), "emulator": bits(xt[0, 0])}
    assert tr["differing"] == sched.nbytes // 2  # Y's column 0 from X's first 16 elements: the schedule's bytes


LABELS = r"""
__device__ __forceinline__ int sign(int v) {
  int r;
  asm volatile("{\n .reg .pred P1;\n setp.gt.s32 P1, %1, 0;\n @P1 bra POS;\n mov.s32 %0, -1;\n bra DONE;\n"
               " POS:\n mov.s32 %0, 1;\n DONE:\n}\n" : "=r"(r) : "r"(v));
  return r;
}
extern "C" __global__ void labels(const int* x, int* out) {
  const int t = threadIdx.x;
  out[t] = sign(x[t]) * 10 + sign(x[t] - 5);
}
"""


def test_an_asm_block_inlined_twice_keeps_its_own_labels() -> None:
    """Two copies of one asm block define POS and DONE twice: each branch goes to its own scope's label."""
    x = np.arange(-4, 12, dtype=np.int32)
    o = gpu.poison(16, np.int32)
    gpu.launch(gpu.compile(LABELS, "labels"), 1, 16, 0, gpu.to_device(x), o)
    assert np.array_equal(o.to_host(), np.where(x > 0, 1, -1) * 10 + np.where(x > 5, 1, -1))


def test_labels_are_scoped_in_the_parsed_program() -> None:
    from helpers.gpu.executor.program import load_program

    k = gpu.compile(LABELS, "labels")
    labels = [name for (_f, name) in load_program(k.ptx, "labels").labels]
    assert sorted(n.split("@")[0] for n in labels) == ["DONE", "DONE", "POS", "POS"] and len(set(labels)) == 4


BOUNDS = r"""
extern "C" __global__ void __cluster_dims__(2, 1, 1) fixed(int* o) { o[blockIdx.x] = 1; }
extern "C" __global__ void __launch_bounds__(64) small(int* o) { o[threadIdx.x] = 1; }
extern "C" __global__ void __launch_bounds__(128, 1, 2) ranked(int* o) { o[threadIdx.x] = 1; }
extern "C" __global__ void plain(int* o) { o[threadIdx.x] = 1; }
"""


@pytest.mark.parametrize("kernel, grid, block, smem, cluster, error, words", [
    ("fixed", 4, 32, 0, (4, 1, 1), "CUDA_ERROR_INVALID_CLUSTER_SIZE", "fixes its cluster size at (2, 1, 1)"),
    ("fixed", 3, 32, 0, None, "CUDA_ERROR_INVALID_CLUSTER_SIZE", "not a whole number of clusters of (2, 1, 1)"),
    ("small", 1, 128, 0, None, "CUDA_ERROR_INVALID_VALUE", "at most 64 threads a block"),
    ("ranked", 4, 32, 0, (4, 1, 1), "CUDA_ERROR_INVALID_CLUSTER_SIZE", "at most 2 blocks a cluster"),
    ("plain", (1, 70000), 32, 0, None, "CUDA_ERROR_INVALID_VALUE", "grid's y size is 70000"),
])
def test_launches_the_driver_refuses_are_refused_with_its_error(kernel: str, grid: object, block: int, smem: int,
                                                                 cluster: object, error: str, words: str) -> None:
    k = gpu.compile(BOUNDS, kernel)
    with pytest.raises(gpu.LaunchError) as e:
        gpu.launch(k, grid, block, smem, gpu.zeros(256, np.int32), cluster=cluster)
    assert "could not be launched: " in str(e.value) and words in str(e.value) and str(e.value).endswith(f"[{error}]")


def test_cluster_dims_from_the_kernel_when_the_launch_gives_none() -> None:
    from helpers.gpu.executor import launchcheck
    from helpers.gpu.executor.program import load_program

    b = launchcheck.bounds_of(load_program(gpu.compile(BOUNDS, "fixed").ptx, "fixed"))
    assert b.reqnctapercluster == (2, 1, 1) and b.explicitcluster
    assert launchcheck.check_launch(b, (4, 1, 1), (32, 1, 1), None, 0) == (2, 1, 1)
    assert launchcheck.check_launch(b, (4, 1, 1), (32, 1, 1), (2, 1, 1), 0) == (2, 1, 1)
    plain = launchcheck.KernelBounds()
    with pytest.raises(launchcheck.LaunchRefused, match="allows 49136"):
        launchcheck.check_launch(plain, (1, 1, 1), (32, 1, 1), None, 49136 + 1, static_smem=16)
    with pytest.raises(launchcheck.LaunchRefused, match="CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
        launchcheck.check_launch(plain, (1, 1, 1), (1024, 1, 1), None, 0, registers=65)
    assert launchcheck.check_launch(plain, (1, 1, 1), (1024, 1, 1), None, 0, registers=64) is None
