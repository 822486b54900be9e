"""Quick checks of Lesson 01 (TMA): tensor maps, coordinates, swizzle and banks, proxies, stores."""

from __future__ import annotations

from helpers.course.grading import Quiz
from helpers.course.quizzes._judges import choice, ints


def _coords(response: object) -> tuple[bool, str]:
    got = ints(response)
    if len(got) != 2:
        return False, f"{response!r}: give two numbers, c0 then c1 (e.g. '64, 128')"
    if got == [320, 192]:
        return True, ""
    if got == [5, 3] or got == [3, 5]:
        return False, "those are tile indices; TMA coordinates are element offsets (multiply by 64)"
    if got == [192, 320]:
        return False, "innermost dimension first: c0 walks along a row of A (the K direction)"
    return False, f"{response} is not the A tile of block row 3 at K step 5"


strides = Quiz(
    "A rank-3 tensor map: how many values does cuTensorMapEncodeTiled read from its globalStrides array?",
    answer=2,
    hint="the innermost dimension must be dense, so its stride is implied by the element size",
    explanation="rank − 1 = 2: the byte strides of dimensions 1 and 2. Dimension 0's stride is always the "
    "element size, so the driver never asks for it.",
    wrong=(3, 1, 5, 0),
)

row_stride = Quiz(
    "A row-major bf16 matrix has 8192 rows of 3000 columns, each row padded to 3008 elements. What is "
    "globalStrides[0], the byte stride of dimension 1 (rows)?",
    answer=6016,
    hint="one whole row as it sits in memory, padding included, in bytes",
    explanation="3008 elements × 2 bytes = 6,016 bytes from one row to the next (a multiple of 16, as required).",
    wrong=(6000, 3008, 16384, 2, 3000),
)

coords = Quiz(
    "A is 8192×8192 bf16 with a 64×64 box. Which coordinates (c0, c1) does the TMA load of block row 3 at "
    "K step 5 use?",
    _coords,
    right="320, 192",
    hint="element offsets, innermost (column) first: (64 × K step, 64 × block row)",
    explanation="(5·64, 3·64) = (320, 192): columns 320–383 of rows 192–255.",
    wrong=("5, 3", "192, 320", "3, 5", "320"),
)

oob_bytes = Quiz(
    "A 64×64 bf16 box is loaded at coordinates where only its top half lies inside the tensor. How many "
    "bytes does the TMA report to the mbarrier (complete_tx)?",
    answer=8192,
    hint="out-of-bounds elements are filled, not skipped",
    explanation="The whole box, 64 × 64 × 2 = 8,192 bytes, filled elements included — so expect_tx is "
    "the same for every tile, edge or not.",
    wrong=(4096, 0, 16384, 2048),
)

swizzle_chunk = Quiz(
    "128B swizzle, 128-byte box rows, buffer aligned to 1024 bytes: 16-byte chunk 5 of box row 11 lands in "
    "which chunk (0–7) of its shared-memory row?",
    answer=6,
    hint="chunk XOR (row mod 8)",
    explanation="11 mod 8 = 3, and 5 XOR 3 = 6.",
    wrong=(5, 3, 14, 1, 2),
)

box_limit = Quiz(
    "With CU_TENSOR_MAP_SWIZZLE_64B and bf16 data, what is the largest inner box dimension (in elements) "
    "the driver accepts?",
    answer=32,
    hint="the inner extent of the box may not exceed the swizzle span",
    explanation="64 bytes ÷ 2 bytes per bf16 = 32 elements.",
    wrong=(64, 16, 256, 128),
)

conflicts = Quiz(
    "No swizzle, 128-byte rows: the 8 threads of a quarter-warp each read 16-byte chunk 0 of rows 0–7. "
    "How many passes does shared memory need, where a conflict-free read needs 1?",
    answer=8,
    hint="which banks does chunk 0 of every row sit in?",
    explanation="Every row's chunk 0 sits in banks 0–3, so the 8 reads go one after another: 8 passes.",
    wrong=(1, 2, 4, 32),
)

_FENCE = "fence.proxy.async.shared::cta in the writing threads and then a block barrier"

