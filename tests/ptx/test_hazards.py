"""The hazard checker (helpers.gpu.executor.hazards): every course kernel runs with zero hazards, and each
ordering mistake the issue lists is reported, deterministically, with the right hazard named in words."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import h100_gemm
from kernels import LAB2_GEMM, LAB2_WRONG_PARITY, ROOT, STORES_WGMMA, WS_GEMM, lab_sources, ws_smem

from helpers import gpu
from helpers.course import labgen
from helpers.gpu import TensorMapArg, executor
from helpers.gpu.executor import hazards as hz

KD = ROOT / "bench" / "kernels"
RING4, RING4_WS = 4 * 32 * 1024 + 1024, 4 * 48 * 1024 + 1024
EPILOGUE = 4 * 48 * 1024 + 32 * 1024 + 1024  # Labs 5-7: four 48 KiB stages, the epilogue buffers, alignment


# ------------------------------------------------------------------------------------------- running a GEMM
def _operands(m: int, n: int, k: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    return gpu.random_host((m, k), gpu.bfloat16, seed=seed), gpu.random_host((n, k), gpu.bfloat16, seed=seed + 1)


def fp32_gemm(src: str, name: str, m: int, n: int, k: int, grid: tuple, block: int = 128, smem: int = 0,
              box_a: tuple[int, int] = (64, 64), box_b: tuple[int, int] = (64, 64)) -> executor.RunResult:
    """A course GEMM with an fp32 C (Labs 2-4), hazard mode on; the result keeps C (poisoned first)."""
    a, b = _operands(m, n, k)
    c = np.full((m, n), np.nan, np.float32)
    res = gpu.run_on_executor(gpu.compile(src, name), grid, block, smem, TensorMapArg(a, box_a), TensorMapArg(b, box_b),
                              c,
                  np.int32(m), np.int32(n), np.int32(k), check=False)
    res.reference = a.astype(np.float64) @ b.astype(np.float64).T
    return res


def bf16_gemm(src: str, name: str, m: int, n: int, k: int, grid: tuple, cluster: tuple | None = None,
              streamk: int = 0) -> executor.RunResult:
    """A Lab 5-9 GEMM (bf16 C through a TMA store), hazard mode on."""
    a, b = _operands(m, n, k, seed=3)
    c = np.full((m, n), np.nan, gpu.bfloat16)
    extra = ()
    if streamk:
        extra = (np.zeros(streamk * 2 * 128 * 256, np.float32), np.zeros(streamk * 2, np.uint32))
    res = gpu.run_on_executor(gpu.compile(src, name), grid, 384, EPILOGUE, TensorMapArg(a, (128, 64)),
                  TensorMapArg(b, (256, 64) if cluster is None else (128, 64)), TensorMapArg(c, (64, 64)),
                  np.int32(m), np.int32(n), np.int32(k), *extra, cluster=cluster, check=False)
    res.reference = a.astype(np.float64) @ b.astype(np.float64).T
    return res


def _c(res: executor.RunResult) -> np.ndarray:
    return res.arrays[2].astype(np.float64)


def clean(res: executor.RunResult) -> None:
    """No hazard, and the right product."""
    assert res.hazards == [], "\n".join(str(h) for h in res.hazards[:3])
    assert res.error is None
    assert np.allclose(_c(res), res.reference, rtol=2e-2, atol=5e-2)


def named(res: executor.RunResult, kind: str, *words: str) -> hz.Hazard:
    """The first hazard is of ``kind`` and its sentence has ``words``; the run raised HazardError saying so."""
    assert res.hazards, "no hazard found"
    first = res.hazards[0]
    assert first.kind == kind, str(first)
    text = str(first)
    assert text.startswith(f"hazard ({hz.KINDS[kind]}): ")
    for w in words:
        assert w in text, (w, text)
    assert isinstance(res.error, gpu.HazardError) and res.error.kind == kind
    return first


def edit(src: str, old: str, new: str) -> str:
    assert old in src, old
    return src.replace(old, new)


@pytest.fixture(scope="module")
def labs() -> dict[str, str]:
    return lab_sources()


def _kernel(file: str) -> str:
    return (KD / file).read_text()


# ------------------------------------------------------------------------------------------- the course: no hazard
def test_lab1_copy_has_no_hazard(labs: dict) -> None:
    a = gpu.random_host((128, 192), gpu.bfloat16, seed=4).view(np.uint16)
    out = np.full((128, 192), 0xFFFF, np.uint16)
    res = gpu.run_on_executor(gpu.compile(labs["LAB1"], "lab1_copy"), (3, 2), 128, 0, TensorMapArg(a, (64, 64)), a, out,
                  np.int32(192))
    assert res.hazards == [] and np.array_equal(res.arrays[2], a)


@pytest.mark.parametrize("lab, name", [("LAB2", "lab2_gemm"), ("LAB3", "lab3_gemm")])
def test_lab2_and_lab3_solutions_have_no_hazard(labs: dict, lab: str, name: str) -> None:
    clean(fp32_gemm(labs[lab], name, 64, 128, 192, (2, 1)))


def test_lineage_lab2_gemm_and_bench_64x64_have_no_hazard() -> None:
    clean(fp32_gemm(LAB2_GEMM, "lab2_gemm", 64, 128, 192, (2, 1)))
    clean(fp32_gemm(_kernel("gemm_64x64.cu"), "gemm_64x64", 128, 128, 192, (2, 2)))


def test_lab4_ring_and_warp_specialized_kernels_have_no_hazard() -> None:
    clean(fp32_gemm(_kernel("lab4_128x128.cu"), "lab4_gemm_128x128", 256, 256, 320, (2, 2), 384, RING4,
                    (128, 64), (128, 64)))
    clean(fp32_gemm(_kernel("lab4_ws.cu"), "lab4_gemm_ws", 128, 256, 320, (1, 1), 384, RING4_WS, (128, 64),
                    (256, 64)))
    src = "#define BN 256\n#define STAGES 3\n#define CONSUMER_REGS 240\n#define PRODUCER_REGS 24\n" + WS_GEMM
    clean(fp32_gemm(src, "ws_gemm", 128, 256, 256, (1, 1), 384, ws_smem(256, 3), (128, 64), (256, 64)))


def test_lab4_notebook_solutions_have_no_hazard() -> None:
    from helpers.course.checks import lab4

    ns = labgen.solution_namespace(ROOT / "solutions" / "lab4_pipeline.ipynb")
    wrappers = '#include "hopper.cuh"\n' + "".join(
        labgen.solution_namespace(ROOT / "solutions" / nb)[key] for nb, key in (
            ("lab1_tma.ipynb", "TMA_LOAD"), ("lab2_mbarrier.ipynb", "MBAR_INIT_ARRIVE"),
            ("lab2_mbarrier.ipynb", "MBAR_TX_WAIT")))
    ns["LAB4_KERNEL"] = lab4.step8_kernel(ns["PC_KERNEL"], ns["LAB4_KERNEL"])  # step 7 carried into step 8
    for key, spec in (("PC_KERNEL", lab4.PC), ("LAB4_KERNEL", lab4.WS)):  # built on the carried Lab 1-2 wrappers
        src = wrappers + ns[key]
        smem = lab4.dynamic_smem_bytes(lab4.source_stages(src), spec.bm, spec.bn)
        clean(fp32_gemm(src, spec.name, spec.bm, spec.bn, 256, (1, 1), spec.threads, smem, (spec.bm, 64),
                        (spec.bn, 64)))


def test_lab5_tma_store_epilogue_has_no_hazard() -> None:
    clean(bf16_gemm(_kernel("lab5_epilogue.cu"), "lab5_gemm", 136, 264, 128, (2, 2)))


def test_lab6_persistent_blocks_have_no_hazard() -> None:
    """Two blocks, 5 and 4 tiles each: the ring and the stores run on across tiles."""
    clean(bf16_gemm(_kernel("lab6_persistent.cu"), "lab6_gemm", 264, 520, 200, (2, 1, 1)))


def test_lab7_clusters_with_multicast_have_no_hazard() -> None:
    clean(bf16_gemm(_kernel("lab7_clusters.cu"), "lab7_gemm", 520, 264, 128, (4, 1, 1), cluster=(2, 1, 1)))


@pytest.mark.parametrize("source", ["bench", "notebook"])
def test_lab9_streamk_flags_have_no_hazard(source: str) -> None:
    """The course's kernel, and the notebook's as the grader compiles it: the header, the wrappers of Labs 1 and 2
    (as the solutions write them), the cell's code."""
    from helpers.course import carry

    ns = {**labgen.solution_namespace(ROOT / "solutions" / "lab1_tma.ipynb"),
          **labgen.solution_namespace(ROOT / "solutions" / "lab2_mbarrier.ipynb")}
    wrappers = '#include "hopper.cuh"\n' + ns["TMA_LOAD"] + ns["MBAR_INIT_ARRIVE"] + ns["MBAR_TX_WAIT"]
    src = _kernel("lab9_streamk.cu") if source == "bench" else wrappers + carry.code_lines(
        labgen.solution_namespace(ROOT / "solutions" / "lab9_streamk.ipynb")["LAB9_SRC"])
    clean(bf16_gemm(src, "lab9_gemm", 264, 264, 512, (6, 1, 1), cluster=(2, 1, 1), streamk=3))


