"""The Hopper model: what the H100 does, in pure numpy, checked bit for bit against captures from the H100
(``tests/data/``). One module per hardware idea:

``tensormap`` (cuTensorMapEncodeTiled's rules) · ``tma`` (bulk tensor copies, swizzles) · ``mbarrier`` (phases,
arrivals, transaction bytes) · ``wgmma`` (descriptors, fragments, the tensor core's addition order) · ``pipeline``
(producer/consumer rings) · ``cluster`` (multicast, distributed shared memory) · ``scheduler`` (persistent tiles,
raster order) · ``epilogue`` (sub-tile staging and stores) · ``seqbar`` (ordered sequence barriers) · ``striped``
(block-striped reduction) · ``streamk`` (Stream-K splits and fix-up) · ``faults`` (how the GPU reports a failed
kernel).

May import: the standard library, numpy and ml_dtypes. Nothing of the course (not ``helpers.gpu``, not
``helpers.course``), so it runs anywhere and the other rooms build on it.
"""
