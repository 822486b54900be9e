"""Quick checks for lesson 03 (WGMMA): instruction counts, the descriptor, the accumulator fragment layout."""

from __future__ import annotations

from helpers.course.grading import Quiz
from helpers.course.quizzes._judges import choice, pair

#: registers per thread for a wider instruction
registers_n128 = Quiz(
    "How many fp32 accumulator registers does each thread of the warpgroup hold for `m64n128k16`?",
    answer=64,
    hint="64 × N accumulators shared by 128 threads",
    explanation="64 × 128 / 128 = 64 registers per thread (N/2 in general)",
    wrong=(32, 128, 16),
)

#: the descriptor's start-address step
start_step = Quiz(
    "In a 128B-swizzled, K-major bf16 tile, the descriptor of the k-th `m64n64k16` points 32·k bytes past the "
    "tile. By how much does the 14-bit *start address field* (bits 0–13) change from one k to the next?",
    answer=2,
    hint="the field holds the byte address shifted right by 4",
    explanation="32 bytes >> 4 = 2: adding 2 to the descriptor (as a 64-bit integer) steps K by 16",
    wrong=(32, 16, 1),
)

#: the stride byte offset
sbo = Quiz(
    "For a 128B-swizzled K-major tile, what stride byte offset (SBO, in bytes, before the >> 4) goes into the "
    "descriptor?",
    answer=1024,
    hint="the distance from one group of 8 rows (one swizzle atom) to the next; each row is 128 bytes",
    explanation="8 rows × 128 bytes = 1024 bytes: the step from rows 0–7 to rows 8–15 of the tile",
    wrong=(128, 16, 64, 8192),
)

#: thread/register -> element
element = Quiz(
    "In the `m64n64k16` accumulator, which element (row, column) of the 64×64 tile does thread 37 hold in its "
    "register 6? Answer as 'row, column'.",
    judge=pair((25, 10), {
        (10, 25): "that is (column, row): swap them",
        (17, 10): "register 6 is in the lower half of the pair of rows (j/2 is odd): add 8 to the row",
        (25, 12): "the column is 8·(j/4) + 2·(lane % 4) + j % 2, with lane = 37 % 32",
        (9, 10): "thread 37 is in warp 1, whose band starts at row 16",
    }, "row, column"),
    right="25, 10",
    hint="warp w = t/32, lane l = t%32; row = 16w + l/4 + 8·((j/2)%2); column = 8·(j/4) + 2·(l%4) + j%2",
    explanation="warp 1, lane 5: row 16 + 1 + 8 = 25, column 8 + 2 + 0 = 10",
    wrong=("10, 25", "17, 10", "9, 10", "25, 12"),
)

#: element -> thread/register
owner = Quiz(
    "In the `m64n64k16` accumulator, which thread holds C[40][21] of the 64×64 tile, and in which register? "
    "Answer as 'thread, register'.",
    judge=pair((66, 11), {
        (11, 66): "that is (register, thread): swap them",
        (64, 11): "the lane inside the warp is 4·(row in the band mod 8) + (column mod 8)/2",
        (66, 9): "rows 8–15 of a warp's band use the registers with (j/2) odd",
        (66, 10): "an odd column is the second register of a pair (j % 2 = 1)",
    }, "thread, register"),
    right="66, 11",
    hint="row 40 is in warp 2's band (rows 32–47), 8 rows down; column 21 = 8·2 + 2·2 + 1",
    explanation="warp 2, lane 4·0 + 2 = 2 → thread 66; j/4 = 2, (j/2)%2 = 1, j%2 = 1 → register 11",
    wrong=("11, 66", "64, 11", "66, 9", "66, 10"),
)

