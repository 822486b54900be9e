"""Graders of Lab 2 (mbarrier): the wrappers in inline PTX, phases and parities, the GEMM's two-stage A+B load
loop (the lab's kernel, the product still on CUDA cores), and the bug hunt: a silent race.

CUDA exercises: the source must compile (a stub's ``#error`` fails with its hint). Wherever a kernel can run (the
H100, or the course's PTX executor without one) the run is the grade: a self-test kernel or the lab's GEMM runs into
outputs poisoned first. The PTX explains it: each instruction in its full form (qualifiers, state space, operands
traced to what a probe passed) and the barrier protocol on every control-flow path (see ``_protocol``), which is
named as the likely cause of a failed run, fails a run that passed by luck, and is the grade where nothing can run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from helpers.course import grading
from helpers.course.checks import _common as C
from helpers.course.checks._protocol import read as read_protocol
from helpers.course.checks._ptxflow import Flow, Slot, form_problem
from helpers.course.hints import answer, hint

__all__ = [
    "check_init_arrive",
    "check_tx_wait",
    "check_barrier_model",
    "check_ring_parity",
    "check_gemm",
    "check_bug_diagnosis",
    "check_bug_fix",
    "carry_tma_load",
    "kernel_changes",
    "replay",
    "run_many",
    "simulate",
    "BUGGY_KERNEL",
    "EVENT_KINDS",
    "hint",
    "answer",
]

HEADER = "#include <hopper.cuh>\n"
KERNEL_NAME = "lab2_gemm"


def carry_tma_load() -> str:
    """Your ``my_tma_load_2d`` from Lab 1 (the TMA_LOAD cell of lab1_tma.ipynb beside this notebook)."""
    from helpers.course.checks import lab1

    return C.carry("lab1_tma.ipynb", "TMA_LOAD", "Lab 1", check=lambda s: lab1.check_tma_load(s, rank=2))


def kernel_changes() -> Any:
    """The diff this lab makes to Lab 1's kernel."""
    return C.lab_diff("lab1", "lab2", note="Lab 1's kernel copies a tile; this lab's kernel streams the K steps "
                                           "of a GEMM through two stages (Lab 1's copy kernel: no TFLOP/s)")


# ---------------------------------------------------------------------------------------------------------
# the wrappers, read in the PTX
# ---------------------------------------------------------------------------------------------------------
SPACE = Slot("state space", ("shared::cta", "shared"),
             "the barrier lives in this block's shared memory: .shared::cta (.shared::cluster is for another block's)")
B64 = Slot("size", ("b64",), "an mbarrier is a 64-bit object")
INIT_SLOTS = [SPACE, B64]
ARRIVE_SLOTS = [Slot("semantics", ("release", None)), Slot("scope", ("cta", None)), SPACE, B64]
EXPECT_SLOTS = [Slot("semantics", ("relaxed",)), Slot("scope", ("cta", "cluster")), SPACE, B64]
WAIT_SLOTS = [Slot("parity form", ("parity",), "without .parity the last operand is a state token, not a parity"),
              Slot("semantics", ("acquire", "relaxed", None)), Slot("scope", ("cta", "cluster", None)), SPACE, B64]
BAR_COUNT, ARRIVE_COUNT, TX_BYTES, PARITY = 37, 5, 768, 1


def _instrs(c: grading.Check, ptx: str, entry: str, prefix: str, what: str, hint_text: str,
            exclude: tuple[str, ...] = ()) -> list[C.Instr]:
    found = [i for i in C.find_instrs(ptx, prefix, entry) if not any(x in i.parts for x in exclude)]
    held = "; ".join(i.opcode for i in C.inline_asm(ptx, entry)) or "nothing"
    c.true(f"{what}: an inline-asm {prefix} instruction", bool(found), hint=hint_text,
           detail=f"    the inline asm held: {held}")
    return found


def _form(c: grading.Check, ins: C.Instr, family: str, slots: list[Slot], what: str) -> None:
    problem = form_problem(ins.opcode, family, slots)
    c.true(f"{what}: the full form {ins.opcode}", problem is None, hint=problem or "", detail=f"    got: {ins.line}")


def _address(c: grading.Check, ptx: str, operand: str, symbol: str, what: str, ins: C.Instr) -> None:
    origin = C.shared_address_of(ptx, operand)
    if origin is None:
        c.fail(f"{what}: the barrier operand is a generic pointer", detail=f"    got: {ins.line}",
               hint="pass the shared-memory address: static_cast<unsigned>(__cvta_generic_to_shared(bar)) with an "
                    "\"r\" constraint")
    c.true(f"{what}: [addr] is the barrier's shared-memory address", origin.endswith(symbol),
           hint="the operand in brackets must be the barrier's address; check the order of your %0, %1 … operands",
           detail=f"    got: {ins.line}  (the bracketed operand came from {origin})")


def _value(c: grading.Check, ptx: str, operand: str, expected: int, what: str, ins: C.Instr, hint_text: str) -> None:
    got = C.resolve(ptx, operand)
    c.true(what, got == str(expected), hint=hint_text,
           detail=f"    got: {ins.line}  (that operand came from {got}; the probe passed {expected})")


PROBE_INIT_ARRIVE = r"""
extern "C" __global__ void probe_init_arrive(unsigned long long* out) {
  __shared__ alignas(8) unsigned long long probe_bar;
  my_mbar_init(&probe_bar, 37u);
  out[0] = my_mbar_arrive(&probe_bar);
  out[1] = my_mbar_arrive(&probe_bar, 5u);
}
"""

