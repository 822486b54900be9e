"""Quick checks for lesson 02 (mbarriers): arrival counts, transaction bytes, phase parity, the expect-tx race."""

from __future__ import annotations

from helpers.course.grading import Quiz
from helpers.course.quizzes._judges import choice, pair, yes_no

#: test_wait after arrive, then expect_tx (the expect-tx race), predicted before the stepper shows it
race_bits = Quiz(
    "A barrier is initialised with arrival count 1. Thread 0 does a plain `mbarrier.arrive`, then "
    "`mbarrier.expect_tx(8192)`; no byte has landed yet. Predict what `test_wait.parity` answers now for parity 0 "
    "and for parity 1 (1 = complete). Answer as 'p0, p1'.",
    judge=pair((1, 0), {
        (0, 1): "that is a fresh barrier's answer, as if the bytes held phase 0 open: but the arrive came first, "
                "and it was the only arrival phase 0 needed",
        (0, 0): "one of the two parities always reads as complete: the phase before the one in progress",
        (1, 1): "only the most recent phase of each parity counts; phase 1 is in progress, so parity 1 is not "
                "complete",
    }, "test_wait(0), test_wait(1)"),
    right="1, 0",
    hint="when did phase 0 have all it needed (arrivals and bytes)? which phase does expect_tx then add to?",
    explanation="the arrive completed phase 0 at once (1 of 1 arrivals, tx-count 0), so test_wait(0) is already "
    "true although nothing landed; the 8192 bytes went to phase 1, which is in progress, so test_wait(1) is false. "
    "The H100 gives exactly these bits (tests/data/mbarrier_h100.json, script 'race')",
    wrong=("0, 1", "0, 0", "1, 1"),
)

#: the parity to wait on after some completed phases
parity_after = Quiz(
    "A barrier has completed 5 phases since `mbarrier.init`. A thread now wants to wait for the *next* "
    "completion. Which parity must it pass to `try_wait.parity` (0 or 1)?",
    answer=1,
    hint="phases are numbered 0, 1, 2, … from init; the one in progress now is phase 5; the parity is its "
    "number mod 2",
    explanation="phases 0–4 are done, phase 5 is in progress and 5 mod 2 = 1. Passing 0 would return at once "
    "(phase 4, of parity 0, has completed) and the thread would read data that is not there yet",
    wrong=(0, 5, 6),
)

#: what a fresh barrier says to a wait on parity 1
fresh_parity_one = Quiz(
    "Right after `mbarrier.init` (no arrivals yet), a thread calls `mbarrier.test_wait.parity` with parity 1. "
    "Does it report the phase as complete? (yes/no)",
    judge=yes_no(True, "the wait asks 'has the phase of parity 1 before the current one completed?'; the "
                        "hardware treats it as done, so it answers yes — try it on the emulator"),
    right="yes",
    hint="the wait succeeds whenever the parity you pass differs from the parity of the phase in progress",
    explanation="yes: a fresh barrier is in phase 0, and a wait on parity 1 is a wait for the phase *before* "
    "it, which counts as complete. Producers use this to pass their first wait on an 'empty' barrier",
    wrong=("no", "0", "false"),
)

_RACE_OPTIONS = [
    "the phase in progress (phase 0)",
    "the next phase (phase 1)",
    "neither: expect_tx raises an error",
]

#: the expect-tx race, spelt out
race = Quiz(
    "A barrier was initialised with arrival count 1. Thread 0 does a plain `mbarrier.arrive` *first* and only "
    "then `mbarrier.expect_tx(8192)`, then issues the TMA load. Which phase do the 8192 bytes count against?",
    judge=choice(_RACE_OPTIONS[1], {
        _RACE_OPTIONS[0]: "the arrive was the only arrival phase 0 needed and no bytes were pending yet, so "
                          "phase 0 completed on the spot; the expect_tx comes too late for it",
        _RACE_OPTIONS[2]: "no error: the hardware quietly adds the bytes to whatever phase is in progress now",
    }),
    right=_RACE_OPTIONS[1],
    choices=_RACE_OPTIONS,
    hint="what did phase 0 still wait for when its only expected arrival came in?",
    explanation="the arrive completed phase 0 at once (tx-count 0, no arrivals pending), so waiters were "
    "released before a single byte landed, and the bytes went to phase 1. `mbarrier.arrive.expect_tx` does "
    "both in one step, so the bytes are always counted first",
    wrong=(_RACE_OPTIONS[0], _RACE_OPTIONS[2]),
)

_WAIT_OPTIONS = ["mbarrier.test_wait", "mbarrier.try_wait", "both", "neither"]

#: which wait may suspend the thread
suspends = Quiz(
    "Which instruction may suspend the calling thread for a while (up to a time limit) when the phase is not "
    "complete yet, instead of answering at once?",
    judge=choice(_WAIT_OPTIONS[1], {
        _WAIT_OPTIONS[0]: "test_wait never blocks: it looks at the barrier once and answers",
        _WAIT_OPTIONS[2]: "only one of them is allowed to block",
        _WAIT_OPTIONS[3]: "one of them is a potentially blocking test",
    }),
    right=_WAIT_OPTIONS[1],
    choices=_WAIT_OPTIONS,
    hint="one is a pure test, the other a 'potentially blocking' test that can time out",
    explanation="try_wait may park the thread until the phase completes or a system-dependent time limit "
    "passes; either way it can return false, so it always sits in a loop",
    wrong=(_WAIT_OPTIONS[0], _WAIT_OPTIONS[2], _WAIT_OPTIONS[3]),
)