#: the layout at N = 128, predicted from the formula before the explorer shows it
element_n128 = Quiz(
    "Now `m64n128k16` (64 registers per thread). Predict which element (row, column) of the 64×128 tile thread 37 "
    "holds in its register 40. Answer as 'row, column'.",
    judge=pair((17, 82), {
        (82, 17): "that is (column, row): swap them",
        (17, 18): "the columns do not wrap at 64: register j covers column group j/4, up to N/8 − 1 = 15",
        (25, 82): "register 40: j/2 = 20 is even, so this is the upper row of the pair",
        (17, 80): "the lane's position in its quad adds 2·(lane % 4) columns",
    }, "row, column"),
    right="17, 82",
    hint="the same formula as for N = 64: warp w = t/32, lane l = t%32; row = 16w + l/4 + 8·((j/2)%2); "
    "column = 8·(j/4) + 2·(l%4) + j%2",
    explanation="warp 1, lane 5: row 16 + 1 + 8·0 = 17; column 8·10 + 2·1 + 0 = 82",
    wrong=("82, 17", "17, 18", "25, 82", "17, 80"),
)

_SCALE_OPTIONS = [
    "scale-d = 1 (D = A·B + D), A and B not negated, neither transposed (both K-major)",
    "A, B and D are each multiplied by 1, and the result is stored 0 times transposed",
    "scale-d = 1 (D = A·B + D), A and B not negated, both transposed (MN-major)",
    "scale-d = 1 means overwrite D; the two 0s zero the accumulators",
]

#: what the five template arguments of a wgmma wrapper mean
template_args = Quiz(
    "A wrapper called as `wgmma64<1, 1, 1, 0, 0>(d, &sA[k*16], &sB[k*16])` fills the last five "
    "operands of `wgmma.mma_async` (scale-d, imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b). What do they say?",
    judge=choice(_SCALE_OPTIONS[0], {
        _SCALE_OPTIONS[1]: "scale-d is not a multiplier: it chooses between D = A·B + D (true) and D = A·B (false)",
        _SCALE_OPTIONS[2]: "imm-trans = 0 means no transpose: the operand is K-major, as TMA wrote our tiles",
        _SCALE_OPTIONS[3]: "scale-d = 0 is the overwrite; 1 accumulates",
    }),
    right=_SCALE_OPTIONS[0],
    choices=_SCALE_OPTIONS,
    hint="scale-d picks accumulate or overwrite; imm-scale-a/b are ±1; imm-trans-a/b pick K-major (0) or MN-major (1)",
    explanation="accumulate into d, no negation, both operands K-major. Pass scale-d = 0 on the first K step instead "
    "of zeroing the 32 accumulators",
    wrong=tuple(_SCALE_OPTIONS[1:]),
)

_FENCE_OPTIONS = [
    "fence.proxy.async.shared::cta in the writing threads, then a block barrier",
    "wgmma.fence.sync.aligned",
    "nothing: wgmma reads shared memory like any load",
    "wgmma.wait_group 0",
]

#: which fence publishes st.shared operands to the tensor core
operand_fence = Quiz(
    "Threads write the A and B tiles into shared memory with ordinary stores (no TMA), then the warpgroup issues "
    "`wgmma`. What makes those stores visible to the tensor core?",
    judge=choice(_FENCE_OPTIONS[0], {
        _FENCE_OPTIONS[1]: "wgmma.fence orders register accesses (accumulators, an A fragment in registers); it "
                           "says nothing about shared memory written through the generic proxy",
        _FENCE_OPTIONS[2]: "wgmma reads its operands through the async proxy, like the TMA",
        _FENCE_OPTIONS[3]: "that waits for earlier wgmma groups; it does not publish anyone's stores",
    }),
    right=_FENCE_OPTIONS[0],
    choices=_FENCE_OPTIONS,
    hint="ordinary stores are in the generic proxy; which proxy do wgmma's operand reads use?",
    explanation="the proxy fence makes each thread's generic writes visible to the async proxy, and the barrier "
    "makes sure every thread has written and fenced before anyone issues the wgmma. Tiles written by TMA need "
    "neither: the mbarrier wait delivers them",
    wrong=tuple(_FENCE_OPTIONS[1:]),
)