SELFTEST_INIT_ARRIVE = r"""
// 128 threads, one barrier expecting 128 arrivals, 4 phases (rounds 0-1: every thread arrives once; rounds 2-3:
// lane 0 of each warp arrives for its 32 threads). Thread 0 is slow to write its slot; a barrier that completes
// early lets the others read its old value.
extern "C" __global__ void __launch_bounds__(128) selftest_init_arrive(int* out) {
  __shared__ alignas(8) unsigned long long bar;
  __shared__ int slot[2][128];
  const int t = threadIdx.x;
  if (t == 0) my_mbar_init(&bar, 128u);
  hopper::mbar_fence_init();
  __syncthreads();
  for (int round = 0; round < 4; ++round) {
    if (t == 0) {
      const long long start = clock64();
      while (clock64() - start < 20000) { }
    }
    slot[round & 1][t] = 1000 * round + t;
    if (round < 2) {
      my_mbar_arrive(&bar);
    } else {
      __syncwarp();
      if (t % 32 == 0) my_mbar_arrive(&bar, 32u);
    }
    HOPPER_WAIT1(bar, round & 1);
    out[round * 128 + t] = slot[round & 1][(t * 37 + 5) % 128];
  }
}
"""


def _init_arrive_expected() -> np.ndarray:
    t = np.arange(128)
    return np.concatenate([1000 * r + (t * 37 + 5) % 128 for r in range(4)]).astype(np.int32)


def check_init_arrive(source: str) -> None:
    """Exercise 1: ``my_mbar_init``, ``my_mbar_arrive(bar)`` and ``my_mbar_arrive(bar, count)`` in inline PTX: a
    self-test kernel runs a 128-arrival barrier through 4 phases with them; their form in the PTX explains it."""
    with grading.check("Lab 2 · mbarrier init and arrive") as c:
        k = C.compile_student(HEADER + source + PROBE_INIT_ARRIVE, "probe_init_arrive",
                              what="my_mbar_init / my_mbar_arrive")
        c.ok("compiles for sm_90a")
        ex = C.Explanation(c)
        with ex:
            _init_arrive_form(c, k.ptx, "probe_init_arrive")
        if not ex.runnable(k, checked="the form and operands of my_mbar_init and both my_mbar_arrive in the PTX"):
            return
        with ex.run():
            kk = C.compile_student(HEADER + source + SELFTEST_INIT_ARRIVE, "selftest_init_arrive",
                                   what="the self-test kernel")
            out = np.full(4 * 128, -1, dtype=np.int32)
            (got,) = C.run(kk, 1, 128, 0, out, what="the init/arrive self-test")
            c.array(f"{C.where()}: a 128-arrival barrier through 4 phases (2 with one arrival per thread, 2 with 32 "
                    "per warp), each thread reading a slot another wrote before the phase completed", got,
                    _init_arrive_expected(),
                    hint="a barrier that completes too early lets threads read a slot before it was written (-1 is a "
                         "slot never read: a wait that never returned): is the count passed to mbarrier.init, and "
                         "does each arrive count what it should?")
        ex.settle()


def _barrier_and_value(c: grading.Check, ptx: str, entry: str, opcode: str, wrapper: str, missing_hint: str,
                       slots: list[Slot], form_what: str, value_name: str, expected: int, value_what: str,
                       value_hint: str) -> C.Instr:
    """One ``opcode [addr], value`` instruction from ``wrapper`` in the probe's PTX: its full form, two operands, the
    address the probe's barrier, the value the one the probe passed."""
    ins = _instrs(c, ptx, entry, opcode, wrapper, missing_hint)[0]
    _form(c, ins, opcode, slots, form_what)
    ops = C.split_operands(ins.operands)
    c.true(f"{opcode}: two operands, [addr] and {value_name}", len(ops) == 2, detail=f"    got: {ins.line}")
    _address(c, ptx, ops[0], "probe_bar", opcode, ins)
    _value(c, ptx, ops[1], expected, value_what, ins, value_hint)
    return ins


def _init_arrive_form(c: grading.Check, ptx: str, entry: str) -> None:
    """my_mbar_init and both my_mbar_arrive in the probe's PTX: the full form, the operands traced to the probe's."""
    _barrier_and_value(c, ptx, entry, "mbarrier.init", "my_mbar_init",
                       "my_mbar_init holds one asm volatile with the mbarrier.init instruction (Lesson 02)",
                       INIT_SLOTS, "mbarrier.init", "count", BAR_COUNT,
                       "mbarrier.init: the count operand is the arrival count",
                       "the second operand is the number of arrivals per phase (the probe called "
                       "my_mbar_init(bar, 37))")
    arrives = _instrs(c, ptx, entry, "mbarrier.arrive", "my_mbar_arrive",
                      "my_mbar_arrive holds one asm volatile with mbarrier.arrive (Lesson 02)", exclude=("expect_tx",))
    c.true("two arrive instructions: my_mbar_arrive(bar) and my_mbar_arrive(bar, count)", len(arrives) == 2,
           detail="    found: " + "; ".join(i.line for i in arrives),
           hint="the probe calls my_mbar_arrive(&bar) then my_mbar_arrive(&bar, 5): each is one instruction")
    for ins, count, what in ((arrives[0], 1, "my_mbar_arrive(bar)"), (arrives[1], ARRIVE_COUNT,
                                                                      "my_mbar_arrive(bar, count)")):
        _form(c, ins, "mbarrier.arrive", ARRIVE_SLOTS, what)
        aops = C.split_operands(ins.operands)
        c.true(f"{what}: the state token, [addr]" + (", count" if count > 1 else ""),
               len(aops) == (3 if count > 1 else 2) or (count == 1 and len(aops) == 3),
               detail=f"    got: {ins.line}",
               hint="the destination (the 64-bit state token) comes first, then [addr], then the count")
        c.true(f"{what}: returns the state token (a 64-bit register)", bool(re.fullmatch(r"%rd\d+", aops[0])),
               detail=f"    got: {ins.line}", hint="the state is a 64-bit output: \"=l\"(state)")
        _address(c, ptx, aops[1], "probe_bar", what, ins)
        if len(aops) == 3:
            _value(c, ptx, aops[2], count, f"{what}: counts {count} arrival{'s' if count > 1 else ''}", ins,
                   "my_mbar_arrive(bar) arrives once: leave out the count operand" if count == 1 else
                   "the third operand is the count the probe passed (5)")