def test_stores_fenced_for_wgmma_have_no_hazard_and_are_exact() -> None:
    a, b = _operands(64, 64, 64)
    c = np.full((64, 64), np.nan, np.float32)
    kern = gpu.compile(STORES_WGMMA, "stores_wgmma")
    res = gpu.run_on_executor(kern, 1, 128, 0, a.view(np.uint16), b.view(np.uint16), c)
    assert res.hazards == []
    assert np.array_equal(res.arrays[2].view(np.uint32), h100_gemm(a, b).view(np.uint32))


# ------------------------------------------------------------------------------------------- the mistakes, named
def test_missing_wgmma_fence(labs: dict) -> None:
    res = fp32_gemm(edit(labs["LAB3"], "    hopper::wgmma_fence();\n", ""), "lab3_gemm", 64, 64, 128, (1, 1))
    named(res, "missing-wgmma-fence", "no wgmma.fence came before it", "line 85 of the CUDA source")
    res = fp32_gemm(edit(_kernel("lab4_128x128.cu"), "    hopper::wgmma_fence();\n", ""), "lab4_gemm_128x128", 128,
                    128, 128, (1, 1), 384, RING4, (128, 64), (128, 64))
    named(res, "missing-wgmma-fence", "warp 4")


def test_accumulators_written_after_the_fence_need_another_fence() -> None:
    """The compiler moves zeroing movs after a fence unless they are pinned: that is a register access the wgmma
    is not ordered with, and the sentence says how to pin them."""
    src = edit(STORES_WGMMA, "  hopper::wgmma_fence_operands(d);  // the zeros are written here, before the fence "
                             "(not moved after it)\n", "")
    a, b = _operands(64, 64, 64)
    res = gpu.run_on_executor(gpu.compile(src, "stores_wgmma"), 1, 128, 0, a.view(np.uint16), b.view(np.uint16),
                  np.zeros((64, 64), np.float32), check=False)
    named(res, "missing-wgmma-fence", "`mov.f32", "after the warp's last wgmma.fence", "wgmma_fence_operands")


