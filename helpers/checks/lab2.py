"""Graders of Lab 2 (mbarrier): the wrappers in inline PTX, phase bookkeeping on the emulator, the two-stage
stream, and the bug hunt.

CUDA exercises are graded in two steps. Without a GPU: the source must compile (a stub's ``#error`` fails with
its hint) and the PTX of a probe kernel must hold the right instruction with the right state space and operands
in the right order (the probe passes distinctive values, and the operands are traced back to them). With an
H100: the same code runs for real through ``gpu.run_isolated`` (a fault or a deadlock is reported in plain
words), into poisoned outputs, compared element by element with numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from helpers import grading
from helpers.checks import _common as C

__all__ = [
    "check_init_arrive",
    "check_tx_wait",
    "check_barrier_model",
    "check_ring_parity",
    "check_stream_kernel",
    "check_bug_diagnosis",
    "check_bug_fix",
    "EVENT_KINDS",
    "simulate",
    "stream_reference",
]

HEADER = "#include <hopper.cuh>\n"
BAR_COUNT, TX_BYTES, PARITY = 37, 768, 1


# ---------------------------------------------------------------------------------------------------------
# CUDA: reading the wrappers in the PTX
# ---------------------------------------------------------------------------------------------------------
def _one(c: grading.Check, ptx: str, entry: str, prefix: str, what: str, hint: str) -> C.Instr:
    found = C.find_instrs(ptx, prefix, entry)
    c.true(f"{what}: an inline-asm {prefix} instruction", len(found) >= 1, hint=hint,
           detail="    the inline asm held: " + "; ".join(i.opcode for i in C.inline_asm(ptx, entry)) or "nothing")
    return found[0]


def _state_space(c: grading.Check, ins: C.Instr, what: str) -> None:
    parts = ins.parts
    c.true(f"{what}: names the shared state space (.shared::cta)", "shared::cta" in parts or "shared" in parts,
           hint=f"write {parts[0]}.{parts[1]}.shared::cta.b64: the barrier lives in this block's shared memory "
                "(without a state space the address is generic; .shared::cluster is for other blocks' barriers)",
           detail=f"    got: {ins.line}")
    c.true(f"{what}: operates on the 64-bit barrier (.b64)", "b64" in parts,
           hint="an mbarrier is a 64-bit object: end the opcode with .b64", detail=f"    got: {ins.line}")


def _address(c: grading.Check, ptx: str, operand: str, symbol: str, what: str, ins: C.Instr) -> None:
    origin = C.shared_address_of(ptx, operand)
    if origin is None:
        c.fail(f"{what}: the barrier operand is a generic pointer",
               detail=f"    got: {ins.line}",
               hint="pass the 32-bit shared-memory address: static_cast<unsigned>(__cvta_generic_to_shared(bar)) "
                    "with an \"r\" constraint")
    c.true(f"{what}: [addr] is the barrier's shared-memory address", origin.endswith(symbol),
           hint="the operand in brackets must be the barrier's address; check the order of your %0, %1 … operands",
           detail=f"    got: {ins.line}  (the bracketed operand came from {origin})")


def _value(c: grading.Check, ptx: str, operand: str, expected: int, what: str, ins: C.Instr, hint: str) -> None:
    got = C.resolve(ptx, operand)
    c.true(f"{what}", got == str(expected), hint=hint,
           detail=f"    got: {ins.line}  (that operand came from {got}; the probe passed {expected})")


PROBE_INIT_ARRIVE = r"""
extern "C" __global__ void probe_init_arrive(unsigned long long* out) {
  __shared__ alignas(8) unsigned long long probe_bar;
  my_mbar_init(&probe_bar, 37u);
  out[0] = my_mbar_arrive(&probe_bar);
}
"""

SELFTEST_INIT_ARRIVE = r"""
// 128 threads, one barrier expecting 128 arrivals, 4 phases. Thread 0 is slow to write its slot; a barrier that
// completes early lets the others read its old value.
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
    my_mbar_arrive(&bar);
    HOPPER_WAIT1(bar, round & 1);
    out[round * 128 + t] = slot[round & 1][(t * 37 + 5) % 128];
  }
}
"""


def _init_arrive_expected() -> np.ndarray:
    t = np.arange(128)
    return np.concatenate([1000 * r + (t * 37 + 5) % 128 for r in range(4)]).astype(np.int32)


def check_init_arrive(source: str) -> None:
    """Exercise 1: ``my_mbar_init`` and ``my_mbar_arrive`` in inline PTX."""
    from helpers import gpu

    with grading.check("Lab 2 · mbarrier init and arrive") as c:
        k = C.compile_student(HEADER + source + PROBE_INIT_ARRIVE, "probe_init_arrive",
                              what="my_mbar_init / my_mbar_arrive")
        c.ok("compiles for sm_90a")
        ptx, entry = k.ptx, "probe_init_arrive"
        init = _one(c, ptx, entry, "mbarrier.init", "my_mbar_init",
                    "my_mbar_init needs asm volatile(\"mbarrier.init.shared::cta.b64 [%0], %1;\" ...)")
        _state_space(c, init, "mbarrier.init")
        ops = C.split_operands(init.operands)
        c.true("mbarrier.init: two operands, [addr] and count", len(ops) == 2, detail=f"    got: {init.line}")
        _address(c, ptx, ops[0], "probe_bar", "mbarrier.init", init)
        _value(c, ptx, ops[1], BAR_COUNT, "mbarrier.init: the count operand is the expected arrival count", init,
               "the second operand is the number of arrivals per phase (the probe called my_mbar_init(bar, 37))")
        arrives = [i for i in C.find_instrs(ptx, "mbarrier.arrive", entry) if "expect_tx" not in i.parts]
        c.true("my_mbar_arrive: an inline-asm mbarrier.arrive instruction (without .expect_tx)", bool(arrives),
               hint="my_mbar_arrive needs asm volatile(\"mbarrier.arrive.shared::cta.b64 %0, [%1];\" : \"=l\"(state)"
                    " : \"r\"(addr))")
        arr = arrives[0]
        _state_space(c, arr, "mbarrier.arrive")
        aops = C.split_operands(arr.operands)
        c.true("mbarrier.arrive: state, [addr] (and at most a count of 1)", len(aops) in (2, 3),
               detail=f"    got: {arr.line}", hint="the destination (the state token, or _) comes first")
        _address(c, ptx, aops[1], "probe_bar", "mbarrier.arrive", arr)
        if len(aops) == 3:
            _value(c, ptx, aops[2], 1, "mbarrier.arrive: counts one arrival", arr,
                   "my_mbar_arrive arrives once: leave out the count operand")
        if gpu.skip_without_hopper(k, checked="the PTX of my_mbar_init and my_mbar_arrive"):
            return
        kk = C.compile_student(HEADER + source + SELFTEST_INIT_ARRIVE, "selftest_init_arrive",
                               what="the self-test kernel")
        out = np.full(4 * 128, -1, dtype=np.int32)
        (got,) = C.run_on_gpu(kk, 1, 128, 0, out, what="the init/arrive self-test")
        c.array("4 phases of a 128-arrival barrier on the GPU (each thread reads another's slot)", got,
                _init_arrive_expected(),
                hint="a barrier that completes too early lets threads read a slot before it was written: is the "
                     "count passed to mbarrier.init, and does every arrive count once?")


PROBE_TX_WAIT = r"""
extern "C" __global__ void probe_tx_wait(int* out) {
  __shared__ alignas(8) unsigned long long probe_bar;
  my_mbar_expect_tx(&probe_bar, 768u);
  out[0] = my_mbar_try_wait(&probe_bar, 1u) ? 1 : 0;
}
"""

SELFTEST_TX_WAIT = r"""
// One block; thread 0 announces the bytes with my_mbar_expect_tx, arrives, and loads a 64x64 bf16 tile with TMA.
// Everyone waits with my_mbar_try_wait (bounded), then copies the tile out. Two phases: parity 0, then 1.
extern "C" __global__ void __launch_bounds__(128) selftest_tx_wait(const __grid_constant__ CUtensorMap map,
                                                                  const unsigned short* src, unsigned short* out) {
  __shared__ alignas(128) unsigned short tile[2][64 * 64];
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
    const long long start = clock64();
    while (!my_mbar_try_wait(&bar, phase)) {
      if (clock64() - start > 2000000000LL) hopper::report_stuck(&bar, phase, "bar", -1, clock64() - start);
    }
    for (int i = t; i < 64 * 64; i += 128) out[phase * 64 * 64 + i] = tile[phase][i];
  }
}
"""


def check_tx_wait(source: str) -> None:
    """Exercise 2: ``my_mbar_expect_tx`` and ``my_mbar_try_wait`` in inline PTX."""
    from helpers import gpu

    with grading.check("Lab 2 · expect_tx and try_wait.parity") as c:
        k = C.compile_student(HEADER + source + PROBE_TX_WAIT, "probe_tx_wait",
                              what="my_mbar_expect_tx / my_mbar_try_wait")
        c.ok("compiles for sm_90a")
        ptx, entry = k.ptx, "probe_tx_wait"
        txs = C.find_instrs(ptx, "mbarrier.expect_tx", entry)
        if not txs and C.find_instrs(ptx, "mbarrier.arrive.expect_tx", entry):
            c.fail("my_mbar_expect_tx uses mbarrier.arrive.expect_tx",
                   hint="arrive.expect_tx also counts an arrival, so a barrier initialised for one arrival would "
                        "complete before the data lands: use mbarrier.expect_tx, which only adds bytes")
        tx = _one(c, ptx, entry, "mbarrier.expect_tx", "my_mbar_expect_tx",
                  "my_mbar_expect_tx needs asm volatile(\"mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\""
                  " ...)")
        _state_space(c, tx, "mbarrier.expect_tx")
        ops = C.split_operands(tx.operands)
        c.true("mbarrier.expect_tx: two operands, [addr] and bytes", len(ops) == 2, detail=f"    got: {tx.line}")
        _address(c, ptx, ops[0], "probe_bar", "mbarrier.expect_tx", tx)
        _value(c, ptx, ops[1], TX_BYTES, "mbarrier.expect_tx: the byte count", tx,
               "the second operand is the number of bytes (the probe called my_mbar_expect_tx(bar, 768))")
        waits = C.find_instrs(ptx, "mbarrier.try_wait", entry)
        if not waits and C.find_instrs(ptx, "mbarrier.test_wait", entry):
            c.fail("my_mbar_try_wait uses mbarrier.test_wait",
                   hint="test_wait never suspends the thread; try_wait lets the hardware park it until the phase "
                        "completes or a time limit passes, which is what a wait loop wants")
        w = _one(c, ptx, entry, "mbarrier.try_wait", "my_mbar_try_wait",
                 "my_mbar_try_wait needs mbarrier.try_wait.parity.shared::cta.b64 p, [addr], parity; and a selp")
        c.true("mbarrier.try_wait: waits on a phase parity (.parity)", "parity" in w.parts,
               hint="without .parity the last operand is the state token returned by arrive, not a parity bit",
               detail=f"    got: {w.line}")
        _state_space(c, w, "mbarrier.try_wait")
        wops = C.split_operands(w.operands)
        c.true("mbarrier.try_wait: a predicate, [addr], parity", len(wops) in (3, 4) and "[" not in wops[0],
               detail=f"    got: {w.line}",
               hint="the first operand is a predicate register (.reg .pred p), then [addr], then the parity")
        _address(c, ptx, wops[1], "probe_bar", "mbarrier.try_wait", w)
        _value(c, ptx, wops[2], PARITY, "mbarrier.try_wait: the parity operand", w,
               "the third operand is the parity of the phase waited for (the probe called my_mbar_try_wait(bar, 1))")
        if gpu.skip_without_hopper(k, checked="the PTX of my_mbar_expect_tx and my_mbar_try_wait"):
            return
        kk = C.compile_student(HEADER + source + SELFTEST_TX_WAIT, "selftest_tx_wait", what="the self-test kernel")
        rng = grading.fresh_rng()
        a = rng.integers(0, 1 << 16, size=(128, 128), dtype=np.uint16)
        out = np.full(2 * 64 * 64, 0xFFFF, dtype=np.uint16)
        (_, got) = C.run_on_gpu(kk, 1, 128, 0, gpu.TensorMapArg(a, (64, 64), swizzle=0), a, out,
                                what="the expect_tx/try_wait self-test")
        expected = np.concatenate([a[:64, :64].ravel(), a[64:, 64:].ravel()])
        c.array("two TMA tiles waited for with your try_wait (phase 0, then phase 1)", got, expected,
                hint="elements still 0xFFFF were read before the TMA wrote them: does expect_tx add the bytes, "
                     "and does try_wait return the predicate?")


# ---------------------------------------------------------------------------------------------------------
# Exercise 3: the barrier's state after a sequence of events
# ---------------------------------------------------------------------------------------------------------
EVENT_KINDS = ("arrive", "expect_tx", "complete_tx", "arrive_expect_tx")


def simulate(count: int, events: list[tuple[str, int]]) -> list[tuple[int, int, int]]:
    """The reference model: (phase parity, pending arrivals, pending tx bytes) after each event.

    A phase completes when its pending arrivals and its pending transaction bytes are both zero; then the
    phase advances (the parity flips), the pending arrivals reset to ``count`` and the tx count to zero.
    ``arrive_expect_tx`` adds the bytes first, then arrives. (tests/labs checks this against helpers.mbarrier.)
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
            value = int(rng.choice([16, 128, 1024, 8192, 16384]))
        events.append((kind, value))
        pending, tx = simulate(count, events)[-1][1:]
    return events


