"""Quick checks for lesson 06 (the epilogue): proxies and fences, bulk groups and wait depths, sub-tiles, bank
conflicts, rounding."""

from __future__ import annotations

import re

from helpers.course.grading import Quiz


def _fence(response) -> tuple[bool, str]:
    text = str(response).strip().rstrip(";").lower()
    if re.fullmatch(r"fence\.proxy\.async(\.shared::cta)?", text) or "fence_proxy_async" in text:
        return True, ""
    if "syncthreads" in text or text.startswith("bar"):
        return False, "a barrier orders threads, not the two proxies: the TMA would still not see the writes"
    if "mbarrier_init" in text:
        return False, "that fence publishes an mbarrier's initialisation to the cluster"
    return False, f"{response!r} is not it"


def _hex16(expected: int, mistakes: dict[int, str]):
    def judge(response) -> tuple[bool, str]:
        text = str(response).strip().lower()
        try:
            value = int(text, 16) if text.startswith("0x") or re.search(r"[a-f]", text) else int(text, 0)
        except ValueError:
            return False, f"{response!r}: answer with the 16-bit pattern, e.g. 0x3f80"
        return (True, "") if value == expected else (False, mistakes.get(value, f"{value:#06x} is not it"))

    return judge


#: the fence
fence = Quiz(
    "Which PTX instruction must each thread execute after writing its part of a sub-tile with st.shared, so that "
    "the TMA store sees the bytes?", _fence, right="fence.proxy.async.shared::cta",
    hint="the writes and the TMA go through two different proxies", wrong=("bar.sync", "__syncthreads()",
                                                                           "fence.mbarrier_init.release.cluster"))

#: wait depth
wait_depth = Quiz(
    "An epilogue cycles through 3 shared buffers. Before writing a buffer again, thread 0 waits with "
    "cp.async.bulk.wait_group.read N. What is the largest safe N?", answer=2,
    hint="which earlier stores may still be reading when this buffer is reused?",
    explanation="the store that last read this buffer is 3 groups back; the 2 newer ones may still run",
    wrong=(3, 0, 1))

#: what .read waits for
read_means = Quiz(
    "What does cp.async.bulk.wait_group.read 0 wait for?",
    answer="the stores have finished reading shared memory",
    choices=["the stores have finished reading shared memory", "the stores' bytes are in global memory",
             "every thread of the warpgroup has arrived"],
    hint="what does a buffer's next writer need to know?",
    explanation="that is all the writer of the buffer needs; without .read it would also wait for global memory",
    wrong=("the stores' bytes are in global memory", "every thread of the warpgroup has arrived"))

#: bytes of a sub-tile
sub_bytes = Quiz("How many bytes of shared memory does one 64×64 bf16 sub-tile take?", answer=8192,
                 hint="64 rows of 128 bytes", wrong=(16384, 4096, 64))

#: a tie
tie = Quiz(
    "fp32 0x3F818000 lies exactly halfway between the bf16 values 0x3F81 and 0x3F82. What does cvt.rn.bf16x2.f32 "
    "give (hex)?", _hex16(0x3F82, {0x3F81: "that is truncation (toward zero); a tie goes to the even neighbour"}),
    right="0x3f82", hint="ties go to the neighbour whose last bit is 0", wrong=("0x3f81", "0x3f80"))

#: stores in flight at the next mainloop
pending_at_mainloop = Quiz(
    "In Lab 6 (2 buffers per consumer warpgroup, wait_group.read 1 before every sub-tile), how many of a warpgroup's "
    "TMA stores may still be in flight when its next tile's mainloop starts?", answer=2,
    hint="run the Lab 6 operations through the epilogue model for two tiles",
    explanation="the last two sub-tiles' stores: the next tile's first wait retires the older one",
    wrong=(0, 1, 4))

#: bank conflicts of the plain layout
plain_passes = Quiz(
    "A warp writes registers 0 and 1 (a bf16 pair per lane) into a plain row-major 64×64 bf16 sub-tile (128-byte "
    "rows). How many passes does the shared-memory store take?", answer=8,
    hint="lanes 0-31 hold rows 0-7 (lane / 4) of the same columns",
    explanation="eight rows, the same 16-byte chunk of each, 128 bytes apart: each bank is hit by 8 lanes",
    wrong=(1, 32, 4))

#: stmatrix instructions
stmatrix_count = Quiz(
    "A warp holds 16 rows × 64 columns of a sub-tile in bf16. How many stmatrix.x4 instructions (four 8×8 matrices "
    "each) store them?", answer=4, hint="16 × 64 × 2 bytes, 512 bytes per stmatrix.x4",
    explanation="2048 bytes / 512 = 4, against 16 four-byte st.shared per thread", wrong=(16, 1, 8))

#: blocks that share one output row
row_blocks = Quiz(
    "D is 4096×4096 and each block computes a 128×256 tile. A layer norm needs the mean of each whole row of D: how "
    "many blocks each hold a piece of one row?", answer=16, hint="N divided by the tile's width",
    explanation="4096 / 256 = 16 blocks, none of which sees the other 15 pieces before it stores its own",
    wrong=(1, 32, 128))

#: what griddepcontrol.wait waits for
pdl_wait = Quiz(
    "A kernel launched with programmatic stream serialization runs griddepcontrol.wait. Until when does the wait "
    "hold it: (a) until every block of the previous kernel has run griddepcontrol.launch_dependents, (b) until the "
    "previous kernel has finished and its memory writes are visible, (c) until the previous kernel's first block "
    "ends?", answer="b", hint="the trigger only lets the kernel start; reading the previous kernel's output is what "
    "the wait protects", explanation="the trigger decides when the dependent kernel may start; the wait decides "
    "when it may read", wrong=("a", "c"))