def test_no_commit(labs: dict) -> None:
    res = fp32_gemm(edit(labs["LAB3"], "    hopper::wgmma_commit();\n", ""), "lab3_gemm", 64, 64, 256, (1, 1))
    named(res, "overwrite-while-read", "the TMA load", "the wgmma", "never committed")
    res = fp32_gemm(edit(labs["LAB3"], "    hopper::wgmma_commit();\n", ""), "lab3_gemm", 64, 64, 64, (1, 1))
    named(res, "wgmma-in-flight", "uses accumulator registers", "never committed")


def test_wait_group_1_where_0_is_needed(labs: dict) -> None:
    res = fp32_gemm(edit(labs["LAB3"], "hopper::wgmma_wait<0>();", "hopper::wgmma_wait<1>();"), "lab3_gemm", 64, 64,
                    256, (1, 1))
    named(res, "overwrite-while-read", "released the stage on empty[0] after `wgmma.wait_group 1`",
           "lets 1 group stay in flight")
    ring = edit(_kernel("lab4_128x128.cu"), "if (k > 0 && tid == 0) hopper::mbar_arrive(&empty[(k - 1) % STAGES]);",
                "if (tid == 0) hopper::mbar_arrive(&empty[s]);")  # the current stage, after wait_group 1
    res = fp32_gemm(ring, "lab4_gemm_128x128", 128, 128, 384, (1, 1), 384, RING4, (128, 64), (128, 64))
    named(res, "overwrite-while-read", "(warpgroup 1)", "`wgmma.wait_group 1`")
    res = fp32_gemm(edit(_kernel("lab4_128x128.cu"), "hopper::wgmma_wait<1>();", "hopper::wgmma_wait<2>();"),
                    "lab4_gemm_128x128", 128, 128, 384, (1, 1), 384, RING4, (128, 64), (128, 64))
    named(res, "overwrite-while-read", "`wgmma.wait_group 2`", "lets 2 groups stay in flight")


