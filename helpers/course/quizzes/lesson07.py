"""Quick checks for lesson 07: the sequence barrier's cursor, block-striped indices, waves, Stream-K ranges and the
fix-up's flags."""

from __future__ import annotations

from helpers.course.grading import Quiz

#: group 0's third wait on a depth-2 ring
third_wait_parity = Quiz(
    "A sequence barrier of depth 2. Group 0's cursor starts at (index 0, phase 1) and advances after each of its "
    "arrivals. Which parity does group 0 wait for at its **third** wait (after two arrivals)?",
    answer=0,
    hint="each arrival moves the index by one; when the index wraps from 1 back to 0 the phase flips",
    explanation="(0, 1) → (1, 1) → (0, 0): the third wait is on slot 0 with parity 0 — the phase group 1's "
    "first arrival there completes",
    wrong=(1, 2, 3),
)

#: the block-striped index of one register in the Lab 9 kernel
stripe_index = Quiz(
    "In the Lab 9 kernel's workspace slot, register j of thread t of consumer warpgroup c is element "
    "c·16384 + j·128 + t. Which element holds register 3 of thread 5 of consumer warpgroup 1?",
    answer=16773,
    hint="16384 per warpgroup, then 128 per register index, then the thread",
    explanation="16384 + 3·128 + 5 = 16773",
    wrong=(17027, 901, 389, 16389),
)

#: sectors per warp access, block-striped
sectors = Quiz(
    "Block-striped fp32: the 32 lanes of a warp each move their register j. How many 32-byte sectors does that "
    "one access touch?",
    answer=4,
    hint="32 lanes × 4 bytes, consecutive",
    explanation="128 consecutive bytes: one line, 4 sectors. With each thread's registers side by side it would be "
    "32 sectors, one per lane",
    wrong=(32, 1, 128),
)

#: data-parallel waves of the 68-pair shape
second_wave = Quiz(
    "1024×4352×8192 in 256×256 pairs gives 68 pairs for 66 clusters. With one whole pair per cluster per wave, how "
    "many clusters are busy during the second wave?",
    answer=2,
    hint="66 pairs fill the first wave",
    explanation="2 of 66: the second wave takes as long as the first while 64 clusters idle. Lab 7 measured 427 "
    "TFLOP/s there, Lab 9 (Stream-K) 708",
    wrong=(66, 68, 0, 64),
)

#: Stream-K iterations per cluster
per_cluster = Quiz(
    "1024×1024×16384: 16 pairs × 256 K steps. Stream-K cuts the iterations into one range per cluster, "
    "per = ceil(total / clusters), on 66 clusters. How many K steps does each cluster get?",
    answer=63,
    hint="total = 16 · 256 = 4096 iterations",
    explanation="ceil(4096 / 66) = 63 (the last cluster gets 4096 − 65·63 = 1)",
    wrong=(62, 64, 256, 4096),
)

#: how many clusters share one pair
splits_of_pair0 = Quiz(
    "Same shape: per = 63, 256 K steps per pair. How many clusters compute a piece of pair 0 (iterations 0–255)?",
    answer=5,
    hint="cluster c covers iterations [63c, 63c + 63)",
    explanation="clusters 0–3 take 63 steps each (0–251), cluster 4 takes 252–255 and then starts pair 1: pair 0 is "
    "a first split, three middle splits and a final split",
    wrong=(4, 1, 66, 6),
)

#: the final split's wait
final_wait = Quiz(
    "A pair is split among four clusters (orders 0, 1, 2, 3). Until the flag reaches which value does the final "
    "split's leader wait?",
    answer=3,
    hint="the split of order o sets the flag to o + 1 when its sum is in",
    explanation="flag ≥ 3 means the splits of order 0, 1 and 2 are all in, summed in K order",
    wrong=(1, 4, 0),
)

_RELAXED = [
    "Nothing: stores from one thread become visible in program order",
    "The reader may see the new flag before the partials and add stale data",
    "The kernel deadlocks",
    "It is only slower",
]

#: a relaxed flag store
relaxed_flag = Quiz(
    "The writer stores its partials, meets its block at a barrier, then thread 128 sets the flag with a plain "
    "(relaxed) store. What can go wrong?",
    answer=_RELAXED[1],
    choices=_RELAXED,
    hint="which instruction orders the earlier stores before the flag for another SM?",
    explanation="only a release (st.release.gpu) orders the partials before the flag for a reader that acquires it",
    wrong=tuple(x for x in _RELAXED if x != _RELAXED[1]),
)

_RESIDENT = [
    "Every cluster the fix-up can wait on is resident and waits only go to lower clusters",
    "The flags are reset to 0 at the end",
    "The workspace is block-striped",
    "Each wait is bounded by a time limit",
]

#: why the fix-up cannot deadlock
no_deadlock = Quiz(
    "Why can the Lab 9 fix-up not deadlock?",
    answer=_RESIDENT[0],
    choices=_RESIDENT,
    hint="a spinning cluster holds its SMs; who must run for its wait to end?",
    explanation="the grid is every co-resident cluster (gpu.persistent_grid), and a split waits only for splits of "
    "lower clusters, so the chain of waits always ends at a cluster that is running and never waits",
    wrong=tuple(x for x in _RESIDENT if x != _RESIDENT[0]),
)

#: the participant count of the ping-pong kernel's order slots
participants = Quiz(
    "In the ping-pong kernel every one of the 128 threads of a consumer warpgroup runs `mbarrier.arrive` (count 1) "
    "on the next warpgroup's order slot. What count must `mbarrier.init` give each slot?",
    answer=128,
    hint="one phase, one turn: how many arrivals does one turn bring?",
    explanation="128: the phase must complete once per turn, when the last of the 128 threads arrives. With 1 or 2 "
    "the H100 traps at the first warp's arrive: its 32 lanes arrive together, more than the phase awaits (the "
    "Python model, taking one thread at a time, would instead hand out extra turns early); with 256 the phase "
    "never completes",
    wrong=(1, 2, 4, 256),
)
