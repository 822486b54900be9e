"""Quick checks for lesson 04 (pipelines): ring slots, the producer's first wait, arrival counts, the delayed
release, setmaxnreg budgets, cooperative vs ping-pong consumers."""

from __future__ import annotations

from helpers.course.grading import Quiz

from ._judges import choice as _choice
from ._judges import pair as _pair_of


def _pair(right: tuple[int, int], why: dict[tuple[int, int], str]):
    return _pair_of(right, why, "stage, parity")


#: stage and phase of a use in a ring that is not a power of two
ring_slot = Quiz(
    "A ring has S = 5 stages. Use k = 13 (the fourteenth K tile): which stage does it use, and which parity does "
    "the consumer wait for on that stage's FULL barrier? Answer as `stage, parity`.",
    judge=_pair((3, 0), {
        (3, 1): "the parity does not follow k: it flips once per wrap of the ring, and 13 // 5 = 2 wraps",
        (1, 1): "k % 4 or k % 2 is for a ring of four or two stages; this one has five",
        (3, 2): "the parity is 0 or 1: (k // S) & 1",
        (13, 0): "the stage wraps around: k % S",
    }),
    right="3, 0",
    hint="stage k % S; parity (k // S) & 1",
    explanation="13 % 5 = 3 and 13 // 5 = 2: it is the third fill of stage 3, the completion of phase 2 of "
    "FULL[3], parity 0",
    wrong=("3, 1", "1, 1", "3, 2", "13, 0"),
)

_FIRST_WAIT = [
    "it passes at once",
    "it blocks until the consumers release the stage once, then passes",
    "it blocks forever: a deadlock",
]

#: the producer's first wait with the unflipped parity
first_wait = Quiz(
    "The consumers do *not* pre-arrive on EMPTY. At use k = 0 the producer waits on a fresh EMPTY[0] with parity "
    "0 (not flipped). What happens?",
    judge=_choice(_FIRST_WAIT[2], {
        _FIRST_WAIT[0]: "parity 0 asks whether phase 0 has completed; on a fresh barrier phase 0 is the one in "
                        "progress. It is parity 1 that passes at once",
        _FIRST_WAIT[1]: "the consumers release a stage only after reading it, and nothing was loaded into it yet: "
                        "nobody will ever arrive",
    }),
    right=_FIRST_WAIT[2],
    choices=_FIRST_WAIT,
    hint="who would complete phase 0 of EMPTY[0], and what are they waiting for?",
    explanation="phase 0 of EMPTY[0] needs the consumers' releases, the consumers wait on FULL[0], FULL[0] waits "
    "for the producer: a deadlock. Wait with parity 1 (phase ^ 1), or have the consumers pre-arrive on every EMPTY",
    wrong=(_FIRST_WAIT[0], _FIRST_WAIT[1]),
)

#: the EMPTY count when every consumer thread arrives
empty_count = Quiz(
    "Two consumer warpgroups read every stage, and in this kernel *every* thread of a consumer warpgroup arrives "
    "on EMPTY[s] when it is done with the stage. What arrival count must EMPTY[s] be initialised with?",
    answer=256,
    hint="count the arrivals one phase gets: threads per warpgroup × consumer warpgroups",
    explanation="2 × 128 = 256. With one elected thread per warpgroup it would be 2; the count must match who "
    "arrives, not the shape of the block",
    wrong=(2, 257, 128, 384),
)

_FULL_ARRIVAL = [
    "the producer's arrive.expect_tx",
    "the TMA engine, when the copy completes",
    "the last consumer to wait on it",
]