def test_wait_group_0_where_1_is_allowed_and_the_current_stage_after_0() -> None:
    ring = _kernel("lab4_128x128.cu")
    clean(fp32_gemm(edit(ring, "hopper::wgmma_wait<1>();", "hopper::wgmma_wait<0>();"), "lab4_gemm_128x128", 128,
                    128, 384, (1, 1), 384, RING4, (128, 64), (128, 64)))
    current = edit(edit(ring, "if (k > 0 && tid == 0) hopper::mbar_arrive(&empty[(k - 1) % STAGES]);",
                        "if (tid == 0) hopper::mbar_arrive(&empty[s]);"), "hopper::wgmma_wait<1>();",
                   "hopper::wgmma_wait<0>();")
    clean(fp32_gemm(current, "lab4_gemm_128x128", 128, 128, 384, (1, 1), 384, RING4, (128, 64), (128, 64)))


def test_stage_released_before_it_is_read(labs: dict) -> None:
    end = "    // ### END SOLUTION\n  }"
    src = edit(labs["LAB2"], "    my_mbar_arrive(&empty[s]);\n" + end, end)
    src = edit(src, '    my_mbar_wait(&full[s], (k / STAGES) & 1, "full", s);\n',
               '    my_mbar_wait(&full[s], (k / STAGES) & 1, "full", s);\n    my_mbar_arrive(&empty[s]);\n')
    first = named(fp32_gemm(src, "lab2_gemm", 64, 64, 256, (1, 1)), "overwrite-while-read", "the TMA load",
                  "`ld.shared.u16", "arrived on empty[0]", "before this read", "release a stage only after reading")
    assert first.lines[0] > 0 and first.lines[1] > 0


def test_the_lab2_bug_hunt_race_is_found() -> None:
    from helpers.course.checks import lab2

    res = fp32_gemm('#include "hopper.cuh"\n' + lab2.BUGGY_KERNEL, "lab2_gemm", 64, 64, 256, (1, 1))
    named(res, "overwrite-while-read", "release a stage only after reading")


@pytest.mark.parametrize("factor, words", [
    ("/ 2", ("completed phase 0 with 8192 bytes announced by expect-tx, but its copies bring 16384 bytes",
             "still in flight")),
    ("* 2", ("expect-tx announced 32768 bytes but the copies issued for this phase delivered 16384",
             "wait forever")),
])
def test_expect_tx_smaller_and_larger_than_the_copies(labs: dict, factor: str, words: tuple) -> None:
    src = edit(labs["LAB2"], "my_mbar_expect_tx(&full[s], STAGE_BYTES);", f"my_mbar_expect_tx(&full[s], STAGE_BYTES "
               f"{factor});")
    named(fp32_gemm(src, "lab2_gemm", 64, 64, 128, (1, 1)), "expect-tx", "full[0] of block (0,0)", *words)