def check_barrier_model(student: Callable[[int, list[tuple[str, int]]], list]) -> None:
    """``barrier_model(count, events)`` -> [(parity, pending arrivals, tx bytes)] after each event."""
    rng = grading.fresh_rng()
    with grading.check("Lab 2 · phase bookkeeping", seed=rng.seed) as c:
        for trial in range(12):
            count = int(rng.choice([1, 1, 2, 3, 4, 128]))
            events = random_events(rng, count, int(rng.integers(6, 24)))
            exp = simulate(count, events)
            got = grading.call_student(student, count, list(events), what="barrier_model")
            try:
                got = [tuple(int(v) for v in row) for row in got]
            except (TypeError, ValueError):
                c.fail(f"trial {trial}: a list of (parity, pending, tx) tuples", exp[:2], got)
            if len(got) != len(exp):
                c.fail(f"trial {trial}: one state per event", len(exp), len(got))
            for k, (g, e) in enumerate(zip(got, exp, strict=True)):
                if g != e:
                    shown = "\n".join(f"      {i:2d}. {kd}({v})  ->  {st}" for i, ((kd, v), st)
                                      in enumerate(zip(events[:k + 1], exp[:k + 1], strict=True)))
                    c.fail(f"barrier of count {count}, after event {k} ({events[k][0]}({events[k][1]}))", e, g,
                           detail="    the events and the right states (parity, pending, tx):\n" + shown,
                           hint=_model_hint(count, events[:k + 1], g, e))
            c.ok(f"count {count}, {len(events)} events, ends in phase parity {exp[-1][0]}")


