"""Quick checks for lesson 03 (WGMMA): instruction counts, the descriptor, the accumulator fragment layout."""

from __future__ import annotations

import re

from helpers.grading import Quiz


def _pair(expected: tuple[int, int], mistakes: dict[tuple[int, int], str], what: str):
    """A judge for an answer of two integers, written '25, 10', '(25, 10)' or '25 10'."""

    def judge(response) -> tuple[bool, str]:
        numbers = re.findall(r"-?\d+", str(response))
        if len(numbers) != 2:
            return False, f"{response!r}: answer with two numbers, {what}"
        got = (int(numbers[0]), int(numbers[1]))
        if got == expected:
            return True, ""
        return False, mistakes.get(got, f"{got} is not it ({what})")

    return judge


#: wgmma instructions per 64-wide K step
per_k_step = Quiz(
    "With BK = 64 and bf16 inputs, how many `wgmma.mma_async.m64n64k16` instructions does one K step issue?",
    answer=4,
    hint="each instruction consumes 16 values of K",
    explanation="64 / 16 = 4, each reading the next 16 columns of the A tile and of the B tile",
    wrong=(1, 16, 64),
)

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
    judge=_pair((25, 10), {
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
    judge=_pair((66, 11), {
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