def test_generic_stores_read_by_wgmma_without_proxy_fence() -> None:
    a, b = _operands(64, 64, 64)
    src = edit(STORES_WGMMA, "  hopper::fence_proxy_async();", "  // (no fence)")
    res = gpu.run_on_executor(gpu.compile(src, "stores_wgmma"), 1, 128, 0, a.view(np.uint16), b.view(np.uint16),
                  np.zeros((64, 64), np.float32), check=False)
    named(res, "missing-proxy-fence", "the wgmma", "`st.shared.v4.u32", "fence.proxy.async")
    src = edit(STORES_WGMMA, "  __syncthreads();\n", "")
    res = gpu.run_on_executor(gpu.compile(src, "stores_wgmma"), 1, 128, 0, a.view(np.uint16), b.view(np.uint16),
                  np.zeros((64, 64), np.float32), check=False)
    named(res, "overwrite-while-read", "the store", "the wgmma", "this warp has not reached that wgmma yet",
          "A barrier between the stores and the wgmma")


def test_store_into_a_tile_a_wgmma_may_still_read() -> None:
    src = edit(STORES_WGMMA, "  hopper::wgmma_commit();\n", "  hopper::wgmma_commit();\n  sA[t] = 0;\n")
    a, b = _operands(64, 64, 64)
    res = gpu.run_on_executor(gpu.compile(src, "stores_wgmma"), 1, 128, 0, a.view(np.uint16), b.view(np.uint16),
                  np.zeros((64, 64), np.float32), check=False)
    named(res, "overwrite-while-read", "the store", "overwrites sA byte", "the wgmma", "may still read it",
          "no wgmma.wait_group has retired its group yet")


LAB5_FENCE = "    hopper::fence_proxy_async();        // these generic stores"


def test_generic_stores_read_by_a_tma_store_without_proxy_fence() -> None:
    src = edit(_kernel("lab5_epilogue.cu"), LAB5_FENCE, "    // these generic stores")
    named(bf16_gemm(src, "lab5_gemm", 128, 256, 64, (1, 1)), "missing-proxy-fence", "the TMA store",
          "`st.shared.u32", "fence.proxy.async")


def test_epilogue_buffer_rewritten_while_its_tma_store_may_read_it() -> None:
    src = edit(_kernel("lab5_epilogue.cu"), "      if (tid == 0) hopper::tma_store_wait_read<1>();\n", "")
    named(bf16_gemm(src, "lab5_gemm", 128, 256, 64, (1, 1)), "overwrite-while-read", "the TMA store",
          "cp.async.bulk.wait_group.read")
    src = edit(_kernel("lab5_epilogue.cu"), "  if (tid == 0) hopper::tma_store_wait<0>();  // shared memory must "
               "outlive the stores' reads\n", "")
    named(bf16_gemm(src, "lab5_gemm", 128, 256, 64, (1, 1)), "store-before-exit", "exits", "TMA store")


def test_remote_empty_arrival_sent_to_the_local_barrier() -> None:
    src = _kernel("lab7_clusters.cu")
    src = edit(src, "if (k > 0 && tid < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], tid);",
               "if (k > 0 && tid < CLUSTER) hopper::mbar_arrive(&empty[(it - 1) % STAGES]);")
    src = edit(src, "      if (tid < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], tid);",
               "      if (tid < CLUSTER) hopper::mbar_arrive(&empty[(it - 1) % STAGES]);")
    first = named(bf16_gemm(src, "lab7_gemm", 264, 264, 256, (2, 1, 1), cluster=(2, 1, 1)), "overwrite-while-read",
                  "TMA multicast load", "mbar_arrive_cluster")
    # whichever block's producer the executor runs first into the other's stage: the sentence names both blocks
    m = re.search(r"arrivals from block \((\d),0\) only: the consumers of block \((\d),0\) never arrived on it",
                  str(first))
    assert m and m.group(1) != m.group(2), str(first)
    assert f"of block ({m.group(2)},0) while" in str(first) and "empty[" in str(first)


def test_a_block_leaving_its_cluster_before_the_peers_are_done() -> None:
    """Lab 7 without its last cluster barrier: the peer's consumers still arrive on this block's EMPTY barriers
    after its own work is done, and nothing orders those arrivals before the block exits."""
    src = edit(_kernel("lab7_clusters.cu"), "  hopper::cluster_sync();\n#endif\n}", "#endif\n}")
    named(bf16_gemm(src, "lab7_gemm", 264, 264, 256, (2, 1, 1), cluster=(2, 1, 1)), "exit-before-peers", "exits",
          "arrival on empty[", "barrier.cluster.arrive + barrier.cluster.wait")