def _model_hint(count: int, events: list[tuple[str, int]], got: tuple, exp: tuple) -> str:
    if got[0] != exp[0] and got[1:] == exp[1:]:
        return "a fresh barrier is in phase 0 (parity 0); each completed phase flips the parity"
    if got[1] == 0 and exp[1] == count:
        return "when the phase completes, the pending arrivals go back to the count given at init"
    if got[0] != exp[0] and exp[2] > 0:
        return "a phase completes only when the arrivals are done AND the tx bytes expected have all landed"
    if events[-1][0] == "arrive_expect_tx":
        return "arrive_expect_tx adds the bytes first, then arrives (so the phase cannot complete before the data)"
    return "pending arrivals count down from the init count; tx bytes go up with expect_tx and down with complete_tx"


# ---------------------------------------------------------------------------------------------------------
# Exercise 4: which parity to wait for in a ring of stages
# ---------------------------------------------------------------------------------------------------------
def check_ring_parity(student: Callable[[int, int], tuple[int, int]]) -> None:
    """``ring_parity(i, stages)`` -> (parity the consumer waits on full[s], parity the producer waits on empty[s])
    for the i-th tile, s = i % stages. Checked by running the ring on the reference barrier model."""
    rng = grading.fresh_rng()
    with grading.check("Lab 2 · parities in a ring of stages", seed=rng.seed) as c:
        for stages in sorted({1, 2, int(rng.integers(3, 7))}):
            n = stages * int(rng.integers(3, 6)) + int(rng.integers(0, stages))
            released = [0] * stages  # phases completed on empty[s]: one per consumer release
            filled = [0] * stages  # phases completed on full[s]: one per landed tile
            for i in range(n):
                s = i % stages
                got = _as_pair(grading.call_student(student, i, stages, what="ring_parity"))
                if got is None:
                    c.fail(f"tile {i}, {stages} stages: a pair (full parity, empty parity)")
                fp, ep = got
                # the producer may refill stage s once the consumers released it for tile i - stages: its wait
                # must not pass before that release (a race) and must pass after it (else a deadlock)
                if i >= stages and _wait_passes(released[s] - 1, ep):
                    c.fail(f"{stages} stages, tile {i}: the producer's wait on empty[{s}] (parity {ep}) passes "
                           "before the consumers released the stage", hint=_ring_hint(i, stages, got),
                           detail="    the producer would overwrite a tile still being read: a race")
                if not _wait_passes(released[s], ep):
                    c.fail(f"{stages} stages, tile {i}: the producer waits on empty[{s}] for parity {ep}",
                           detail=f"    empty[{s}] has completed {released[s]} phases, so it is in phase "
                                  f"{released[s]} (parity {released[s] % 2}); a wait for parity {ep} blocks "
                                  "forever: deadlock", hint=_ring_hint(i, stages, got))
                filled[s] += 1  # the tile lands
                if not _wait_passes(filled[s], fp) or _wait_passes(filled[s] - 1, fp):
                    c.fail(f"{stages} stages, tile {i}: the consumer waits on full[{s}] for parity {fp}",
                           detail=f"    tile {i} is the completion of phase {filled[s] - 1} of full[{s}] "
                                  f"(parity {(filled[s] - 1) % 2})", hint=_ring_hint(i, stages, got))
                released[s] += 1
            c.ok(f"{stages} stage{'s' if stages > 1 else ''}: {n} tiles stream through without a deadlock or race")


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


