"""Lab 9's kernel with 128×128 tiles (``-DLAB9_BN=128``, what ``gpu.matmul`` picks for shapes with few 128×256
tiles) on the executor in hazard mode: whole pairs give the bits of the 128×256 kernel, and Stream-K splits (first,
middle and final) meet the fp64 reference, leave every flag at 0 and give the same bits on the next launch, whatever
the previous launch left in the workspace. Every edge misses its tile. ``gpu.matmul``'s build hands the partial
sums on in parallel (``-DLAB9_PARALLEL_FIXUP=1``): the lab's chain's bits, through each split's own slot."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gemm_operands

from helpers import gpu
from helpers.gpu import TensorMapArg
from helpers.gpu import gemm as mm


def lab_kernel(bn: int) -> gpu.Kernel:
    """Lab 9's kernel as the lab builds it (the chain of splits), at tile width `bn`."""
    return gpu.compile((mm.KERNELS_DIR / "lab9_streamk.cu").read_text(), "lab9_gemm", filename="lab9_streamk.cu",
                       options=(f"-DLAB9_BN={bn}",))


def run(bn: int, a: np.ndarray, b: np.ndarray, clusters: int, ws: np.ndarray | None = None,
        flags: np.ndarray | None = None, kernel: gpu.Kernel | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One launch of the course's Lab 9 kernel (``gpu.matmul``'s build unless `kernel`) at tile width `bn` on
    `clusters` clusters, C poisoned, hazard mode; returns C, the workspace and the flags after it (fresh zeroed ones
    unless given)."""
    (m, k), n = a.shape, b.shape[0]
    ws = np.zeros(clusters * 2 * 128 * bn, np.float32) if ws is None else ws
    flags = np.zeros(clusters * 2, np.uint32) if flags is None else flags
    c = np.full((m, n), np.nan, gpu.bfloat16)
    res = gpu.run_on_executor(kernel or mm.course_kernel("lab9", bn), (2 * clusters, 1, 1), 384, mm.smem_bytes(bn),
                              TensorMapArg(a, (128, 64)), TensorMapArg(b, (bn // 2, 64)), TensorMapArg(c, (64, 64)),
                              np.int32(m), np.int32(n), np.int32(k), ws, flags, cluster=(2, 1, 1), check=False)
    assert res.error is None and res.hazards == [], "\n".join(str(h) for h in res.hazards[:3]) or str(res.error)
    return res.arrays[2], res.arrays[3], res.arrays[4]


def test_whole_pairs_give_the_bits_of_the_wide_tiles():
    """300×200×200: 2 × 2 pairs of 256×128 on 4 clusters, one each (no split), against the 128×256 kernel's 2 pairs
    on 2 clusters: the same bits, the workspace never touched."""
    a, b = gemm_operands(300, 200, 200, seed=11)
    narrow, ws, flags = run(mm.NARROW, a, b, clusters=4)
    wide, _, _ = run(mm.WIDE, a, b, clusters=2)
    assert np.array_equal(narrow.view(np.uint16), wide.view(np.uint16))
    assert not ws.any() and not flags.any()
    gpu.check_gemm(narrow, a.astype(np.float64) @ b.astype(np.float64).T, 200)


def test_lab7s_one_warpgroup_narrow_tiles_give_the_same_bits():
    """Lab 7's kernel with 128×128 tiles (``-DLAB7_BN=128``: one consumer warpgroup computes the whole tile as two
    64-row halves, the other waits), what ``gpu.matmul`` runs where the narrow pairs fill their wave: 520×264×200 makes
    3 × 3 pairs of 256×128 on 2 clusters (several each, every edge partial, K not a multiple of 64), hazard mode: the
    bits of Lab 9's narrow tiles on whole pairs, within the fp64 reference's bound."""
    a, b = gemm_operands(520, 264, 200, seed=12)
    c = np.full((520, 264), np.nan, gpu.bfloat16)
    res = gpu.run_on_executor(mm.course_kernel("lab7", mm.NARROW), (4, 1, 1), 384, mm.smem_bytes(mm.NARROW),
                              TensorMapArg(a, (128, 64)), TensorMapArg(b, (64, 64)), TensorMapArg(c, (64, 64)),
                              np.int32(520), np.int32(264), np.int32(200), cluster=(2, 1, 1), check=False)
    assert res.error is None and res.hazards == [], "\n".join(str(h) for h in res.hazards[:3]) or str(res.error)
    lab9, _, _ = run(mm.NARROW, a, b, clusters=9)
    assert np.array_equal(res.arrays[2].view(np.uint16), lab9.view(np.uint16))
    gpu.check_gemm(res.arrays[2], a.astype(np.float64) @ b.astype(np.float64).T, 200)


@pytest.mark.parametrize(("shape", "clusters", "chain_slots", "parallel_slots"), [
    # 2 pairs × 16 K steps on 5 clusters (7 K steps each): pair 0 is split first / middle / final over clusters 0,
    # 1, 2, pair 1 over clusters 2, 3, 4. The chain goes through the owners' slots: cluster 0's (slots 0, 1) and
    # cluster 2's (slot 4: its second block's rows lie past M = 300, so its partial sums are zeros). In parallel,
    # each split but the final one writes its own cluster's slot: clusters 0, 1, 2 and 3.
    ((300, 104, 1000), 5, [0, 1, 4], [0, 1, 2, 3, 4, 6]),
    # 9 pairs: 4 whole ones round-robin, then Stream-K over 5
    ((520, 264, 1000), 4, [0, 2, 3, 4, 5], None),
    # 2 pairs × 16 K steps on 4 clusters, as gpu.gemm.streamk_clusters launches few pairs: each pair cut in two equal
    # halves, a first split (clusters 0 and 2, their own slots either way) and a final one, no middle split
    ((300, 104, 1024), 4, [0, 1, 4], [0, 1, 4]),
])
def test_stream_k_splits_meet_the_reference_and_repeat_their_bits(shape, clusters, chain_slots, parallel_slots):
    m, n, k = shape
    a, b = gemm_operands(m, n, k, seed=5)
    chain, _, _ = run(mm.NARROW, a, b, clusters, kernel=lab_kernel(mm.NARROW))
    for kernel, slots in ((lab_kernel(mm.NARROW), chain_slots), (None, parallel_slots)):
        first, ws, flags = run(mm.NARROW, a, b, clusters, kernel=kernel)
        gpu.check_gemm(first, a.astype(np.float64) @ b.astype(np.float64).T, k)
        assert np.array_equal(first.view(np.uint16), chain.view(np.uint16)), "the same additions in the same order"
        assert not flags.any(), "every final split puts its flag back to 0"
        written = [int(i) for i in np.flatnonzero((ws.reshape(clusters * 2, -1) != 0).any(axis=1))]
        if slots is not None:
            assert written == slots, "the partial sums went through the expected workspace slots"
        # the workspace as the last launch left it
        again, _, flags = run(mm.NARROW, a, b, clusters, ws=ws, flags=flags, kernel=kernel)
        assert np.array_equal(again.view(np.uint16), first.view(np.uint16)) and not flags.any()


def test_a_wide_host_launch_of_the_narrow_kernel_does_not_pass_silently():
    """The B box is the multicast half, BN / 2 rows: a launch with the 128×256 kernel's 128-row box delivers more
    bytes than the narrow kernel's barrier expects, and the executor says so instead of computing a wrong C."""
    a, b = gemm_operands(300, 200, 200, seed=2)
    c = np.full((300, 200), np.nan, gpu.bfloat16)
    with pytest.raises(gpu.GpuError, match="TMA"):
        gpu.run_on_executor(mm.course_kernel("lab9", mm.NARROW), (8, 1, 1), 384, mm.smem_bytes(mm.NARROW),
                            TensorMapArg(a, (128, 64)), TensorMapArg(b, (128, 64)), TensorMapArg(c, (64, 64)),
                            np.int32(300), np.int32(200), np.int32(200), np.zeros(4 * 2 * 128 * 128, np.float32),
                            np.zeros(8, np.uint32), cluster=(2, 1, 1))


def test_each_width_compiles_to_its_own_wgmma_without_spills():
    """The default build is the 128×256 kernel (m64n256k16 only); -DLAB9_BN=128 gives m64n128k16 only; neither
    spills."""
    for bn, other in ((256, 128), (128, 256)):
        kern = mm.course_kernel("lab9", bn)
        assert f".m64n{bn}k16." in kern.ptx and f".m64n{other}k16." not in kern.ptx
        assert kern.report.spill_stores == kern.report.spill_loads == 0