TAIL = "#define LAB7_PRODUCER_TAIL 1\n"
TAIL_LOOP = "      for (int j = 0; j < STAGES; ++j, ++it) HOPPER_WAIT(empty, it % STAGES, ((it / STAGES) & 1) ^ 1);\n"


def test_the_producer_tail_lets_a_block_leave_without_the_last_cluster_barrier() -> None:
    """Lab 7 as gpu.matmul builds it (LAB7_PRODUCER_TAIL): the first cluster barrier arrived on .relaxed, the last
    one replaced by the producer waiting until the consumers of both blocks have released every stage. No hazard,
    several pairs per cluster (the ring wraps), and the bits of the lab's build."""
    lab = bf16_gemm(_kernel("lab7_clusters.cu"), "lab7_gemm", 520, 264, 200, (4, 1, 1), cluster=(2, 1, 1))
    tail = bf16_gemm(TAIL + _kernel("lab7_clusters.cu"), "lab7_gemm", 520, 264, 200, (4, 1, 1), cluster=(2, 1, 1))
    clean(tail)
    assert np.array_equal(_c(tail).view(np.uint16), _c(lab).view(np.uint16))


@pytest.mark.parametrize("broken", ["no tail", "a relaxed last cluster barrier instead"])
def test_without_the_tail_the_peer_may_still_arrive_after_the_exit(broken: str) -> None:
    """The same build without the tail's loop, or with a last cluster barrier arrived on .relaxed (it orders
    nothing before it): the peer's consumers' arrivals on this block's EMPTY barriers are not ordered before its
    exit."""
    src = edit(TAIL + _kernel("lab7_clusters.cu"), TAIL_LOOP, "")
    if broken != "no tail":
        src = edit(src, "#if !LAB7_PRODUCER_TAIL\n  hopper::cluster_sync();\n#endif\n}",
                   "  hopper::cluster_arrive_relaxed();\n  hopper::cluster_wait();\n}")
    named(bf16_gemm(src, "lab7_gemm", 520, 264, 200, (4, 1, 1), cluster=(2, 1, 1)), "exit-before-peers", "exits",
          "arrival on empty[")


RELAXED_STORE = 'asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(order + 1) : "memory");'
RELAXED_POLL = ('{ unsigned v_; do { asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v_) : "l"(flag) : '
                '"memory"); } while (v_ < order); }')


@pytest.mark.parametrize("side", ["store", "load"])
def test_relaxed_flag_in_the_streamk_fixup(side: str) -> None:
    src = _kernel("lab9_streamk.cu")
    if side == "store":
        src = edit(src, "if (threadIdx.x == 128) hopper::flag_store_release(flag, order + 1);",
                   "if (threadIdx.x == 128) " + RELAXED_STORE)
        words = ("`st.relaxed.gpu.global.u32", "without release semantics", "flag_store_release")
    else:
        src = edit(src, 'if (threadIdx.x == 128) hopper::flag_wait_geq(flag, order, "flags", owner * CLUSTER + rank);',
                   "if (threadIdx.x == 128) " + RELAXED_POLL)
        words = ("`ld.relaxed.gpu.global.u32", "no acquire semantics", "flag_load_acquire")
    named(bf16_gemm(src, "lab9_gemm", 264, 264, 512, (6, 1, 1), cluster=(2, 1, 1), streamk=3), "flag-ordering",
          *words)


# ------------------------------------------------------------------------------------------- the API
def test_a_deadlock_stays_a_deadlock_in_hazard_mode() -> None:
    with pytest.raises(gpu.KernelDeadlock, match=r"waited on empty\[0\] for parity 0") as e:
        fp32_gemm(LAB2_WRONG_PARITY, "lab2_gemm", 64, 64, 128, (1, 1))
    assert not isinstance(e.value, gpu.HazardError)


def test_hazard_mode_is_deterministic(labs: dict) -> None:
    src = edit(labs["LAB3"], "hopper::wgmma_wait<0>();", "hopper::wgmma_wait<1>();")
    runs = [fp32_gemm(src, "lab3_gemm", 64, 64, 256, (1, 1)) for _ in range(2)]
    assert str(runs[0].error) == str(runs[1].error)
    assert [h.key for h in runs[0].hazards] == [h.key for h in runs[1].hazards]