PROBE_TX_WAIT = r"""
extern "C" __global__ void probe_tx_wait(int* out) {
  __shared__ alignas(8) unsigned long long probe_bar;
  my_mbar_expect_tx(&probe_bar, 768u);
  out[0] = my_mbar_try_wait(&probe_bar, 1u) ? 1 : 0;
}
extern "C" __global__ void probe_wait(int* out) {
  __shared__ alignas(8) unsigned long long probe_bar2;
  my_mbar_wait(&probe_bar2, 1u, "probe", 3);
  out[0] = 1;
}
"""

SELFTEST_TX_WAIT = r"""
// Thread 0 announces the bytes with my_mbar_expect_tx, arrives, and loads a 64x64 bf16 tile with TMA; everyone
// waits with my_mbar_wait, then copies the tile out. Two phases: parity 0, then 1.
extern "C" __global__ void __launch_bounds__(128) selftest_tx_wait(const __grid_constant__ CUtensorMap map,
                                                                  const unsigned short* src, unsigned short* out) {
  __shared__ alignas(1024) unsigned short tile[2][64 * 64];
  __shared__ alignas(8) unsigned long long bar;
  const int t = threadIdx.x;
  if (t == 0) hopper::mbar_init(&bar, 1);
  hopper::mbar_fence_init();
  __syncthreads();
  for (int phase = 0; phase < 2; ++phase) {
    if (t == 0) {
      my_mbar_expect_tx(&bar, 64 * 64 * 2);
      hopper::mbar_arrive(&bar);
      hopper::tma_load_2d(tile[phase], &map, &bar, 64 * phase, 64 * phase);
    }
    my_mbar_wait(&bar, phase, "bar", -1);
    for (int i = t; i < 64 * 64; i += 128) out[phase * 64 * 64 + i] = tile[phase][i];
    __syncthreads();  // nobody starts phase 1 before every thread saw phase 0 (a slow warp would miss it)
  }
}
"""


def check_tx_wait(source: str) -> None:
    """Exercise 2: ``my_mbar_expect_tx``, ``my_mbar_try_wait`` and the bounded wait loop ``my_mbar_wait``: a self-test
    kernel waits for two TMA tiles with them; their form and the loop in the PTX explain it."""
    with grading.check("Lab 2 · expect_tx, try_wait.parity and the wait loop") as c:
        k = C.compile_student(HEADER + source + PROBE_TX_WAIT, "probe_tx_wait",
                              what="my_mbar_expect_tx / my_mbar_try_wait / my_mbar_wait")
        c.ok("compiles for sm_90a")
        ex = C.Explanation(c)
        with ex:
            _tx_wait_form(c, k.ptx, "probe_tx_wait")
            _check_wait_loop(c, k.ptx)
        if not ex.runnable(k, checked="the form and operands of expect_tx and try_wait, and the wait loop, in the "
                                     "PTX"):
            return
        with ex.run():
            from helpers import gpu

            kk = C.compile_student(HEADER + source + SELFTEST_TX_WAIT, "selftest_tx_wait", what="the self-test kernel")
            rng = grading.fresh_rng()
            a = rng.integers(0, 1 << 16, size=(128, 128), dtype=np.uint16)
            out = np.full(2 * 64 * 64, 0xFFFF, dtype=np.uint16)
            (_, got) = C.run(kk, 1, 128, 0, gpu.TensorMapArg(a, (64, 64), swizzle=0), a, out,
                             what="the expect_tx/wait self-test")
            c.array(f"{C.where()}: two TMA tiles waited for with your expect_tx and my_mbar_wait (phase 0, then "
                    "phase 1), copied out into a buffer filled with 0xFFFF first", got,
                    np.concatenate([a[:64, :64].ravel(), a[64:, 64:].ravel()]),
                    hint="elements still 0xFFFF were read before the TMA wrote them: does expect_tx add the bytes, "
                         "and does the wait loop stop only once try_wait says the phase is complete?")
        ex.settle()


def _tx_wait_form(c: grading.Check, ptx: str, entry: str) -> None:
    """my_mbar_expect_tx and my_mbar_try_wait in the probe's PTX: the full form, the operands traced."""
    if not C.find_instrs(ptx, "mbarrier.expect_tx", entry) and C.find_instrs(ptx, "mbarrier.arrive", entry):
        c.fail("my_mbar_expect_tx arrives",
               hint="arrive.expect_tx also counts an arrival, so a barrier initialised for one arrival could "
                    "complete before the data lands: mbarrier.expect_tx only adds bytes")
    _barrier_and_value(c, ptx, entry, "mbarrier.expect_tx", "my_mbar_expect_tx",
                       "my_mbar_expect_tx holds one asm volatile with mbarrier.expect_tx (Lesson 02, transaction "
                       "bytes)",
                       EXPECT_SLOTS, "my_mbar_expect_tx", "bytes", TX_BYTES, "mbarrier.expect_tx: the byte count",
                       "the second operand is the number of bytes (the probe called my_mbar_expect_tx(bar, 768))")
    if not C.find_instrs(ptx, "mbarrier.try_wait", entry) and C.find_instrs(ptx, "mbarrier.test_wait", entry):
        c.fail("my_mbar_try_wait uses mbarrier.test_wait",
               hint="test_wait answers at once; try_wait lets the hardware park the thread until the phase "
                    "completes or a time limit passes, which is what a wait loop wants")
    w = _instrs(c, ptx, entry, "mbarrier.try_wait", "my_mbar_try_wait",
                "my_mbar_try_wait holds mbarrier.try_wait.parity and turns its predicate into a bool")[0]
    _form(c, w, "mbarrier.try_wait", WAIT_SLOTS, "my_mbar_try_wait")
    wops = C.split_operands(w.operands)
    c.true("mbarrier.try_wait: a predicate, [addr], parity", len(wops) in (3, 4) and "[" not in wops[0],
           detail=f"    got: {w.line}",
           hint="the first operand is a predicate register (.reg .pred p), then [addr], then the parity")
    _address(c, ptx, wops[1], "probe_bar", "mbarrier.try_wait", w)
    _value(c, ptx, wops[2], PARITY, "mbarrier.try_wait: the parity operand", w,
           "the third operand is the parity of the phase waited for (the probe called my_mbar_try_wait(bar, 1))")


