"""Whatever the executor cannot do, it says so as its own limit ("the executor does not support ..."), never as a
mistake in the kernel: every construct the course does not use, fed to it one at a time as PTX."""

from __future__ import annotations

import numpy as np
import pytest

HEAD = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p0)
{
 .reg .b32 %r<8>;
 .reg .f32 %f<8>;
 .reg .b64 %rd<8>;
 .reg .pred %p<4>;
 ld.param.u64 %rd1, [p0];
"""

#: construct -> one PTX line using it (the course's kernels use none of them)
CONSTRUCTS = {
    "rcp.approx.ftz.f64": "rcp.approx.ftz.f64 %rd1, %rd2;",
    "brx.idx": "ts: .branchtargets L0; brx.idx %r1, ts;\nL0:",
    "tex": "tex.2d.v4.f32.f32 {%f1,%f2,%f3,%f4}, [%rd1, {%f5,%f6}];",
    "suld": "suld.b.2d.b32.trap {%r1}, [%rd1, {%r2,%r3}];",
    "istypep": "istypep.texref %p1, %rd1;",
    "multimem": "multimem.ld_reduce.global.add.f32 %f1, [%rd1];",
    "tensormap.replace": "tensormap.replace.tile.global_address.global.b1024.b64 [%rd1], %rd2;",
    "cp.reduce.async.bulk": "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd1], [%r1], 16;",
    "mma.sync m8n8k4 f16 into f32": "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 "
                                    "{%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}, {%r1,%r2}, {%r3,%r4}, "
                                    "{%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7};",
    "cp.async.mbarrier.arrive": "cp.async.mbarrier.arrive.noinc.shared.b64 [%r1];",
    "sub-byte wmma": "wmma.load.a.sync.aligned.row.m8n8k32.global.s4 {%r0}, [%rd1];",
    "wgmma sparse": "wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.bf16.bf16 {%f1,%f2,%f3,%f4}, %rd1, %rd2, %r1, 0, "
                    "1, 1, 1, 1, 1;",
    "clusterlaunchcontrol": "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 "
                            "[%r1], [%r2];",
    "getctarank": "getctarank.shared::cluster.u32 %r1, %r2;",
    "red.async": "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%r1], %r2, [%r3];",
    "st.async": "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r1], %r2, [%r3];",
    "alloca": "alloca.u64 %rd1, 16;",
    "stacksave": "stacksave.u64 %rd1;",
    "128-bit registers": ".reg .b128 %q1;\n mov.b128 %q1, {%rd1, %rd2};",
    # next to what the foreign-style corpus (tests/ptx/foreign.py) runs: a tensor map edited in shared memory and
    # copied to global memory, im2col copies, the mbarrier's drop and pending count
    "tensormap.cp_fenceproxy": "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned"
                               " [%rd1], [%r1], 128;",
    "im2col TMA": ".reg .b16 %rs<2>;\n cp.async.bulk.tensor.3d.shared::cluster.global.im2col"
                  ".mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3, %r4}], [%r1], {%rs1};",
    "mbarrier.arrive_drop": "mbarrier.arrive_drop.shared::cta.b64 %rd2, [%r1];",
    "mbarrier.pending_count": "mbarrier.pending_count.b64 %r1, %rd2;",
}

BLAME = ("deadlock", "never initialized", "illegal", "misaligned", "out of bounds", "your kernel")


@pytest.mark.parametrize("construct", sorted(CONSTRUCTS))
def test_a_construct_the_executor_lacks_is_named_as_its_own_limit(construct: str) -> None:
    from helpers.gpu import arrays
    from helpers.gpu.executor.runtime import LIMIT_WORDS, KernelOutcome, run_kernel

    ptx = HEAD + " " + CONSTRUCTS[construct] + "\n ret;\n}\n"
    with pytest.raises(KernelOutcome) as e:
        run_kernel(ptx, "k", (1, 1, 1), (32, 1, 1), 0, [arrays.zeros(64, np.uint32)])
    assert e.value.kind == "unsupported"
    text = e.value.sentence
    assert ("the executor does not support" in text or "the executor cannot read" in text) and LIMIT_WORDS in text
    assert not any(w in text.lower() for w in BLAME), text


def test_through_gpu_launch_it_is_an_executor_limit() -> None:
    from helpers import gpu

    k = gpu.compile('extern "C" __global__ void e(double* x) { double r; asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) '
                    ': "d"(x[threadIdx.x])); x[threadIdx.x] = r; }', "e")
    with pytest.raises(gpu.ExecutorLimit, match="cannot run on the executor: the executor does not support"):
        gpu.launch(k, 1, 32, 0, gpu.zeros(32, np.float64))