def test_helpers_gpu_launch_raises_hazard_error_in_executor_options(labs: dict) -> None:
    kern = gpu.compile(edit(labs["LAB3"], "    hopper::wgmma_fence();\n", ""), "lab3_gemm")
    a, b = _operands(64, 64, 64)
    da, db, dc = gpu.to_device(a), gpu.to_device(b), gpu.poison((64, 64), np.float32)
    args = (gpu.tensor_map_2d(da, 64, 64), gpu.tensor_map_2d(db, 64, 64), dc, np.int32(64), np.int32(64),
            np.int32(64))
    gpu.launch(kern, (1, 1), 128, 0, *args)  # hazard mode off: runs (the mistake is silent here, as on the GPU)
    with executor.executor_options(hazards=True), pytest.raises(gpu.HazardError) as e:
        gpu.launch(kern, (1, 1), 128, 0, *args)
    assert isinstance(e.value, gpu.KernelFault) and e.value.kind == "missing-wgmma-fence"
    assert str(e.value).startswith("kernel lab3_gemm (grid (1, 1, 1), block (128, 1, 1), 0 B dynamic smem): hazard")
    assert e.value.hazards and e.value.hazards[0].kind == "missing-wgmma-fence"
    assert executor.last_run().hazards[0].kind == "missing-wgmma-fence"