#: who makes FULL's one arrival
full_arrival = Quiz(
    "FULL[s] is initialised with an arrival count of 1. Who makes that arrival?",
    judge=_choice(_FULL_ARRIVAL[0], {
        _FULL_ARRIVAL[1]: "a TMA copy only completes bytes (complete_tx); it never arrives. That is the phase's "
                          "other condition, the transaction count reaching 0",
        _FULL_ARRIVAL[2]: "the consumers only wait on FULL here; they do not arrive on it",
    }),
    right=_FULL_ARRIVAL[0],
    choices=_FULL_ARRIVAL,
    hint="which instruction counts an arrival and announces bytes at the same time?",
    explanation="arrive.expect_tx raises the transaction count and arrives in one step; the phase then completes "
    "when the copies' bytes have all landed",
    wrong=(_FULL_ARRIVAL[1], _FULL_ARRIVAL[2]),
)

_RELEASE = ["stage of step k", "stage of step k - 1", "stage of step k - 2", "none yet"]

#: which stage may be released after wait_group(1)
release_after_wait1 = Quiz(
    "A consumer issued step k's wgmmas, committed them, and `wgmma.wait_group 1` just returned. Which stage may it "
    "release now?",
    judge=_choice(_RELEASE[1], {
        _RELEASE[0]: "wait_group 1 lets one group keep running: step k's own group may still be reading its stage",
        _RELEASE[2]: "that one was released after the previous step's wait_group 1; keeping it longer costs a stage",
        _RELEASE[3]: "at most one group is still running, and it is step k's: every older group has retired",
    }),
    right=_RELEASE[1],
    choices=_RELEASE,
    hint="after wait_group 1, how many groups may still run, and which one is it?",
    explanation="at most one group is in flight, the newest (step k's); step k − 1's group has retired, so its "
    "stage is no longer read",
    wrong=(_RELEASE[0], _RELEASE[2], _RELEASE[3]),
)

#: the largest consumer count that adds up at 512 threads
consumer_count = Quiz(
    "A block of 512 threads (`__launch_bounds__(512, 1)`, 128 registers per thread at entry) has one producer and "
    "three consumer warpgroups. The producer goes down to 24. What is the largest count the consumers can ask for "
    "with `setmaxnreg.inc`?",
    answer=160,
    hint="24 + 3 × c ≤ 4 × 128, and c must be a multiple of 8",
    explanation="24 + 3c ≤ 512 gives c ≤ 162.7; the largest multiple of 8 is 160 (24 + 480 = 504 ≤ 512)",
    wrong=(162, 168, 128, 240),
)

_PINGPONG = ["cooperative", "ping-pong", "both", "neither"]

#: which schedule overlaps the epilogue
overlap_epilogue = Quiz(
    "Two consumer warpgroups per block. In which schedule do the tensor cores keep working while a tile's "
    "accumulators are being stored?",
    judge=_choice(_PINGPONG[1], {
        _PINGPONG[0]: "cooperative consumers share every tile and finish it together, so both store at once and "
                      "the tensor cores wait",
        _PINGPONG[2]: "only one of them staggers the consumers",
        _PINGPONG[3]: "one of them does: look at the tensor-core lane of both timelines",
    }),
    right=_PINGPONG[1],
    choices=_PINGPONG,
    hint="which schedule gives each consumer its own tiles, one after the other?",
    explanation="ping-pong consumers take turns on whole tiles: while one stores its tile, the other runs the next "
    "tile's mainloop",
    wrong=(_PINGPONG[0], _PINGPONG[2], _PINGPONG[3]),
)

#: how far the producer can run ahead with one wgmma group in flight
prefetch_ahead = Quiz(
    "The Lab 4 ring has S = 4 stages and each consumer keeps one wgmma group in flight (`wait_group 1`, then it "
    "releases the previous step's stage). While the consumers issue step k, how many later steps can the producer "
    "have loaded or in flight?",
    answer=2,
    hint="count the stages the consumers still hold while step k's group is issued",
    explanation="the consumers hold step k's stage and step k − 1's (its group has not retired yet): 4 − 2 = 2 "
    "stages are free for steps k + 1 and k + 2. Releasing at once (wait_group 0) would hold one, leaving 3",
    wrong=(3, 4, 1, 0),
)
