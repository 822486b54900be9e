"""Quick checks for lesson 02 (mbarriers): arrival counts, transaction bytes, phase parity, the expect-tx race."""

from __future__ import annotations

from helpers.grading import Quiz


def _yes_no(expected: bool, why_wrong: str):
    """A judge for a yes/no (true/false, 1/0) answer."""
    yes = {"1", "true", "yes", "y", "t"}
    no = {"0", "false", "no", "n", "f"}

    def judge(response) -> tuple[bool, str]:
        text = str(response).strip().lower()
        if text not in yes | no:
            return False, f"{response!r}: answer yes/true/1 or no/false/0"
        ok = (text in yes) == expected
        return ok, "" if ok else why_wrong

    return judge


def _choice(right: str, why: dict[str, str]):
    """A judge for a multiple-choice quiz: the right option, and a reason for each wrong one."""

    def judge(response) -> tuple[bool, str]:
        text = "" if response is None else str(response).strip()
        if text == right:
            return True, ""
        return False, why.get(text, f"{response!r} is not one of the options")

    return judge


#: bytes announced for one K step of the first tensor-core GEMM
tx_bytes = Quiz(
    "One K step loads a 64×64 bf16 tile of A and a 64×64 bf16 tile of B through the TMA, both completing on "
    "the same barrier. How many transaction bytes must the producer announce with `arrive.expect_tx`?",
    answer=16384,
    hint="2 tiles × 64 × 64 elements × 2 bytes per bf16",
    explanation="2 × 64 × 64 × 2 = 16384 bytes; announce fewer and the phase completes before B has landed, "
    "announce more and it never completes",
    wrong=(8192, 4096, 32768),
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
    judge=_yes_no(True, "the wait asks 'has the phase of parity 1 before the current one completed?'; the "
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
    judge=_choice(_RACE_OPTIONS[1], {
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
    judge=_choice(_WAIT_OPTIONS[1], {
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