def _check_wait_loop(c: grading.Check, ptx: str) -> None:
    """my_mbar_wait(bar, 1, "probe", 3): a loop around try_wait on that parity, giving up via report_stuck."""
    flow = Flow(ptx, "probe_wait")
    waits = flow.find(lambda i: i.opcode.startswith("mbarrier.try_wait"))
    c.true("my_mbar_wait: calls your try_wait", bool(waits),
           hint="my_mbar_wait loops on my_mbar_try_wait(bar, parity) until it returns true")
    loops = any(flow.reach([w.index], lambda i, w=w: i.index == w.index) is not None for w in waits)
    c.true("my_mbar_wait: tries again until the phase completes (a loop around try_wait)", loops,
           hint="one try_wait may return false (the hardware's time limit passed): loop until it returns true")
    parities = {flow.value(w.ops()[2]) for w in waits if len(w.ops()) >= 3}
    c.true("my_mbar_wait: waits for the parity it is given", parities == {PARITY},
           detail=f"    parities in the PTX: {sorted(str(p) for p in parities)}; the probe passed {PARITY}",
           hint="pass my_mbar_wait's parity argument on to my_mbar_try_wait")
    # report_stuck is inlined (hopper.cuh: a call in a K loop costs the consumers' accumulators): its body reads
    # hopper_diag_addr; a header built without the inlining shows a call instead
    gives_up = any((i.opcode.startswith("call") and "report_stuck" in i.operands) or "hopper_diag_addr" in i.operands
                   for i in flow.ins) or (any(i.opcode == "trap" for i in flow.ins)
                                          and any("%clock64" in i.operands for i in flow.ins))
    c.true("my_mbar_wait: gives up through hopper::report_stuck after HOPPER_WAIT_BUDGET cycles", gives_up,
           hint="inside the loop, once clock64() - start passes HOPPER_WAIT_BUDGET, call hopper::report_stuck(bar, "
                "parity, label, index, waited): a deadlock then becomes a sentence instead of a hang")


# ---------------------------------------------------------------------------------------------------------
# Exercise 3: the barrier's state after a sequence of events
# ---------------------------------------------------------------------------------------------------------
EVENT_KINDS = ("arrive", "expect_tx", "complete_tx", "arrive_expect_tx")


def simulate(count: int, events: list[tuple[str, int]]) -> list[tuple[int, int, int]]:
    """The reference model: (phase parity, pending arrivals, pending tx bytes) after each event.

    A phase completes when its pending arrivals and its pending transaction bytes are both zero; then the phase
    advances (the parity flips), the pending arrivals reset to ``count`` and the tx count to zero. Bytes may land
    before they are announced (the count goes negative for a while, as on the H100). ``arrive_expect_tx`` adds
    the bytes first, then arrives. (tests/labs checks this against helpers.hopper.mbarrier.)
    """
    phase, pending, tx = 0, count, 0
    out = []
    for kind, value in events:
        if kind in ("expect_tx", "arrive_expect_tx"):
            tx += value
        if kind == "complete_tx":
            tx -= value
        if kind == "arrive":
            pending -= value
        if kind == "arrive_expect_tx":
            pending -= 1
        if pending == 0 and tx == 0:
            phase, pending, tx = phase + 1, count, 0
        out.append((phase % 2, pending, tx))
    return out


#: (count, events): each completes or holds a phase for a different reason, so that every plausible wrong model
#: (tx ignored, arrive before the bytes, no reset, a phase number for the parity …) differs somewhere.
MODEL_CASES: list[tuple[int, list[tuple[str, int]]]] = [
    (1, [("arrive_expect_tx", 8192), ("complete_tx", 4096), ("complete_tx", 4096)]),       # a TMA stage
    (2, [("arrive", 1), ("expect_tx", 96), ("arrive", 1), ("complete_tx", 96)]),            # bytes complete it
    (2, [("expect_tx", 64), ("complete_tx", 64), ("arrive", 1), ("arrive", 1)]),            # arrivals complete it
    (3, [("arrive", 3), ("arrive", 2), ("arrive", 1)]),                                     # the count form
    (1, [("complete_tx", 512), ("arrive_expect_tx", 512)]),                                 # bytes landing early
    (1, [("arrive", 1), ("arrive", 1), ("arrive", 1)]),                                     # three phases in a row
    (2, [("arrive_expect_tx", 32), ("arrive", 1), ("complete_tx", 16), ("complete_tx", 16), ("arrive", 1)]),
    (128, [("arrive", 32), ("arrive", 32), ("arrive", 32), ("arrive", 32), ("arrive", 1)]),
]