store_fence = Quiz(
    "Threads write the C tile into shared memory with ordinary stores; then one thread issues a TMA store "
    "of it. What must come in between?",
    judge=choice(_FENCE, {
        "nothing: the TMA sees shared memory as it is": "ordinary stores and the TMA use different proxies",
        "a block barrier only (__syncthreads)": "the barrier orders the threads, but not the two proxies",
        "cp.async.bulk.wait_group 0": "that waits for earlier TMA stores; it does not publish your writes",
    }),
    right=_FENCE,
    choices=[
        "nothing: the TMA sees shared memory as it is",
        _FENCE,
        "a block barrier only (__syncthreads)",
        "cp.async.bulk.wait_group 0",
    ],
    hint="ordinary stores are in the generic proxy, the TMA reads through the async proxy",
    explanation="The fence makes each thread's generic-proxy writes visible to the async proxy; the "
    "barrier makes sure every thread has written (and fenced) before the one thread issues the store.",
    wrong=("nothing: the TMA sees shared memory as it is", "a block barrier only (__syncthreads)",
           "cp.async.bulk.wait_group 0"),
)

load_fence = Quiz(
    "A TMA load has completed (the mbarrier phase flipped). Do threads need a proxy fence before reading the "
    "tile with ordinary shared-memory loads?",
    answer="no",
    choices=["yes", "no"],
    hint="which direction needs the fence: generic → async, or async → generic?",
    explanation="No: async-proxy writes are visible to the generic proxy once their completion is observed "
    "through the mbarrier wait.",
    wrong=("yes",),
)

store_wait = Quiz(
    "A TMA store was committed as a bulk group. The kernel wants to overwrite the same shared-memory buffer "
    "with the next tile. Which wait is enough?",
    judge=choice("cp.async.bulk.wait_group.read 0", {
        "an mbarrier wait": "stores report through bulk groups, not through an mbarrier",
        "fence.proxy.async.shared::cta": "a fence orders memory operations; it does not wait for the store",
        "nothing: the store copied the data when it was issued": "the copy runs asynchronously, after issue",
    }),
    right="cp.async.bulk.wait_group.read 0",
    choices=[
        "cp.async.bulk.wait_group.read 0",
        "an mbarrier wait",
        "fence.proxy.async.shared::cta",
        "nothing: the store copied the data when it was issued",
    ],
    hint="the buffer is free once the TMA has *read* it; it does not need to wait for global memory",
    explanation=".read waits only until the source bytes have been read out of shared memory; plain "
    "wait_group also waits for the writes to global memory, which is needed only before someone reads C.",
    wrong=("an mbarrier wait", "fence.proxy.async.shared::cta", "nothing: the store copied the data when it "
           "was issued"),
)

_PARAM_OPTIONS = [
    "it copies the 128 bytes to the thread's stack (local memory) and hands the TMA that copy's address",
    "it hands the TMA the address of the kernel parameter itself",
    "it refuses to compile the kernel",
    "it copies the tensor map into shared memory",
]

#: what the compiler does with a by-value tensor map whose address is taken, without __grid_constant__
by_value_map = Quiz(
    "A kernel takes `const CUtensorMap tmap` (no `__grid_constant__`) and passes `&tmap` to the TMA load. Predict "
    "what NVRTC does with it (the next cell compiles both versions).",
    judge=choice(_PARAM_OPTIONS[0], {
        _PARAM_OPTIONS[1]: "only a __grid_constant__ parameter may have its address taken in place; otherwise C++ "
                           "lets the function modify its own copy, so the compiler makes one",
        _PARAM_OPTIONS[2]: "it compiles without a word: the kernel is valid C++",
        _PARAM_OPTIONS[3]: "shared memory is never used for a copy the compiler makes on its own",
    }),
    right=_PARAM_OPTIONS[0],
    choices=_PARAM_OPTIONS,
    hint="a by-value parameter is the function's own variable: what does taking its address require?",
    explanation="the PTX shows a 128-byte local depot filled from the parameter and its generic address given to "
    "cp.async.bulk.tensor; the tensor-map operand is documented to live in the parameter, constant or global "
    "space, so that address is not one the TMA is meant to read",
    wrong=tuple(_PARAM_OPTIONS[1:]),
)