#: how many arrivals a full[] barrier expects
arrivals = Quiz(
    "A barrier is initialised with arrival count 4. Thread 0 calls `mbarrier.arrive` with count 3, then thread "
    "1 calls it with count 1, then thread 2 with count 1. How many phases have completed?",
    answer=1,
    hint="an arrive with count n counts as n arrivals; a phase completes when its pending count reaches 0, and "
    "then the count is reloaded for the next phase",
    explanation="3 + 1 completes phase 0; thread 2's arrival is the first of phase 1, which still waits for 3",
    wrong=(0, 2, 3),
)

_FULL_OPTIONS = [
    "256 consumer-thread arrivals + the producer's arrive.expect_tx",
    "256 consumer-thread arrivals + the TMA copy's completion",
    "257 consumer-thread arrivals",
    "the 256 consumer threads + the bytes: the tx-count counts as one arrival",
]

#: what makes up num_consumers*128 + 1 on a full[] barrier built from cuda::barrier
full_count = Quiz(
    "A ring built from `cuda::barrier`s with 2 consumer warpgroups initialises each `full[q]` with `2*128 + 1` "
    "arrivals. Consumers do `full[q].wait(full[q].arrive())`; the producer issues two TMA loads and "
    "`barrier_arrive_tx(full[q], 1, bytes)`. Which arrivals make up the 257?",
    judge=choice(_FULL_OPTIONS[0], {
        _FULL_OPTIONS[1]: "a TMA copy never arrives: it only counts its bytes down the tx-count (complete_tx). The "
                          "+1 is barrier_arrive_tx, which the producer executes when it issues the copies",
        _FULL_OPTIONS[2]: "the producer is not a consumer thread; count who calls arrive",
        _FULL_OPTIONS[3]: "bytes and arrivals are separate counts; a phase needs both to reach zero",
    }),
    right=_FULL_OPTIONS[0],
    choices=_FULL_OPTIONS,
    hint="which instructions count arrivals, and which only count bytes?",
    explanation="every consumer thread arrives (cuda::barrier's wait needs the token its own arrive returns), and "
    "the producer's barrier_arrive_tx is the +1 — one arrival plus the announced bytes. The TMA only brings the "
    "tx-count back to zero. With parity waits (our kernels) consumers need not arrive on full[], so its count is 1",
    wrong=tuple(_FULL_OPTIONS[1:]),
)

_OVER_OPTIONS = [
    "it never completes: the tx-count ends at −8192",
    "it completes as soon as the first 8192 bytes have landed",
    "it completes when all 16384 bytes have landed",
    "the TMA refuses the copy at once",
]

#: over-delivery, as replayed on the H100
overdelivery = Quiz(
    "A phase is armed with `arrive.expect_tx(8192)` (arrival count 1) and then receives 16384 bytes in one "
    "`complete_tx`. What happens to the phase?",
    judge=choice(_OVER_OPTIONS[0], {
        _OVER_OPTIONS[1]: "that is a claim that circulates; the H100 replay says otherwise: look at the "
                          "tx-count after the bytes",
        _OVER_OPTIONS[2]: "the phase needs the tx-count at exactly zero, and 8192 − 16384 is not zero",
        _OVER_OPTIONS[3]: "nothing checks the count when bytes land; the count simply goes negative",
    }),
    right=_OVER_OPTIONS[0],
    choices=_OVER_OPTIONS,
    hint="a phase completes when pending arrivals and the tx-count are both exactly zero",
    explanation="8192 − 16384 = −8192: the phase stays open, and test_wait(0) stays false (measured on the H100). "
    "Announce exactly the bytes the copies bring",
    wrong=tuple(_OVER_OPTIONS[1:]),
)

_NAMED_OPTIONS = [
    "only warpgroup 1 waits, until warpgroup 0 has arrived",
    "both warpgroups wait for each other",
    "nobody waits: 128 threads are not 256",
    "warpgroup 0 waits until warpgroup 1 reaches bar.sync",
]

#: a producer/consumer handshake with named barriers
named_barrier = Quiz(
    "In a 256-thread block, warpgroup 0 executes `bar.arrive 1, 256;` and warpgroup 1 executes `bar.sync 1, 256;`. "
    "Who waits?",
    judge=choice(_NAMED_OPTIONS[0], {
        _NAMED_OPTIONS[1]: "bar.arrive never waits: it adds this warp's arrival and goes on",
        _NAMED_OPTIONS[2]: "the count 256 is the threads of both groups together: 128 arrive, 128 sync",
        _NAMED_OPTIONS[3]: "bar.arrive returns at once, whatever the others do",
    }),
    right=_NAMED_OPTIONS[0],
    choices=_NAMED_OPTIONS,
    hint="which of the two instructions can block?",
    explanation="barrier 1 completes when 256 threads have arrived; bar.sync arrives and waits, bar.arrive only "
    "arrives. Named barriers (ids 0–15; id 0 is __syncthreads) are how warpgroups hand work to each other "
    "without an mbarrier",
    wrong=tuple(_NAMED_OPTIONS[1:]),
)