def random_events(rng: np.random.Generator, count: int, n: int) -> list[tuple[str, int]]:
    """A legal event sequence: arrivals never exceed what the phase still expects, tx never goes negative."""
    events: list[tuple[str, int]] = []
    pending, tx = count, 0
    for _ in range(n):
        kinds = ["expect_tx"] + (["arrive_expect_tx", "arrive", "arrive"] if pending else []) \
            + (["complete_tx"] * 3 if tx else [])
        kind = str(rng.choice(kinds))
        if kind == "arrive":
            value = int(rng.integers(1, pending + 1)) if rng.random() < 0.3 else 1
        elif kind == "complete_tx":
            value = int(rng.choice([tx, tx, int(rng.integers(1, tx // 16 + 1)) * 16 if tx >= 16 else tx]))
        else:
            value = int(rng.choice([16, 128, 4096, 8192]))
        events.append((kind, value))
        tx += value if kind in ("expect_tx", "arrive_expect_tx") else -value if kind == "complete_tx" else 0
        pending -= value if kind == "arrive" else 1 if kind == "arrive_expect_tx" else 0
        if pending == 0 and tx == 0:
            pending, tx = count, 0
    return events


def check_barrier_model(student: Callable[[int, list], list], seed: int | None = None) -> None:
    """``barrier_model(count, events)`` -> (parity, pending arrivals, pending tx) after each event."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 2 · a barrier through its phases", seed=rng.seed) as c:
        cases = MODEL_CASES + [(int(rng.choice([1, 2, 3, 128])), None) for _ in range(4)]
        for count, events in cases:
            if events is None:
                events = random_events(rng, count, int(rng.integers(6, 16)))
            got = C.call(c, f"barrier_model({count}, …)", student, count, list(events))
            exp = simulate(count, events)
            try:
                got = [tuple(int(v) for v in s) for s in got]
            except (TypeError, ValueError):
                c.fail(f"barrier_model({count}, …)", "a list of (parity, pending, tx) tuples", got)
            if len(got) != len(exp):
                c.fail(f"barrier_model({count}, {len(events)} events): one state per event", len(exp), len(got))
            for n, (ev, g, e) in enumerate(zip(events, got, exp, strict=True)):
                if g != e:
                    before = exp[n - 1] if n else (0, count, 0)
                    c.fail(f"count {count}: after {ev[0]}({ev[1]}) (event {n + 1} of {len(events)})", e, g,
                           detail=f"    the state before it: parity {before[0]}, {before[1]} arrivals and "
                                  f"{before[2]} bytes pending",
                           hint=_model_hint(ev, before, g, e, count))
            c.ok(f"count {count}: {len(events)} events, every state right")


def _model_hint(ev: tuple[str, int], before: tuple[int, int, int], got: tuple[int, ...], exp: tuple[int, ...],
                count: int) -> str:
    kind, value = ev
    completes = exp[0] != before[0]
    if len(got) == 3 and got[0] not in (0, 1):
        return "return the parity (the phase number modulo 2), not the phase number"
    if kind == "arrive_expect_tx" and got == (before[0] ^ 1, count, value):
        return "arrive_expect_tx adds the bytes first, then arrives: the phase cannot complete while they are due"
    if kind in ("expect_tx", "arrive_expect_tx") and exp[2] != 0 and got[2] == 0:
        return ("track the pending bytes: expect_tx and arrive_expect_tx add them, complete_tx takes them away, and a "
                "phase completes only when they are back to zero")
    if completes and got[0] == before[0]:
        return ("this event completes the phase: both the pending arrivals and the pending bytes reach zero, so the "
                "parity flips")
    if completes and got[1:] != (count, 0):
        return "when a phase completes, the pending arrivals go back to the count and the bytes to 0"
    if not completes and got[0] != before[0]:
        return ("a phase completes only when the pending arrivals AND the pending bytes are both zero; here "
                f"{exp[1]} arrivals and {exp[2]} bytes are still due")
    if kind == "complete_tx" and got[2] != exp[2]:
        return "bytes landing lower the pending count (it may even go below zero until they are announced)"
    return "apply the event to the counts, then see whether both reached zero"


# ---------------------------------------------------------------------------------------------------------
# Exercise 4: which parity to wait for in a ring of stages
# ---------------------------------------------------------------------------------------------------------
def check_ring_parity(student: Callable[[int, int], tuple[int, int]], seed: int | None = None) -> None:
    """``ring_parity(i, stages)`` -> (parity the consumers wait on full[s], parity the producer waits on empty[s])
    for tile i, s = i % stages. Checked by running the ring on the reference barrier model: 1, 2, 3 and 5 stages
    (a ring that is not a power of two), then a random number of stages."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 2 · parities in a ring of stages", seed=rng.seed) as c:
        for stages in (1, 2, 3, 5, int(rng.integers(4, 9))):
            n = stages * 4 + int(rng.integers(0, stages))
            released = [0] * stages  # phases completed on empty[s]: one per release
            filled = [0] * stages  # phases completed on full[s]: one per landed tile
            for i in range(n):
                s = i % stages
                got = _as_pair(C.call(c, f"ring_parity({i}, {stages})", student, i, stages))
                if got is None:
                    c.fail(f"ring_parity({i}, {stages})", "a pair (full parity, empty parity)", got)
                fp, ep = got
                if i >= stages and _wait_passes(released[s] - 1, ep):
                    c.fail(f"{stages} stages, tile {i}: the producer's wait on empty[{s}] (parity {ep}) passes "
                           "before the consumers released the stage", hint=_ring_hint(i, stages, got, "race"),
                           detail="    the producer would overwrite a tile still being read: a race")
                if not _wait_passes(released[s], ep):
                    c.fail(f"{stages} stages, tile {i}: the producer waits on empty[{s}] for parity {ep}",
                           detail=f"    empty[{s}] has completed {released[s]} phases, so a wait for parity {ep} "
                                  "blocks forever: deadlock", hint=_ring_hint(i, stages, got, "deadlock"))
                filled[s] += 1
                if not _wait_passes(filled[s], fp):
                    c.fail(f"{stages} stages, tile {i}: the consumers wait on full[{s}] for parity {fp}",
                           detail=f"    tile {i} completes phase {filled[s] - 1} of full[{s}] (parity "
                                  f"{(filled[s] - 1) % 2}); a wait for parity {fp} never passes: deadlock",
                           hint=_ring_hint(i, stages, got, "full"))
                if _wait_passes(filled[s] - 1, fp):
                    c.fail(f"{stages} stages, tile {i}: the consumers' wait on full[{s}] (parity {fp}) passes "
                           "before the tile lands", hint=_ring_hint(i, stages, got, "full"),
                           detail="    they would read the stage's previous tile: a race")
                released[s] += 1
            c.ok(f"{stages} stage{'s' if stages > 1 else ''}: {n} tiles stream through, no deadlock, no race")


def _wait_passes(completed: int, parity: int) -> bool:
    """try_wait.parity on a barrier that has completed ``completed`` phases (a fresh one counts the phase before
    phase 0, of parity 1, as complete)."""
    return (completed % 2) != parity


def _as_pair(x: Any) -> tuple[int, int] | None:
    try:
        a, b = x
        return int(a), int(b)
    except (TypeError, ValueError):
        return None


def _ring_hint(i: int, stages: int, got: tuple[int, int], what: str) -> str:
    use = i // stages
    fp, ep = got
    if stages > 1 and fp == i % 2 and fp != use % 2:
        return "stage s is reused every `stages` tiles: count the uses of the stage (i // stages), not the tiles"
    if what == "full":
        return f"tile {i} is use {use} of stage {i % stages}: the consumers wait for phase {use} of full[s]"
    if ep == use % 2:
        return ("the producer waits for the consumers' release of the previous use, phase use - 1 of empty[s]: on a "
                "fresh barrier that is parity 1, which passes at once: flip the full parity")
    return f"tile {i} is use {use} of its stage: the producer waits for phase {use - 1} of empty[s]"


# ---------------------------------------------------------------------------------------------------------
# Exercise 5: the lab's kernel, the GEMM's two-stage A+B load loop
# ---------------------------------------------------------------------------------------------------------
STAGE_BYTES = 2 * 64 * 64 * 2


def protocol_checks(c: grading.Check, ptx: str, compiled: str, kernel: str | None, *, loads: int = 2) -> Any:
    """The load loop's protocol, read from every path of the PTX; one ✓ line per rule that holds."""
    proto = read_protocol(ptx, KERNEL_NAME if KERNEL_NAME in ptx else _entry(ptx), compiled, kernel)
    per_use = len({i.line for i in proto.loads})  # the producer's code may be inlined more than once
    c.true(f"the producer issues {loads} TMA loads per stage (A and B)", per_use >= loads,
           detail=f"    found {per_use} load statement{'s' if per_use != 1 else ''}",
           hint="thread 0 loads step j's A tile and B tile into stage j % STAGES: two my_tma_load_2d")
    if proto.ambiguous:
        c.ok("(full and empty barriers share a variable here, so the rules below that tell them apart are skipped)")
        return proto
    early = proto.arrive_before_bytes()
    if early is not None:
        c.fail("an arrival on full[s] before the stage's bytes are announced", detail=f"    at {proto.where(early)}",
               hint="full[s] expects one arrival: once it is in (with no bytes announced yet) the phase completes "
                    "and the consumers read a stage still in flight. Announce the bytes first (expect_tx, then "
                    "arrive), or in one instruction (arrive.expect_tx)")
    c.ok("the bytes are announced on full[s] before (or with) the producer's arrival")
    announced = proto.bytes_announced()
    if announced is not None:
        c.equal("bytes announced per stage (read from the PTX)", announced, STAGE_BYTES,
                hint="one stage is a 64×64 A tile and a 64×64 B tile of bf16: 2 × 8192 bytes, exactly what the two "
                     "loads bring (fewer and the phase completes with data in flight; more and it never completes)")
    c.true("the producer waits on empty[s] before it refills a stage", proto.producer_waits(),
           hint="before the loads of step j, thread 0 waits until the consumers released stage j % STAGES")
    first = proto.first_wait_deadlocks()
    if first is not None:
        c.fail("the producer's first wait on empty is for parity 0", detail=f"    at {proto.where(first)}",
               hint="on a fresh barrier nobody completes phase 0 before the first loads (the consumers release a "
                    "stage after reading it): wait for parity 1, the phase 'before' phase 0, which counts as "
                    "complete: deadlock otherwise")
    for kind, ins in proto.consumer_violations():
        words = {"read-unwaited": ("a thread can read a stage before waiting on full[s]",
                                   "every thread waits on full[s] with the step's parity before reading the stage"),
                 "read-released": ("a thread reads a stage after releasing it (arrive on empty[s])",
                                   "release the stage after the last read of the step: once empty[s] completes, the "
                                   "producer may refill it while you still read it"),
                 "release-unheld": ("a thread releases a stage it is not holding (a second arrive on empty before the "
                                    "next wait)", "arrive on empty[s] once per step, after reading the stage")}[kind]
        c.fail(words[0], detail=f"    at {proto.where(ins)}", hint=words[1])
    ahead = proto.release_before_acquire()
    if ahead is not None:
        c.fail("a thread releases stage s before it waits on full[s] and reads it, in the same step",
               detail=f"    at {proto.where(ahead)}",
               hint="the arrival counts as the release of the use the thread is about to read, so the producer may "
                    "refill the stage under it: release a stage after the step's last read of it")
    c.ok("every thread waits on full[s] before it reads the stage, and releases it after its last read")
    c.true("every step releases its stage (an arrive on empty[s] inside the K loop)", proto.release_in_loop(),
           hint="each consumer thread arrives on empty[s] after reading stage s, in every step: otherwise the "
                "producer waits forever for a stage to come back")
    return proto


def _entry(ptx: str) -> str:
    m = re.search(r"\.entry\s+(\w+)", ptx)
    return m.group(1) if m else KERNEL_NAME


def _diagnose_gemm(got: np.ndarray, ref: np.ndarray) -> str:
    got = np.asarray(got, np.float64)
    with np.errstate(invalid="ignore"):
        if np.isnan(got).any():
            return ("some elements were never written (C was poisoned with NaN): the epilogue writes every thread's "
                    "32 outputs")
        if np.allclose(got, C.tiles_transposed(ref), rtol=1e-3, atol=1e-3):
            return ("every 64×64 tile is transposed: the A and B tiles were swapped (check the two loads' maps and "
                    "coordinates, innermost first)")
    return ("wrong values: a stage read before it landed or after it was refilled, or the loads' coordinates "
            "(step j's A tile is at (j·64, m0), its B tile at (j·64, n0))")


def check_gemm(source: str, kernel: str | None = None) -> None:
    """The lab's kernel ``lab2_gemm``: the two-stage load loop. Where it can run, random non-square GEMMs against
    fp64 are the grade; the protocol read from every path of its PTX explains them. ``source`` is the whole compiled
    text (your wrappers and the kernel); ``kernel`` the kernel's own part (for line numbers)."""
    rng = grading.fresh_rng()
    with grading.check("Lab 2 · the GEMM's two-stage load loop", seed=rng.seed) as c:
        full_source = HEADER + source
        k = C.compile_student(full_source, KERNEL_NAME, what=f"{KERNEL_NAME} (with your wrappers)")
        c.ok(f"compiles: {k.report.summary()}")
        _run_gemm(c, k, full_source, kernel, rng, runs=1)


def _run_gemm(c: grading.Check, k: Any, full_source: str, kernel: str | None, rng: Any, runs: int) -> None:
    """The protocol from the PTX (the explanation), then the runs (the grade) where the kernel can run."""
    ex = C.Explanation(c)
    with ex:
        protocol_checks(c, k.ptx, full_source, kernel)
    if not ex.runnable(k, checked="the load loop's protocol on every path of the PTX (parities and counts are "
                                 "checked when the kernel runs)"):
        return
    with ex.run():
        C.check_gemm_runs(c, full_source, KERNEL_NAME, rng, _diagnose_gemm, runs=runs)
    ex.settle()


# ---------------------------------------------------------------------------------------------------------
# Exercise 6: the bug hunt, a silent race
# ---------------------------------------------------------------------------------------------------------
BUGGY_KERNEL = r"""
// A colleague's Lab 2 kernel, written with the course header. It compiles, it never hangs, and it passed every
// test the colleague ran.
constexpr int BM = 64, BN = 64, BK = 64, STAGES = 2, THREADS = 128;
constexpr unsigned STAGE_BYTES = (BM + BN) * BK * 2;

__device__ __forceinline__ float bf16_at(const unsigned short* tile, int r, int c) {
  return __uint_as_float(unsigned(tile[r * 64 + 8 * ((c / 8) ^ (r % 8)) + c % 8]) << 16);
}

extern "C" __global__ void __launch_bounds__(THREADS)
lab2_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
          float* __restrict__ C, int M, int N, int K) {
  __shared__ alignas(1024) unsigned short sA[STAGES][BM * BK];
  __shared__ alignas(1024) unsigned short sB[STAGES][BN * BK];
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];
  const int t = threadIdx.x, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, nk = K / BK;
  if (t == 0) {
    for (int s = 0; s < STAGES; ++s) {
      hopper::mbar_init(&full[s], 1);
      hopper::mbar_init(&empty[s], THREADS);
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();

  auto produce = [&](int j) {
    const int s = j % STAGES;
    HOPPER_WAIT(empty, s, ((j / STAGES) & 1) ^ 1);
    hopper::mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
    hopper::tma_load_2d(sA[s], &tmap_a, &full[s], j * BK, m0);
    hopper::tma_load_2d(sB[s], &tmap_b, &full[s], j * BK, n0);
  };

  const int row = t / 2, col0 = 32 * (t % 2);
  float acc[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) acc[j] = 0.0f;

  if (t == 0) produce(0);
  for (int k = 0; k < nk; ++k) {
    const int s = k % STAGES;
    if (t == 0 && k + 1 < nk) produce(k + 1);
    HOPPER_WAIT(full, s, (k / STAGES) & 1);
    hopper::mbar_arrive(&empty[s]);  // got the tile: the producer may go on
    for (int kk = 0; kk < BK; ++kk) {
      const float a = bf16_at(sA[s], row, kk);
#pragma unroll
      for (int j = 0; j < 32; ++j) acc[j] += a * bf16_at(sB[s], col0 + j, kk);
    }
  }
#pragma unroll
  for (int j = 0; j < 32; ++j) C[(size_t)(m0 + row) * N + n0 + col0 + j] = acc[j];
}
"""

BUG_CHOICES = {
    "a": "the producer waits on empty[s] with the wrong parity, so it refills a stage one phase early",
    "b": "the consumers arrive on empty[s] before they read the stage, so the producer may refill it while a slower "
         "warp still reads it",
    "c": "full[s] expects 16 KiB but the two loads bring 32 KiB",
    "d": "two stages are too few: with a third the producer could not catch up with the consumers",
}


def run_many(source: str = BUGGY_KERNEL, runs: int = 4, sizes: tuple[int, ...] = (512, 2048)) -> None:
    """Run a lab2_gemm and say which runs gave a wrong C. On the H100: ``runs`` times at each size³ on the same random
    inputs (isolated). On the emulator: once at 128×64×256 as is (its schedule is the same on every run), then once in
    hazard mode, which names a race whatever the timing. With neither, one line says it was skipped."""
    from helpers import gpu

    k = gpu.compile(HEADER + source, KERNEL_NAME)
    if not gpu.can_run():
        print(f"{k.report.summary()}; run skipped: no sm_90 GPU here ({gpu.no_hopper_reason()}) and the emulator is "
              "off (HELPERS_EXECUTOR=off); the replay below finds the race without either")
        return
    if C.on_h100():
        for size in sizes:
            _report_runs(source, size, size, size, runs)
        return
    _report_runs(source, 128, 64, 256, 1)
    from helpers.gpu import executor

    with executor.executor_options(hazards=True):
        try:
            C.run(C.gemm_run, HEADER + source, KERNEL_NAME, [C.make_operands(np.random.default_rng(2), 128, 64, 256)],
                  1, what="the kernel in hazard mode", timeout=300)
        except grading.CheckFailed as exc:
            print(str(exc).split("\n  also:")[0])
            return
    print("hazard mode: no race found")


def _report_runs(source: str, m: int, n: int, kk: int, runs: int) -> None:
    """Run the kernel ``runs`` times on one random M×N×K problem and print which runs gave a wrong C, and where."""
    a, b = C.make_operands(np.random.default_rng(2), m, n, kk)
    try:
        outs = C.run(C.gemm_run, HEADER + source, KERNEL_NAME, [(a, b)], runs, what="the kernel", timeout=300,
                     hazards=False)
    except grading.CheckFailed as exc:
        print(exc)
        return
    ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64).T
    tol = grading.gemm_tolerance(a, np.asarray(b, np.float64).T)
    print(f"{C.where(hazards=False)}: {runs} run{'s' if runs > 1 else ''} at M={m}, N={n}, K={kk}" + (
        "" if C.on_h100() else " (the emulator's schedule is the same on every run: more runs would all say the same)"))
    bad_runs = 0
    for r, got in enumerate(outs):
        wrong = ~(np.abs(got - ref) <= tol)
        if wrong.any():
            bad_runs += 1
            rows = np.unique(np.argwhere(wrong)[:, 0] // 64)
            print(f"  run {r + 1}: {int(wrong.sum())} of {wrong.size} elements wrong, in {len(rows)} row(s) of "
                  f"tiles (first: tile row {int(rows[0])})")
        else:
            print(f"  run {r + 1}: C is right")
    print(f"  {bad_runs} of {runs} run{'s' if runs > 1 else ''} gave a wrong C")


def replay(program_for_warp: Callable[[int, Callable[[int, int], float]], Callable], *, k_steps: int = 6,
           runs: int = 1, seed: int = 0, lag: float = 40.0) -> bool:
    """Replay the barrier protocol of a kernel with helpers.hopper.pipeline: one role per warp (warp 0 is also thread 0,
    the producer), each reading its stage for a time drawn at random (``lag`` of jitter), ``runs`` schedules.
    Prints the first hazard (ReadBeforeFull, OverwriteBeforeEmpty, a deadlock) with the stage's story, or that
    every schedule streamed through. Returns True when none went wrong."""
    from helpers.hopper import pipeline as pl

    for r in range(runs):
        rng = np.random.default_rng(seed + r)
        times = rng.uniform(100.0, 100.0 + lag, size=(4, k_steps))
        p = pl.Pipeline(stages=2, tma_latency=float(rng.uniform(60, 160)), wgmma_latency=100.0, empty_count=128)
        for w in range(4):
            p.add_role(f"warp {w}", program_for_warp(w, lambda w_, k_, t=times: float(t[w_, k_])), consumer=True)
        try:
            p.run()
        except (pl.PipelineError, pl.Deadlock) as exc:
            print(f"schedule {r + 1} of {runs}: {type(exc).__name__}: {exc}")
            stage = re.search(r"stage (\d+)", str(exc))
            if stage:
                _story(p, int(stage.group(1)))
            if isinstance(exc, pl.OverwriteBeforeEmpty):
                print("(the replay counts a warp as reading a stage until that warp arrives on empty after its "
                      "reads: an arrival before the reads releases nothing it has read)")
            return False
    print(f"{runs} schedule{'s' if runs > 1 else ''}: every tile streamed through, no hazard, no deadlock")
    return True


def _story(p: Any, stage: int, last: int = 14) -> None:
    """The last events of one stage, in time order: who waited, arrived, loaded, read."""
    names = (f"full[{stage}]", f"empty[{stage}]")
    events = [e for e in p.trace if e.stage == stage or e.barrier in names]
    print(f"what happened to stage {stage} (last {min(last, len(events))} events):")
    kinds = {"read": "reads the stage (fill {phase})", "arrive": "arrives on {barrier}", "wait": "waits on {barrier}",
             "wait_done": "passes its wait on {barrier}", "tma_issue": "issues a TMA load into the stage",
             "tma_landed": "(a load lands)", "arrive_expect_tx": "arrives on {barrier} and announces bytes",
             "release": "(counted as releasing fill {phase})", "phase_complete": "{barrier} completes phase {phase}"}
    for e in events[-last:]:
        text = kinds.get(e.kind, e.kind).format(barrier=e.barrier, phase=e.phase)
        print(f"  t={e.time:7.1f}  {'' if e.role == '-' else e.role:>7}  {text}")


def check_bug_diagnosis(diagnosis: Callable[[], str]) -> None:
    """The multiple choice: ``diagnosis()`` -> the letter of the reason BUGGY_KERNEL is wrong at some sizes."""
    with grading.check("Lab 2 · bug hunt: the diagnosis") as c:
        got = str(C.call(c, "diagnosis()", diagnosis)).strip().lower()
        if got not in BUG_CHOICES:
            c.fail("an answer among a, b, c, d", "one of 'a', 'b', 'c', 'd'", got,
                   hint="return the letter of the explanation you believe")
        why = {
            "a": "the producer's parity is ((j / STAGES) & 1) ^ 1, the one exercise 4 found; its wait passed because "
                 "empty[s] had completed: ask who completed it, and when",
            "c": "a stage is a 64×64 A tile and a 64×64 B tile of bf16: 2 × 8192 = 16 KiB, exactly what the loads "
                 "bring (a wrong byte count would hang, not race)",
            "d": "more stages only make the race rarer: the producer still refills a stage the consumers released "
                 "before reading it",
        }
        c.equal("the explanation", got, "b", hint=why.get(got, ""))


def check_bug_fix(fix: Callable[[str], str]) -> None:
    """``fix(source)`` -> the repaired kernel. Where it can run: every element against fp64 (three runs of each
    problem on the H100, where a race shows only on some; one on the emulator, whose schedule never changes). The
    protocol of its PTX (a consumer reads a stage only between its wait on full[s] and its release; see
    protocol_checks) explains a wrong C and fails a run that passed by luck."""
    rng = grading.fresh_rng()
    with grading.check("Lab 2 · bug hunt: the fix", seed=rng.seed) as c:
        fixed = C.call(c, "fix(BUGGY_KERNEL)", fix, BUGGY_KERNEL)
        c.true("fix() returns the kernel's source", isinstance(fixed, str) and KERNEL_NAME in fixed,
               hint="return the corrected source text (a str)")
        k = C.compile_student(HEADER + fixed, KERNEL_NAME, what="the fixed kernel")
        c.ok("compiles for sm_90a")
        _run_gemm(c, k, HEADER + fixed, fixed, rng, runs=3)