def _ring_hint(i: int, stages: int, got: tuple[int, int]) -> str:
    use = i // stages
    if got == (i % 2, (i % 2) ^ 1) or got[0] == i % 2:
        return "stage s is reused every `stages` tiles: count uses of the stage (i // stages), not tiles"
    if got[1] == use % 2:
        return ("the producer's first wait is on a fresh empty barrier that nobody has arrived on: wait for "
                "parity 1 then (the phase before phase 0 counts as complete), i.e. flip the full parity")
    return "the k-th use of a stage (k = i // stages) waits for phase k of full[s] and phase k - 1 of empty[s]"


# ---------------------------------------------------------------------------------------------------------
# Exercise 5: stream many tiles through a two-stage buffer (row sums of a wide matrix)
# ---------------------------------------------------------------------------------------------------------
def stream_reference(a_bits: np.ndarray) -> np.ndarray:
    """Row sums (fp32) of a bf16 matrix given as its uint16 bit patterns (small integers: sums are exact)."""
    import ml_dtypes

    return a_bits.view(ml_dtypes.bfloat16).astype(np.float64).sum(axis=1).astype(np.float32)


def _int_bf16(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    import ml_dtypes

    vals = rng.integers(-8, 9, size=(rows, cols)).astype(np.float32)
    return vals.astype(ml_dtypes.bfloat16).view(np.uint16)


def _run_row_sums(c: grading.Check, kernel: Any, what: str, timeout: float = 30.0) -> None:
    from helpers import gpu

    rng = grading.fresh_rng()
    rows, n_tiles = 64 * int(rng.integers(1, 5)), int(rng.integers(5, 13))
    a = _int_bf16(rng, rows, 64 * n_tiles)
    sums = np.full(rows, np.nan, dtype=np.float32)
    (_, got) = C.run_on_gpu(kernel, rows // 64, 128, 0, gpu.TensorMapArg(a, (64, 64), swizzle=128), a, sums,
                            np.int32(n_tiles), what=what, timeout=timeout)
    c.array(f"row sums of a {rows}×{64 * n_tiles} bf16 matrix ({n_tiles} tiles per block, each stage reused "
            f"{(n_tiles + 1) // 2} times) on the GPU", got, stream_reference(a),
            hint="a sum that is off by whole tiles means a tile was read before it landed or after it was "
                 "overwritten: check the parities and who arrives on empty[s]")


def check_stream_kernel(source: str) -> None:
    """The ``row_sums`` kernel: tiles stream through two stages, full/empty barriers reused across phases."""
    from helpers import gpu

    with grading.check("Lab 2 · two-stage stream") as c:
        k = C.compile_student(HEADER + source, "row_sums", what="row_sums (with your mbarrier wrappers)")
        c.ok("compiles for sm_90a")
        ops = [i.opcode for i in C.inline_asm(k.ptx, "row_sums")]
        for needle, words, hint in (
            ("cp.async.bulk.tensor", "loads tiles with TMA", "thread 0 issues hopper::tma_load_2d into tile[s]"),
            ("mbarrier.expect_tx", "announces the bytes with your my_mbar_expect_tx",
             "before each load: my_mbar_expect_tx(&full[s], TILE_BYTES) then my_mbar_arrive(&full[s])"),
            ("mbarrier.try_wait.parity", "waits on phase parities", "HOPPER_WAIT(full, s, parity)"),
        ):
            c.true(f"row_sums {words}", any(o.startswith(needle) for o in ops), hint=hint)
        if gpu.skip_without_hopper(k, checked="it compiles and uses TMA, expect_tx and parity waits"):
            return
        _run_row_sums(c, k, "row_sums")


# ---------------------------------------------------------------------------------------------------------
# Exercise 6: bug hunt
# ---------------------------------------------------------------------------------------------------------
BUGGY_ROW_SUMS = r"""
// Row sums through a two-stage ring, written with the course header. It hangs. Why?
constexpr int BM = 64, BK = 64, STAGES = 2, THREADS = 128;
constexpr unsigned TILE_BYTES = BM * BK * sizeof(float);

extern "C" __global__ void __launch_bounds__(THREADS) row_sums(const __grid_constant__ CUtensorMap a_map,
                                                              const unsigned short* a, float* sums, int n_tiles) {
  __shared__ alignas(1024) unsigned short tile[STAGES][BM * BK];
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];
  __shared__ float part[2][BM];
  const int t = threadIdx.x, row0 = blockIdx.x * BM, r = t % BM, half = t / BM;
  if (t == 0) {
    for (int s = 0; s < STAGES; ++s) {
      hopper::mbar_init(&full[s], 1);
      hopper::mbar_init(&empty[s], THREADS);
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();
  float acc = 0.f;
  for (int i = 0; i < n_tiles; ++i) {
    const int s = i % STAGES;
    const unsigned use = i / STAGES;
    if (t == 0) {
      HOPPER_WAIT(empty, s, (use & 1) ^ 1);
      hopper::mbar_arrive_expect_tx(&full[s], TILE_BYTES);
      hopper::tma_load_2d(tile[s], &a_map, &full[s], i * BK, row0);
    }
    HOPPER_WAIT(full, s, use & 1);
    for (int c = 32 * half; c < 32 * half + 32; ++c) acc += __uint_as_float(unsigned(tile[s][r * BK + c]) << 16);
    hopper::mbar_arrive(&empty[s]);
  }
  part[half][r] = acc;
  __syncthreads();
  if (t < BM) sums[row0 + t] = part[0][t] + part[1][t];
}
"""

#: What the bug hunt's multiple choice offers.
BUG_CHOICES = {
    "a": "the producer waits on empty[s] with the wrong parity, so its very first wait never passes",
    "b": "full[s] expects more bytes than one TMA load delivers, so its transaction count never reaches zero",
    "c": "the consumers never arrive on empty[s], so the producer cannot refill a stage",
    "d": "the tensor map's box is wider than the 128B swizzle allows, so the load is refused",
}


def emulate_protocol(source: str, n_tiles: int = 4, threads: int = 128) -> str | None:
    """Play the barrier protocol of a row_sums kernel on the reference barrier model, for one block.

    Reads TILE_BYTES from the source (what full[s] expects) against the 8192 bytes a 64×64 bf16 box delivers.
    Returns None when every tile streams through, else the deadlock report in the GPU runtime's words.
    """
    from helpers.gpu.diagnostics import StuckRecord

    expected = _tile_bytes(source)
    delivered, stages = 64 * 64 * 2, 2
    count = {"full": 1, "empty": threads}
    state = {(name, s): [0, count[name], 0] for name in count for s in range(stages)}  # phases, pending, tx

    def apply(name: str, s: int, arrivals: int = 0, tx: int = 0) -> None:
        st = state[(name, s)]
        st[2] += tx
        st[1] -= arrivals
        if st[1] == 0 and st[2] == 0:
            st[0], st[1], st[2] = st[0] + 1, count[name], 0

    def passes(name: str, s: int, parity: int) -> bool:
        return _wait_passes(state[(name, s)][0], parity)

    for i in range(n_tiles):
        s, use = i % stages, i // stages
        if not passes("empty", s, (use & 1) ^ 1):
            return StuckRecord((use & 1) ^ 1, s, 0, (0, 0, 0), 0, 0, int(2e9), "empty").sentence()
        apply("full", s, arrivals=1, tx=expected)
        apply("full", s, tx=-delivered)  # the TMA load lands
        if not passes("full", s, use & 1):
            return StuckRecord(use & 1, s, 0, (0, 0, 0), 0, 0, int(2e9), "full").sentence()
        apply("empty", s, arrivals=threads)
    return None


def _tile_bytes(source: str) -> int:
    import re

    m = re.search(r"TILE_BYTES\s*=\s*([^;]+);", source)
    if not m:
        raise grading.CheckFailed("❌ the kernel no longer defines TILE_BYTES")
    expr = m.group(1)
    for name, val in (("BM", 64), ("BK", 64), ("sizeof(float)", 4), ("sizeof(unsigned short)", 2),
                      ("sizeof(__nv_bfloat16)", 2), ("sizeof(short)", 2), ("sizeof(uint16_t)", 2)):
        expr = expr.replace(name, str(val))
    if not re.fullmatch(r"[\d\s*+()u]+", expr):
        raise grading.CheckFailed(f"❌ TILE_BYTES = {m.group(1)}: write it from BM, BK and a sizeof")
    return int(eval(expr.replace("u", "")))  # noqa: S307 - digits and * + ( ) only


def show_deadlock(source: str) -> None:
    """Run the kernel (on an H100, isolated) or play its barrier protocol (without one), and print the report."""
    from helpers import gpu

    k = gpu.compile("#define HOPPER_WAIT_BUDGET 200000000LL\n" + HEADER + source, "row_sums")
    if gpu.hopper_available():
        a = _int_bf16(np.random.default_rng(0), 64, 64 * 6)
        try:
            gpu.run_isolated(k, 1, 128, 0, gpu.TensorMapArg(a, (64, 64), swizzle=128), a,
                             np.zeros(64, np.float32), np.int32(6), timeout=30)
            print("the kernel finished: no deadlock")
        except gpu.GpuError as exc:
            print(f"on the H100: {exc}")
        return
    report = emulate_protocol(source)
    print(f"{k.report.summary()}; no GPU here, so the barrier protocol was played on the emulator:")
    print(report or "every tile streamed through: no deadlock")


def check_bug_diagnosis(diagnosis: Callable[[], str]) -> None:
    """The multiple choice: ``diagnosis()`` -> the letter of the reason BUGGY_ROW_SUMS hangs."""
    with grading.check("Lab 2 · bug hunt: the diagnosis") as c:
        answer = grading.call_student(diagnosis, what="diagnosis")
        a = str(answer).strip().lower()
        if a not in BUG_CHOICES:
            c.fail("an answer among a, b, c, d", "one of 'a', 'b', 'c', 'd'", answer,
                   hint="set diagnosis to the letter of the explanation you believe")
        hints = {
            "a": "empty[s] is waited on with (use & 1) ^ 1, which passes on a fresh barrier; and the report names "
                 "full, not empty",
            "c": "every thread calls hopper::mbar_arrive(&empty[s]) after reading the tile; and the report names "
                 "full[0], the first tile's barrier",
            "d": "the box is 64 bf16 = 128 bytes wide, exactly the 128B swizzle span; a refused map would fail at "
                 "launch, not hang at a wait",
        }
        c.equal("the explanation", a, "b", hint=hints.get(a, ""))
        c.ok(BUG_CHOICES["b"])


def check_bug_fix(fix: Callable[[str], str]) -> None:
    """``fix(source)`` -> the repaired kernel source: it must stream every tile (emulator), and on an H100 give
    exact row sums."""
    from helpers import gpu

    with grading.check("Lab 2 · bug hunt: the fix") as c:
        fixed = grading.call_student(fix, BUGGY_ROW_SUMS, what="fix")
        c.true("fix() returns the kernel source", isinstance(fixed, str) and "row_sums" in fixed,
               hint="return the corrected source text")
        k = C.compile_student(HEADER + fixed, "row_sums", what="the fixed kernel")
        c.ok("compiles for sm_90a")
        txs = [i for i in C.find_instrs(k.ptx, "mbarrier.arrive.expect_tx", "row_sums")]
        c.true("still announces the bytes with arrive.expect_tx", bool(txs),
               hint="keep hopper::mbar_arrive_expect_tx(&full[s], TILE_BYTES)")
        got = C.resolve(k.ptx, C.split_operands(txs[0].operands)[-1])
        c.equal("bytes full[s] expects per tile (read from the PTX)", got, str(64 * 64 * 2),
                hint="a 64×64 box of bf16 is 64 × 64 × 2 bytes: the barrier must expect exactly what the TMA "
                     "delivers")
        report = emulate_protocol(fixed, n_tiles=int(grading.fresh_rng().integers(5, 12)))
        c.true("the barrier protocol streams every tile on the emulator", report is None, detail=f"    {report}")
        if gpu.skip_without_hopper(k, checked="the bytes expected, and the protocol on the emulator"):
            return
        _run_row_sums(c, k, "the fixed row_sums")