def test_environment_switches_hazard_mode_on_for_run_isolated(labs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    kern = gpu.compile(edit(labs["LAB3"], "    hopper::wgmma_fence();\n", ""), "lab3_gemm")
    a, b = _operands(64, 64, 64)
    monkeypatch.setenv("HELPERS_EXECUTOR_HAZARDS", "1")
    with pytest.raises(gpu.HazardError, match=r"This notebook is unaffected\.$") as e:
        gpu.run_isolated(kern, (1, 1), 128, 0, TensorMapArg(a, (64, 64)), TensorMapArg(b, (64, 64)),
                         np.zeros((64, 64), np.float32), np.int32(64), np.int32(64), np.int32(64))
    assert e.value.kind == "missing-wgmma-fence"


def test_executor_options_refuses_unknown_fields() -> None:
    with pytest.raises(TypeError, match="unknown executor option"), executor.executor_options(hazzards=True):
        pass


def test_report_lists_the_first_hazard_then_the_rest() -> None:
    hs = [hz.Hazard("expect-tx", "first"), hz.Hazard("unsynchronised", "second", count=3)]
    text = hz.report(hs, then="deadlock: …")
    assert text.splitlines() == ["hazard (expect-tx different from the bytes the copies deliver): first",
                                 "  also: hazard (shared memory written and read by different warps with nothing "
                                 "ordering them): second (seen 3 times)", "  then: deadlock: …"]
    assert hz.short("wgmma.mma_async {%f1, %f2, %f3, %f4, %f5}, %rd1;") == "wgmma.mma_async {%f1, %f2, …, %f5}, %rd1;"


NEIGHBOURS = r"""
extern "C" __global__ void neighbours(int* out) {
  __shared__ int slot[128 + 2];  // shifted by 8 bytes: one 16-byte chunk holds words of warps 0 and 1, 1 and 2, ...
  const int t = threadIdx.x;
  slot[t + 2] = t;
  __syncthreads();
  out[t] = slot[(t * 37 + 5) % 128 + 2];
}
"""


def test_neighbouring_words_of_two_warps_are_no_conflict_but_an_unordered_read_is() -> None:
    """Ordinary accesses are tracked per 4-byte word: two warps writing their own words of one 16-byte chunk do not
    race (Lab 2's init/arrive self-test does this), a read of another warp's word with no barrier between does."""
    res = gpu.run_on_executor(gpu.compile(NEIGHBOURS, "neighbours"), 1, 128, 0, np.zeros(128, np.int32), check=False)
    assert res.hazards == [] and (res.arrays[0] == (np.arange(128) * 37 + 5) % 128).all()
    racy = NEIGHBOURS.replace("  __syncthreads();\n", "")
    res = gpu.run_on_executor(gpu.compile(racy, "neighbours"), 1, 128, 0, np.zeros(128, np.int32), check=False)
    assert res.hazards and {h.kind for h in res.hazards} <= {"unsynchronised", "overwrite-while-read"}


HISTOGRAM = r"""
extern "C" __global__ void histogram(const int* x, int* out) {
  __shared__ int bins[16];
  const int t = threadIdx.x;
  if (t < 16) bins[t] = 0;
  __syncthreads();
  atomicAdd(&bins[x[t] % 16], 1);  // every warp adds into the same bins
  __syncthreads();
  if (t < 16) out[t] = bins[t];
}
"""


def test_atomics_of_two_warps_on_one_word_do_not_race_but_a_plain_write_does() -> None:
    """Shared-memory atomics of different warps on one word are no race (each is one read-modify-write); an atomic
    and a plain access of another warp with nothing ordering them are."""
    x = np.random.default_rng(5).integers(0, 1000, 128).astype(np.int32)
    res = gpu.run_on_executor(gpu.compile(HISTOGRAM, "histogram"), 1, 128, 0, x, np.zeros(16, np.int32), check=False)
    assert res.hazards == [] and res.error is None
    assert (res.arrays[1] == np.bincount(x % 16, minlength=16)).all()
    racy = HISTOGRAM.replace("  if (t < 16) bins[t] = 0;\n  __syncthreads();\n", "  if (t >= 96) bins[t % 16] = 0;\n")
    res = gpu.run_on_executor(gpu.compile(racy, "histogram"), 1, 128, 0, x, np.zeros(16, np.int32), check=False)
    assert res.hazards and res.hazards[0].kind in ("unsynchronised", "overwrite-while-read"), res.hazards


READ_ONLY_WAIT = r"""
extern "C" __global__ void read_only_wait(const __grid_constant__ CUtensorMap out_map) {
  __shared__ alignas(128) float tile[8][32];
  for (int i = threadIdx.x; i < 8 * 32; i += blockDim.x) (&tile[0][0])[i] = float(i + 1000 * blockIdx.x);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(&out_map), "r"(0), "r"(8 * int(blockIdx.x)),
                    "r"(static_cast<unsigned>(__cvta_generic_to_shared(tile))) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n\tcp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}
"""


def test_a_tma_store_waited_for_with_read_only_still_writes_in_hazard_mode() -> None:
    """A kernel that only waits until its TMA stores have read shared memory (``wait_group.read``, as CuTe's
    ``tma_store_wait`` does) still finds its output in global memory after the launch."""
    c = np.full((16, 32), np.nan, np.float32)
    res = gpu.run_on_executor(gpu.compile('#include "hopper.cuh"\n' + READ_ONLY_WAIT, "read_only_wait"), 2, 64, 0,
                              TensorMapArg(c, (8, 32), swizzle=0), check=False)
    assert res.hazards == [] and res.error is None
    want = (np.arange(256)[None, :] + 1000 * np.arange(2)[:, None]).astype(np.float32).reshape(16, 32)
    assert np.array_equal(res.arrays[0], want)


BARRIER_STORE = r"""
#include "hopper.cuh"
extern "C" __global__ void barrier_store(int* out, int word) {
  __shared__ alignas(8) unsigned long long bar[2];
  if (threadIdx.x == 0) hopper::mbar_init(&bar[0], 1);
  __syncthreads();
  if (threadIdx.x == 32) reinterpret_cast<unsigned*>(bar)[word] = 7u;  // word 0 or 1: bar[0], a live mbarrier
  out[threadIdx.x] = 1;
}
"""


@pytest.mark.parametrize("hazards", [True, False])
@pytest.mark.parametrize("word", [0, 1])
def test_a_plain_store_over_a_live_mbarrier_faults(hazards: bool, word: int) -> None:
    """A 4-byte st.shared into either half of an initialised mbarrier is an illegal instruction, with the hazard
    checker (its fused store path) or without."""
    k = gpu.compile(BARRIER_STORE, "barrier_store")
    assert "st.shared.u32" in k.ptx
    with pytest.raises(gpu.KernelFault, match="overwrote a live mbarrier"):
        gpu.run_on_executor(k, 1, 64, 0, np.zeros(64, np.int32), np.int32(word), hazards=hazards)
