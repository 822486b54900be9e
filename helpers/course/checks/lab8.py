"""Graders of Lab 8 (ping-pong: two consumer warpgroups, each with a tile of its own, taking turns through an ordered
sequence barrier): the sequence barrier's cursor (exactly, on every ring depth), and the CUDA kernel (compiled and read
in its PTX everywhere: the slots' participant count, every wgmma and every epilogue write entered in turn, the
mainloop handed on before its last wgmma retires; run against fp64 wherever kernels run: on the H100 on every
co-resident cluster, on the course's PTX executor in hazard mode on two clusters with several tiles per consumer,
where the executor's work log must show every 64×64 sub-tile of C stored once by the block the schedule gives it and
every wgmma product computed once by that block's consumer whose tile it is, and its trace the two consumers'
mainloops and epilogues alternating, one at a time; on the H100 the first emulator shape also runs on the executor
beside the GPU; timed on the H100 only beside Lab 7, the cooperative kernel, the course's Lab 8 kernel (the speed
floor) and cuBLAS on square and short-K shapes).

Units: a *pair* is the 256×BN block of C a 2-block cluster computes (block r: rows 128·r … of it, BN = 128); the
pairs of a cluster go to its consumers in turn, tile j of a block to consumer j % 2.

The kernel graded is the student's own: their Lab 7 kernel (read from lab7_clusters.ipynb beside this notebook, put
together with their Labs 6, 5 and 4 as Lab 7 graded it, and checked quickly with Lab 7's check; the course's Lab 7
kernel stands in where theirs is missing or does not pass) merged with this lab's change and their Lab 8 regions
(:mod:`helpers.course.carry`), after their wrappers of Labs 1 and 2. The course's Lab 8 kernel
(bench/kernels/lab8_pingpong.cu) is the measured one, timed beside the student's for the speed floor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from helpers.course import carry, grading
from helpers.course.hints import answer, hint
from helpers.hopper import seqbar

from . import _common as C
from . import lab5, lab7
from ._ptxflow import Flow, Ins
from ._record import Protocol, Ring, Turns
from .lab5 import HEADER

__all__ = [
    "KERNEL_NAME", "SMEM_BYTES", "LAUNCH", "BN", "SQUARE", "SHORT_K", "check_cursor", "check_pingpong_kernel",
    "ptx_order", "sections", "order_problems", "emulator_cases", "previous", "opening", "timeline", "stamped",
    "lab8_source", "lab7_source", "measured", "MEASURED", "ladder_rows", "show_ladder", "hint", "answer",
]

ROOT = Path(__file__).resolve().parents[3]
KERNEL_NAME = "lab8_gemm"
BN = 128  # columns of a consumer's tile (LAB8_BN)
STAGES = 6  # what fits beside the epilogue buffers with 32 KiB stages
SMEM_BYTES = STAGES * (128 * 64 + BN * 64) * 2 + 2 * 2 * 64 * 64 * 2 + 1024  # stages, 2 × 2 C buffers, slack
#: how the lab's kernel is launched (bench/ladder.py's make_lab8 is the same): a persistent grid of 2-block clusters
LAUNCH = C.GemmLaunch(KERNEL_NAME, 384, SMEM_BYTES, (128, 64), (BN // 2, 64), (64, 64), out_bf16=True, cluster=2,
                      persistent_unit=(256, BN))
SQUARE = [(4096, 4096, 4096), (8192, 8192, 8192)]
SHORT_K = [(8192, 8192, 512), (4096, 4096, 1024)]


def lab8_source() -> str:
    """The Lab 8 reference kernel (bench/kernels/lab8_pingpong.cu)."""
    return (ROOT / "bench" / "kernels" / "lab8_pingpong.cu").read_text()


def lab7_source() -> str:
    """The Lab 7 kernel (the cooperative one: both consumers on one tile), the step this lab starts from."""
    return (ROOT / "bench" / "kernels" / "lab7_clusters.cu").read_text()


# =========================================================================================================
# the kernel graded: your Lab 7 kernel with this lab's change
# =========================================================================================================
def _course_lab7() -> str:
    """The course's Lab 7 kernel cell (its solution), as the course's data holds it."""
    return C.course_kernel("lab7")


def _lab7_check(wrappers: str) -> Callable[[str], None]:
    """Lab 7's check of its whole kernel, quick: the compile report, the clusters and the epilogue read from the
    PTX, then a run on the course's PTX executor in hazard mode (on any machine; no timing)."""

    def check(kernel: str) -> None:
        with C.emulated():
            lab7.check_cluster_kernel(HEADER + wrappers + kernel, benchmark=False, carried=False)

    return check


def previous(wrappers: str) -> carry.Previous:
    """What Lab 8 builds on: your Lab 7 kernel (``LAB7_SRC`` of lab7_clusters.ipynb, put together with your Labs 6, 5
    and 4 as Lab 7 graded it), checked with Lab 7's check on ``wrappers``; the course's Lab 7 kernel stands in where
    yours does not pass."""

    def whole(text: str, here: Any) -> str:
        return lab7._carried(text, wrappers, here, quiet=True)[0].kernel

    return carry.Previous("Lab 7", "lab7_clusters.ipynb", "LAB7_SRC", _course_lab7, _lab7_check(wrappers), wrappers,
                          whole=whole)


def _carried(source: str, wrappers: str | None, here: Any, quiet: bool) -> tuple[carry.Carried, str]:
    """(the merge, the whole source to compile): your Lab 7 kernel (or the course's), this lab's change and your
    regions, after your wrappers."""
    if wrappers is None:
        wrappers = lab5.carry_wrappers(checked=False)
    made = carry.carried(previous(wrappers), source, here=here, quiet=quiet)
    return made, HEADER + wrappers + made.kernel


def _whole(source: str, wrappers: str | None, here: Any, carried: bool) -> str:
    return _carried(source, wrappers, here, quiet=True)[1] if carried else source


def opening(source: str, *, wrappers: str | None = None, here: Any = None) -> C.Opening:
    """The kernel this lab grades, as a diff from your Lab 7 kernel (read from lab7_clusters.ipynb beside this
    notebook, with your Labs 6, 5 and 4 under it, and checked with Lab 7's check; the course's stands in where yours
    is missing or does not pass): your Lab 7 code, this lab's change and your regions as the cell holds them. The
    first line says whose Lab 7 kernel it is; then any lines of yours this lab rewrote; then the course's Lab 7
    kernel's measured speed."""
    from helpers.course.widgets.roofline import ladder

    if wrappers is None:
        wrappers = lab5.carry_wrappers(checked=True)
    made, _ = _carried(source, wrappers, here, quiet=True)
    lines = [made.previous.line] + [f"⚠ {line}" for line in made.merge.report()]
    for size in (4096, 8192):
        row = next((m for key, _, m in ladder(size) if key == "lab7"), None)
        lines.append(f"the course's Lab 7 kernel (cooperative) at {size}³: {row or 'not measured yet'}")
    old = "your Lab 7 kernel" if made.previous.yours else "the course's Lab 7 kernel"
    diff = C.source_diff(made.previous.text, made.kernel, f"{old} (Lab 7)",
                         f"Lab 8: the kernel graded ({old} + this lab's change + your regions)", indent=False)
    return C.Opening(f"What Lab 8 changes in {old}", lines, diff)


# =========================================================================================================
# 1 · the cursor
# =========================================================================================================
def _cursor_hint(got: tuple[int, int], index: int, phase: int, depth: int) -> str:
    nxt = index + 1
    if nxt == depth and got == (0, phase):
        return ("the index wrapped but the phase did not flip: on its next lap the group would wait for a phase of "
                "the slot that completed a lap ago, and enter out of turn (a slot reused a lap early)")
    if got == (nxt % depth, phase ^ 1):
        return "the phase flips only when the index wraps around the ring, not at every step"
    if nxt == depth and got[0] == depth:
        return f"index {depth} is past the ring's last slot ({depth - 1}): wrap to 0"
    if nxt == depth - 1 and got == (0, phase ^ 1):
        return "you wrapped one slot early: the ring has `depth` slots, 0 … depth - 1"
    return "the next slot; when the index reaches depth it goes back to 0 and the phase flips"


def check_cursor(advance: Callable[[int, int, int], tuple[int, int]], *, seed: int | None = None) -> None:
    """Grade ``advance(index, phase, depth) -> (index, phase)``: every slot and phase of rings of depth 1 to 4, then
    random deeper rings, against the model's :class:`helpers.hopper.seqbar.Cursor`."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 8 · the sequence barrier's cursor", seed=rng.seed) as c:
        cases = [(i, p, d) for d in (2, 1, 3, 4) for i in range(d) for p in (0, 1)]
        cases += [(int(rng.integers(0, d)), int(rng.integers(0, 2)), d) for d in rng.integers(5, 17, size=8)]
        for n, (index, phase, depth) in enumerate(cases):
            what = f"advance(index={index}, phase={phase}, depth={depth})"
            got = C.call(c, what, advance, index, phase, depth)
            want = seqbar.Cursor(index, phase).advance(depth)
            try:
                got_t = tuple(int(x) for x in got)
            except (TypeError, ValueError):
                c.fail(what, (want.index, want.phase), got, hint="return the pair (index, phase)")
            if len(got_t) != 2:
                c.fail(what, (want.index, want.phase), got, hint="return the pair (index, phase)")
            if got_t != (want.index, want.phase):
                c.fail(what, (want.index, want.phase), got_t, hint=_cursor_hint(got_t, index, phase, depth))
            if n == 2 * 2 - 1:
                c.ok("the depth-2 ring of the kernel (mainloop, epilogue): both slots, both phases")
        c.ok(f"rings of depth 1, 3 and 4 (every slot, both phases) and {len(cases) - 20} random deeper ones")


# =========================================================================================================
# 2 · the kernel: its PTX
# =========================================================================================================
def _order_ops(flow: Flow) -> tuple[list[Ins], list[Ins], list[Ins]]:
    """The mbarrier inits, waits and arrivals on the sequence barrier (a shared variable named ``order``)."""
    def on_order(ins: Ins) -> bool:
        addr = next((o for o in ins.ops() if o.startswith("[")), "")
        return any("order" in s for s in flow.symbols(addr))

    ops = [i for i in flow.find(lambda i: i.opcode.startswith("mbarrier.")) if on_order(i)]
    inits = [i for i in ops if i.opcode.startswith("mbarrier.init")]
    waits = [i for i in ops if i.opcode.startswith(("mbarrier.try_wait", "mbarrier.test_wait"))]
    arrives = [i for i in ops if i.opcode.startswith("mbarrier.arrive")]
    return inits, waits, arrives


def _is_epilogue_write(ins: Ins) -> bool:
    return ins.opcode.startswith("st.shared") or (ins.opcode.startswith("cp.async.bulk.tensor")
                                                  and ".global.shared" in ins.opcode)


def _depends_on_thread(flow: Flow, predicate: str) -> bool:
    """Whether a predicate register is computed from the thread's index (%tid, %laneid, %warpid), through the
    setp that sets it."""
    regs = set(flow.registers(predicate))
    for ins in flow.ins:
        if ins.opcode.startswith("setp") and ins.ops() and predicate in ins.ops()[0].split("|"):
            for op in ins.ops()[1:]:
                regs |= flow.registers(op)
    return any(r.startswith(("%tid", "%laneid", "%warpid")) for r in regs)


def ptx_order(ptx: str, source: str = "") -> list[tuple[str, bool, str]]:
    """Static checks of the sequence barrier in the kernel's PTX: (what, passed, hint), in order."""
    flow = Flow(ptx, KERNEL_NAME)
    inits, waits, arrives = _order_ops(flow)
    wait_set = {i.index for i in waits}
    out: list[tuple[str, bool, str]] = []
    counts = {str(flow.evaluate(i.ops()[-1], {"%ntid.x": 384, "%ntid.y": 1, "%ntid.z": 1})) for i in inits}
    out.append(("the sequence barrier's slots are initialised (mbarrier.init on order)", bool(inits),
                "init every slot of order[] in the block's set-up, before the cluster barrier"))
    if inits:
        why = ("a phase completes when the warpgroup that leaves the section has arrived: every one of its 128 "
               "threads arrives once, so the participant count is 128")
        if counts == {"1"}:
            why = ("a count of 1 completes a phase at the first thread's arrival: the other 127 arrivals run the "
                   "slot on by 127 more phases. " + why)
        out.append(("each slot counts a whole warpgroup's arrivals (participant count 128)", counts == {"128"}, why))
    out.append(("the consumers wait (mbarrier.try_wait on order) and arrive on the sequence barrier",
                bool(waits) and bool(arrives), "OrderCursor::wait and OrderCursor::arrive, called by both consumers"))
    if not (waits and arrives):
        return out
    starts: list[int | None] = [None, *[i.index for i in arrives]]
    mma = flow.reach(starts, lambda i: i.opcode.startswith("wgmma.mma_async"), lambda i: i.index in wait_set)
    out.append(("every wgmma is issued in turn: none is reachable from the start or from a hand-off without a wait "
                "on order", mma is None,
                f"{flow.where(mma, source) if mma else ''}: wait for the mainloop's turn (seq.wait()) before the K "
                "loop; without it both consumers' mainloops can run at once"))
    epi = flow.reach(starts, _is_epilogue_write, lambda i: i.index in wait_set)
    out.append(("every epilogue write happens in turn: none is reachable from a hand-off without a wait on order",
                epi is None,
                f"{flow.where(epi, source) if epi else ''}: the epilogue is the second section: seq.wait() before "
                "its first sub-tile, or both consumers can be in the epilogue together"))
    mmas = [i.index for i in flow.ins if i.opcode.startswith("wgmma.mma_async")]
    late = flow.reach(mmas, lambda i: i.opcode.startswith("wgmma.wait_group") and i.ops()[:1] == ["0"],
                      lambda i: i.index in {a.index for a in arrives})
    skipped = late is not None and any(max(mmas) < a.index < late.index for a in arrives)
    why = ("arrive right after the K loop, before wgmma_wait<0>: the other consumer's wgmmas then follow yours on the "
           "tensor cores while yours finish; waiting first leaves the tensor cores idle")
    by_thread = skipped and late is not None and any(
        ins.guard and _depends_on_thread(flow, ins.guard.lstrip("!")) for ins in flow.ins[max(mmas):late.index])
    if by_thread:
        why = ("some threads skip the arrive (it is under a condition on the thread's index): every thread of the "
               "warpgroup arrives, the slot counts 128 arrivals, and with fewer its phase never completes: the other "
               "consumer waits forever")
    elif skipped:
        why = ("on some path from the last wgmma to wgmma_wait<0> the arrive is not passed (it is under a condition, "
               "or in a branch the other path skips): every thread of the warpgroup arrives on every path, before "
               "wgmma_wait<0> (the slot counts 128 arrivals; were some threads never to arrive, its phase would not "
               "complete and the other consumer would wait for it)")
    out.append(("the mainloop is handed on as soon as its last wgmma is issued, by every thread (an arrive before "
                "wgmma_wait<0> on every path)", late is None, why))
    return out


# =========================================================================================================
# 3 · the kernel: the run, and the order the trace shows
# =========================================================================================================
def sections(trace: Any, epilogue: tuple[str, ...] = ("store_issue",)
             ) -> dict[tuple[int, ...], dict[str, list[tuple[int, int, int, int]]]]:
    """Per block of an executor trace (or an H100 stamp trace), the runs of each kind of work by consumer:
    ``{"mainloop": [...], "epilogue": [...]}``, each run ``(consumer, first time, last time, events)``: wgmma issues
    for the mainloop, TMA stores (event kinds ``epilogue``) for the epilogue. A run ends where the other consumer's
    event of the same kind comes."""
    out: dict[tuple[int, ...], dict[str, list[tuple[int, int, int, int]]]] = {}
    for cta in trace.blocks():
        runs: dict[str, list[list[int]]] = {"mainloop": [], "epilogue": []}
        for e in trace.block(cta).events:
            if e.warp < 4 or (e.kind != "wgmma_issue" and e.kind not in epilogue):
                continue
            kind = "mainloop" if e.kind == "wgmma_issue" else "epilogue"
            g = e.warp // 4 - 1
            r = runs[kind]
            if r and r[-1][0] == g:
                r[-1][2], r[-1][3] = e.time, r[-1][3] + 1
            else:
                r.append([g, e.time, e.time, 1])
        out[tuple(cta)] = {k: [tuple(x) for x in v] for k, v in runs.items()}
    return out


def _tiles_of(m: int, n: int, cta: int, clusters: int) -> int:
    pairs = math.ceil(m / 256) * math.ceil(n / BN)
    cluster = cta // 2
    return max(0, -(-(pairs - cluster) // clusters))


def order_problems(secs: dict, m: int, n: int, clusters: int) -> list[str]:
    """What the trace's runs break: consumer 0 first, the two in turn, one run per tile (a run cut in two means
    the other consumer's work of the same kind came in between: the two were in that section together)."""
    problems = []
    for cta, kinds in secs.items():
        tiles = _tiles_of(m, n, cta[0], clusters)
        for kind, runs in kinds.items():
            who = [g for g, *_ in runs]
            if runs and who[0] != 0:
                problems.append(f"block {cta[0]}: consumer 1 ran the first {kind} (cycle {runs[0][1]}): the order is "
                                "inverted, consumer 0 holds the first turn")
            elif len(runs) > tiles:
                cut = next((i for i in range(1, len(runs) - 1) if runs[i + 1][0] == runs[i - 1][0]), 1)
                g, start = runs[cut][0], runs[cut][1]
                problems.append(f"block {cta[0]}: the two consumers were in the {kind} together: {len(runs)} runs of "
                                f"{kind} work for {tiles} tiles (consumer {g}'s at cycle {start} cut into the other's)")
            elif len(runs) < tiles:
                problems.append(f"block {cta[0]}: {len(runs)} runs of {kind} work for {tiles} tiles: a consumer ran "
                                "two tiles' worth back to back, the turns do not alternate")
            if problems:
                break
    return problems


def _pingpong_trial(source: str, cases: list[tuple[np.ndarray, np.ndarray]]) -> dict:
    """(Runs in the isolated child on the H100, in this process on the executor.) C poisoned, the kernel on each
    case; on the executor also the trace's runs of mainloop and epilogue work and the launch's work log
    (``"work"``: Launched, None on the GPU)."""
    from helpers import gpu

    kernel = gpu.compile(source, KERNEL_NAME)
    outs, secs, work = [], [], []
    for a, b in cases:
        da, db = gpu.to_device(a), gpu.to_device(b)
        dc = gpu.poison((a.shape[0], b.shape[0]), gpu.bfloat16)
        launch = LAUNCH.launcher(kernel, da, db, dc)
        if gpu.executor_active():
            from helpers.gpu import executor
            from helpers.gpu.executor import executor_options, runtime
            from helpers.gpu.executor.trace import Trace

            from ._work import Launched

            with executor_options(trace=True):
                launch()
            secs.append(sections(Trace.from_machine(runtime.LAST)))
            last = executor.last_run()
            work.append(Launched(last.work if last is not None else None, int(da.ptr), int(db.ptr), int(dc.ptr)))
        else:
            launch()
            gpu.wait()
            secs.append(None)
            work.append(None)
        outs.append(dc.to_host())
    return {"outs": outs, "sections": secs, "work": work}


#: clusters of a run on the course's PTX executor (C.EMULATED_CLUSTERS)
EMULATED_CLUSTERS = C.EMULATED_CLUSTERS


def emulator_cases(rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """Shapes for the PTX executor (two clusters): 520×392×400 has 3 × 4 pairs (6 per cluster, 3 tiles per consumer),
    partial tiles in M, N and K, and 7 K steps, one more than the ring's 6 stages (a consumer that enters out of
    turn then waits on a stage a lap ahead); then a random shape with 2 or 3 tiles per consumer and 1 to 3 K steps
    (an epilogue as long as the mainloop)."""
    shapes = [(520, 392, 400)]
    while len(shapes) < 2:
        pm, pn = int(rng.integers(2, 4)), int(rng.integers(2, 4))
        m = 256 * pm - 8 * int(rng.integers(0, 16))
        n = BN * pn - 8 * int(rng.integers(0, 8))
        k = 8 * int(rng.integers(2, 25))
        if pm * pn >= 4 and len({m, n, k}) == 3:
            shapes.append((m, n, k))
    return shapes


def _gpu_cases(rng: np.random.Generator) -> list[tuple[int, int, int]]:
    shapes = [(2056, 1160, 4104), (1032, 3080, 520)]
    while len(shapes) < 4:
        m, n, k = (8 * int(x) for x in rng.integers(16, 640, size=3))
        if len({m, n, k}) == 3:
            shapes.append((m, n, k))
    return shapes


def _tolerance(a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> np.ndarray:
    acc = grading.gemm_tolerance(a, b.astype(np.float64).T)
    return acc + (np.abs(ref) + acc) * 2.0**-8  # fp32 accumulation, then bf16 rounding (half an ulp)


def _result_hint(got: np.ndarray, ref: np.ndarray, tol: np.ndarray, m: int, n: int) -> str:
    bad = np.isnan(got) | (np.abs(got - ref) > tol)
    rows = sorted({int(r) // 128 for r in np.argwhere(bad)[:, 0]})
    if np.isnan(got[bad]).all():
        return (f"NaN: tiles never written (tile rows {rows[:6]} of 128): every tile of the cluster goes to one "
                "consumer, j = c, c + 2, …, and every consumer runs its epilogue")
    return ("wrong values: a consumer read a stage of another tile — tile j's K steps are ring positions "
            "j·steps … j·steps + steps - 1 — or entered its mainloop out of turn")


def _work_owners(m: int, n: int, clusters: int) -> tuple[Any, Any, Any, Any]:
    """The ping-pong schedule, for the work check: (the pair holding an element, in words; the block that stores a
    64×64 sub-tile of C; the block that computes a product; the consumer warpgroup, 1 or 2, that computes it).
    Cluster c takes pairs c, c + clusters, … of the grouped order (LAB8_GROUP = 8); its j-th pair is the block's
    tile j, which goes to consumer j % 2 (warpgroup 1 + j % 2); block rank r takes rows 128·r of the pair."""
    from helpers.hopper import scheduler

    pm, pn = math.ceil(m / 256), math.ceil(n / BN)
    order = {(int(a), int(b)): p for p, (a, b) in enumerate(scheduler.grouped(pm, pn, 8))}

    def pair(row: int, col: int) -> int:
        return order[(row // 256, col // BN)]

    def words(row: int, col: int) -> str:
        p = pair(row, col)
        j = p // clusters
        return (f"pair {p}, which the schedule gives cluster {p % clusters} as its tile {j}: consumer {j % 2}, "
                f"warpgroup {1 + j % 2}")

    def owner(row: int, col: int, *_: int) -> tuple[int, int]:
        return (2 * (pair(row, col) % clusters) + (row % 256) // 128, 0)

    def group(row: int, col: int) -> int:
        return 1 + (pair(row, col) // clusters) % 2

    return words, owner, owner, group


_WORK_HINT = ("cluster c takes pairs c, c + clusters, c + 2·clusters, … (the pair p = cluster_id + j·clusters is "
              "the block's tile j); block rank r computes and stores rows 128·r … of the pair; tile j goes to "
              "consumer j % 2, which computes and stores it once: consumer c's pairs start at cluster_id + "
              "c·clusters and step by CONSUMERS·clusters")


def _check_consumers(c: grading.Check, run: Any, *, label: str, words: Callable[[int, int], str],
                     group: Callable[[int, int], int]) -> None:
    """Each wgmma product computed by the consumer warpgroup the schedule gives its tile (the work log records the
    warpgroup of every wgmma; the TMA stores it records by block only)."""
    from ._work import block_words

    mmas = [x for x in run.log.mmas if x.a == run.a and x.b == run.b]
    for x in mmas:
        want = group(x.a_row, x.b_row)
        if x.warpgroup != want:
            c.fail(f"{label}: the product of A rows {x.a_row}–{x.a_row + 63} and B rows {x.b_row}–{x.b_row + x.n - 1} "
                   f"over K {x.k}–{x.k + 15} ({words(x.a_row, x.b_row)}) was computed by warpgroup {x.warpgroup} "
                   f"(consumer {x.warpgroup - 1}) of {block_words(x.block.ctaid[:2], 2)}; the schedule gives that "
                   f"tile to consumer {want - 1}",
                   hint=_WORK_HINT)
    c.ok(f"{label}: each of the {len(mmas)} wgmmas issued by the consumer whose tile it is (tile j of a block: "
         "consumer j % 2)")


#: the protocol Lab 8 teaches: each fill of a CTA's ring is read by one consumer (the one whose tile it is) and
#: released by it on both CTAs of the cluster; the consumers (warpgroups 1 and 2) take sections in turn through
#: order[section · 2 + consumer], consumer 0 first, ORDER_DEPTH = 2 sections (the mainloop, the epilogue)
PROTOCOL = Protocol(ring=Ring(readers=1), turns=Turns(barrier="order", groups=(1, 2), depth=2, first=0), cluster=2)
_RING_HINT = ("a stage is read by one consumer, in each CTA of the cluster, and released by it on both CTAs once: a "
              "tile's K steps are ring positions it = j · nk …, its wait on full[it % STAGES] names (it / STAGES) & 1; "
              "count the releases of one tile, its first K step and the stage after its K loop included")
_TURNS_HINT = ("seq.wait() waits on order[index · CONSUMERS + group] for the cursor's phase; seq.arrive() arrives on "
               "order[index · CONSUMERS + (group + 1) % CONSUMERS] first, and only then moves the index on (the phase "
               "flips when it wraps)")


def _trial(c: grading.Check, source: str, rng: np.random.Generator, shapes: list[tuple[int, int, int]]) -> None:
    """Run the kernel on ``shapes`` (C poisoned) where the run path runs it and grade C against fp64; on the executor
    (hazard mode) also the ring's releases (every stage released once per fill), the work (every sub-tile of C stored
    once, by the block the schedule gives it; every wgmma product once, by its block and its consumer) and the
    trace's order (the consumers in turn)."""
    from ._record import check_protocol
    from ._work import check_releases, check_work

    cases = [C.make_operands(rng, m, n, k) for m, n, k in shapes]
    try:
        out = C.run(_pingpong_trial, source, cases, what="your kernel", timeout=300,
                    hint="a deadlock names the slot of order[] (section · 2 + consumer) and the parity waited for: "
                         "who should have arrived there?")
    except RuntimeError as exc:
        c.fail(f"your kernel failed when it ran: {exc}")
    where = C.where()
    work = out.get("work") or [None] * len(shapes)
    for (m, n, k), (a, b), got, secs, run in zip(shapes, cases, out["outs"], out["sections"], work, strict=True):
        ref = a.astype(np.float64) @ b.astype(np.float64).T
        got64 = got.astype(np.float64)
        tol = _tolerance(a, b, ref)
        pairs = math.ceil(m / 256) * math.ceil(n / BN)
        c.array(f"{where}: {m}×{n}×{k}: {pairs} pairs of 128×{BN} tiles, {math.ceil(k / 64)} K steps, C poisoned "
                "first: every element against fp64", got64, ref, atol=tol, hint=_result_hint(got64, ref, tol, m, n))
        label = f"{where}: {m}×{n}×{k}"
        if run is not None and run.log is not None:
            check_releases(c, run, label=label, cluster=2,
                           hint="a stage is read by one consumer, in each CTA of the cluster (EMPTY takes CLUSTER "
                                "arrivals), and a tile's K steps are ring positions it = j · nk …: count the releases "
                                "of one tile, its first K step and the stage after its K loop included (every fill "
                                "this tile read, once; none of the tile before's)")
            clusters = min(pairs, EMULATED_CLUSTERS)
            words, owner, _, group = _work_owners(m, n, clusters)
            check_work(c, run, m=m, n=n, label=label, tile=LAUNCH.box_c or (64, 64), piece_of=words,
                       store_owner=owner, mma_owner=owner, cluster=2, hint=_WORK_HINT)
            _check_consumers(c, run, label=label, words=words, group=group)
            check_protocol(c, run, PROTOCOL, label=label, ring_hint=_RING_HINT, turns_hint=_TURNS_HINT)
        if secs is not None:
            problems = order_problems(secs, m, n, EMULATED_CLUSTERS)
            first = next(iter(secs.values()))
            c.true(f"{label}: the trace shows consumer 0 first, then the two in turn, one mainloop and one epilogue "
                   f"at a time ({len(first['mainloop'])} mainloops, {len(first['epilogue'])} epilogues in block 0)",
                   not problems, detail="    " + "\n    ".join(problems[:3]),
                   hint="every section is entered with seq.wait() and left with seq.arrive(); consumer 0 starts "
                        "with the phase a fresh barrier has completed")


def _speed_child(source: str, shapes: list[tuple[int, int, int]], repeat: int = 30,
                 reference: str | None = None) -> list[dict]:
    """(Runs in the isolated child.) Lab 8 (this source), Lab 7 and the course's Lab 8 kernel (``reference``, when
    given: the speed floor's) at each shape, each beside cuBLAS, in one run."""
    from helpers import gpu
    from helpers.gpu import gemm

    k8 = gpu.compile(source, KERNEL_NAME)
    k6 = gemm.course_kernel("lab7")
    kref = gpu.compile(reference, KERNEL_NAME) if reference else None
    out = []
    for m, n, k in shapes:
        r8 = gpu.gemm_benchmark(lambda a, b, c: LAUNCH.launcher(k8, a, b, c), m, n, k, out_dtype=gpu.bfloat16,
                                repeat=repeat)
        r6 = gpu.gemm_benchmark(lambda a, b, c: gemm.launcher(k6, a, b, c), m, n, k, out_dtype=gpu.bfloat16,
                                repeat=repeat)
        rr = None if kref is None else gpu.gemm_benchmark(lambda a, b, c: LAUNCH.launcher(kref, a, b, c), m, n, k,
                                                          out_dtype=gpu.bfloat16, repeat=repeat)
        out.append({"shape": (m, n, k), "lab8": r8.tflops, "lab7": r6.tflops, "cublas8": r8.cublas_tflops,
                    "cublas6": r6.cublas_tflops, "ratio8": r8.ratio, "ratio6": r6.ratio,
                    "course": rr.tflops if rr is not None else None})
    return out


def _timing(c: grading.Check, source: str) -> None:
    """(On the H100.) Your kernel timed beside Lab 7 (the cooperative kernel), the course's Lab 8 kernel
    (bench/kernels/lab8_pingpong.cu: the speed floor, ``_common.SPEED_FLOOR``) and cuBLAS, square and short-K, all in
    one run."""
    from types import SimpleNamespace

    try:
        speeds = C.run(_speed_child, source, SQUARE + SHORT_K, 30, lab8_source(), what="the timing run", timeout=500)
    except RuntimeError as exc:
        c.fail(f"the timing run failed: {exc}")
    from ._ladder import timed

    for s in speeds:
        m, n, k = s["shape"]
        timed(KERNEL_NAME)[(m, n, k) if m != n or n != k else m] = (
            SimpleNamespace(tflops=s["lab8"], cublas_tflops=s["cublas8"]),
            SimpleNamespace(tflops=s["course"]) if s["course"] else None)
        c.ok(f"{m}×{n}×{k}: Lab 8 {s['lab8']:.0f} TFLOP/s ({s['ratio8']:.2f}× cuBLAS), Lab 7 {s['lab7']:.0f} "
             f"({s['ratio6']:.2f}× cuBLAS): ping-pong / cooperative = {s['lab8'] / s['lab7']:.2f}")
        C.check_speed_floor(c, SimpleNamespace(tflops=s["lab8"]), SimpleNamespace(tflops=s["course"] or 0.0),
                            f"{m}×{n}×{k}", hint="compare your kernel with the text: a consumer that hands the "
                            "mainloop on only after wgmma_wait<0>, a section entered late, a stage released late")


def check_pingpong_kernel(source: str, *, benchmark: bool = True, seed: int | None = None,
                          wrappers: str | None = None, here: Any = None, carried: bool = True) -> None:
    """Grade the Lab 8 kernel: your Lab 7 kernel (the course's where yours does not pass Lab 7's check) with this
    lab's change and your regions from ``source`` (the LAB8_SRC cell), after your wrappers (``wrappers``; by default
    carried from your Lab 1 and 2 notebooks beside this one). ``carried=False``: ``source`` is a whole kernel, graded
    as it is (the course's bench/kernels/lab8_pingpong.cu).

    Compile it and read its sequence barrier in the PTX (:func:`ptx_order`). Wherever kernels
    run, C poisoned, against fp64: on the H100 on every co-resident cluster (random shapes), on the course's PTX
    executor in hazard mode on two clusters (:func:`emulator_cases`), where the work must also be the schedule's
    (every 64×64 sub-tile of C stored once, by the block the schedule gives it; every wgmma product once, by its
    block and its consumer: tile j of a block is consumer j % 2's) and the trace must show consumer 0 first and the
    two consumers' mainloops and epilogues in turn, one at a time. On the H100 the first emulator shape also runs on
    the executor (the same verdict as without a GPU), then the kernel is timed beside Lab 7 (the cooperative kernel),
    the course's Lab 8 kernel (the speed floor, ``_common.SPEED_FLOOR``) and cuBLAS, square and short-K."""
    made = None
    if carried:
        made, source = _carried(source, wrappers, here, quiet=True)
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 8 · the ping-pong kernel", seed=rng.seed) as c:
        if made is not None:
            c.ok(f"graded: {made.whose('Lab 8')}")
            for line in made.merge.report():
                print(f"   ⚠ {line}")
        kernel = C.compile_student(source, KERNEL_NAME, what="your kernel")
        report = kernel.report
        c.ok(f"compiles: {report.summary()}")
        C.check_no_accumulator_spills(c, report, hint="each consumer holds 128 accumulators (its 128×128 tile): index "
                                      "d[][] only with compile-time constants")
        c.true("setmaxnreg kept (24 for the producer, 240 for the consumers)", report.uses_setmaxnreg,
               hint="keep __launch_bounds__(384, 1) and the setmaxnreg calls")
        for what, ok, why in ptx_order(kernel.ptx, source):
            c.true(f"PTX: {what}", ok, hint=why)
        if not C.runnable(kernel, checked="the sequence barrier in the PTX (above)"):
            return
        hardware = C.on_h100()
        small = emulator_cases(rng)
        if hardware:
            _trial(c, source, rng, _gpu_cases(rng))
            with C.emulated():  # the same kernel on the executor, hazard mode: the same verdict as without a GPU
                _trial(c, source, rng, small[:1])
        else:
            _trial(c, source, rng, small)
        if not benchmark:
            return
        if not hardware:
            print("timing skipped: Lab 8 beside Lab 7, the course's Lab 8 kernel and cuBLAS needs the H100 (the "
                  "emulator checked the results above)")
            return
        _timing(c, source)


def measured() -> str:
    """Lab 8 beside Lab 7 and cuBLAS on the H100, from the newest ``bench/results/*pingpong*.json`` that
    ``tools/h100/pingpong.py`` wrote (GPU, driver and date inside); says so when there is none yet."""
    import json

    runs = sorted((ROOT / "bench" / "results").glob("*pingpong*.json"))
    if not runs:
        return ("not measured on an H100 yet: `bash tools/h100/run.sh pingpong` times Lab 8, Lab 7 and cuBLAS "
                "interleaved on 4096³, 8192³ and two short-K shapes")
    data = json.loads(runs[-1].read_text())
    meta = data.get("meta", {})
    lines = [f"{runs[-1].name}: {meta.get('gpu', '?')}, driver {meta.get('driver', '?')}, {meta.get('date', '?')}"]
    for r in data.get("shapes", []):
        m, n, k = r["shape"]
        # runs recorded before the labs were renumbered call the cooperative kernel (today's Lab 7) "lab6"
        coop, vs = r.get("lab7_tflops", r.get("lab6_tflops")), r.get("lab8_vs_lab7", r.get("lab8_vs_lab6"))
        lines.append(f"  {m}×{n}×{k}: Lab 8 {r['lab8_tflops']:.0f} TFLOP/s, Lab 7 {coop:.0f}, cuBLAS "
                     f"{r['cublas_tflops']:.0f}; Lab 8 / Lab 7 {vs:.3f}, Lab 8 / cuBLAS "
                     f"{r['lab8_vs_cublas']:.3f}")
    return "\n".join(lines)


#: where a Lab 8 kernel gets its H100 timeline stamps (helpers/include/hopper_trace.cuh): the stamping starts before
#: the roles split; every consumer warp stamps each K step's wgmmas, the storing thread each sub-tile's TMA store
STAMPS = [
    ('#include "hopper.cuh"', "", '#include "hopper_trace.cuh"'),
    ("if (wg == 0) {", "HOPPER_TRACE(trace);", ""),
    ("hopper::wgmma_fence();", "HOPPER_STAMP(WGMMA, 0);", ""),
    ("hopper::tma_store_2d(&tmap_c,", "HOPPER_STAMP(EPILOGUE, 0);", ""),
]
STAMPED_SIGNATURE = [("const __grid_constant__ CUtensorMap tmap_c, int M, int N, int K) {",
                      "const __grid_constant__ CUtensorMap tmap_c, int M, int N, int K, "
                      "unsigned long long* __restrict__ trace) {")]
#: the H100 timeline's shape: 8 tiles of 128×128 a block, 16 K steps each
H100_TIMELINE_SHAPE = (4096, 4096, 1024)


def stamped(source: str, *, wrappers: str | None = None, here: Any = None, carried: bool = True) -> str:
    """The kernel graded (your Lab 7 kernel with this lab's change and your regions from the cell ``source``, after
    your wrappers; ``carried=False``: ``source`` is a whole kernel) with timeline stamps and a last ``trace`` argument
    (ValueError naming the line where a stamp's place is not found exactly once)."""
    from helpers.gpu.executor.trace import add_stamps

    source = _whole(source, wrappers, here, carried)

    for old, _ in STAMPED_SIGNATURE:
        if source.count(old) != 1:
            raise ValueError(f"cannot place the stamps: the kernel's parameter list {old.strip()!r} occurs "
                             f"{source.count(old)} times (once expected)")
    return add_stamps(source, STAMPS, STAMPED_SIGNATURE)


def _stamped_child(source: str, shape: tuple[int, int, int]) -> tuple[np.ndarray, tuple[int, int, int]]:
    """(Runs in the isolated child, on the H100.) The stamped kernel once on ``shape``: the stamp buffer and grid."""
    from helpers import gpu
    from helpers.gpu.executor.trace import stamp_buffer

    m, n, k = shape
    kernel = gpu.compile(source, KERNEL_NAME)
    a, b = C.make_operands(np.random.default_rng(0), m, n, k)
    da, db, dc = gpu.to_device(a), gpu.to_device(b), gpu.zeros((m, n), gpu.bfloat16)
    work = -(-m // 256) * -(-n // BN)
    blocks = gpu.persistent_grid(kernel, 384, SMEM_BYTES, 2, work)
    buf = gpu.zeros(stamp_buffer(blocks, 12).shape, np.uint64)
    maps = (gpu.tensor_map_2d(da, *LAUNCH.box_a), gpu.tensor_map_2d(db, *LAUNCH.box_b),
            gpu.tensor_map_2d(dc, *LAUNCH.box_c))
    gpu.launch(kernel, (blocks, 1, 1), 384, SMEM_BYTES, *maps, *(np.int32(v) for v in shape), buf, cluster=(2, 1, 1))
    gpu.wait()
    return buf.to_host(), (blocks, 1, 1)


def _timeline_text(secs: dict, where: str, unit: str) -> str:
    kinds = secs.get((0, 0, 0)) or next(iter(secs.values()))
    rows = sorted([(s, e, g, kind) for kind, runs in kinds.items() for g, s, e, _ in runs])
    lines = [f"{where}: block 0's stretches of work ({unit}), which consumer did what"]
    lines += [f"  {s:>7}–{e:<7} consumer {g}: {kind}" for s, e, g, kind in rows]
    main = sorted((s, e) for kind, runs in kinds.items() if kind == "mainloop" for _, s, e, _ in runs)
    epi = [(s, e) for _, s, e, _ in kinds.get("epilogue", [])]
    hidden = sum(max(0, min(e, me) - max(s, ms)) for s, e in epi for ms, me in main)
    total = sum(e - s for s, e in epi)
    if total:
        lines.append(f"  the epilogues ran {total} {unit.split()[0]} in all, {hidden / total:.0%} of it while the "
                     "other consumer's mainloop issued wgmmas")
    return "\n".join(lines)


def timeline(source: str, shape: tuple[int, int, int] = (520, 392, 136), *, wrappers: str | None = None,
             here: Any = None, carried: bool = True) -> str:
    """Your kernel's timeline, as text: block 0's runs of mainloop and epilogue work by consumer. The kernel is the
    one graded (the cell ``source`` carried on your Lab 7 kernel; ``carried=False``: ``source`` is a whole kernel).
    Everywhere: one run on the executor (trace on), in the emulator's cycles. On an H100 also: the kernel with
    timeline stamps (:data:`STAMPS`) once at :data:`H100_TIMELINE_SHAPE` on the GPU, in nanoseconds of the GPU's own
    timer."""
    from helpers import gpu
    from helpers.gpu.executor.trace import Trace, from_stamps

    source = _whole(source, wrappers, here, carried)
    m, n, k = shape
    kernel = C.compile_student(source, KERNEL_NAME, what="the kernel")
    a, b = C.make_operands(np.random.default_rng(0), m, n, k)
    res = gpu.run_on_executor(kernel, (2 * EMULATED_CLUSTERS, 1, 1), 384, SMEM_BYTES,
                              gpu.TensorMapArg(a, LAUNCH.box_a), gpu.TensorMapArg(b, LAUNCH.box_b),
                              gpu.TensorMapArg(np.zeros((m, n), gpu.bfloat16), LAUNCH.box_c),
                              np.int32(m), np.int32(n), np.int32(k), cluster=(2, 1, 1), hazards=False, trace=True)
    out = [_timeline_text(sections(Trace.from_machine(res.machine)), f"{m}×{n}×{k} on the emulator", "cycles")]
    if not C.on_h100():
        return out[0]
    hm, hn, hk = H100_TIMELINE_SHAPE
    try:
        src = stamped(source, carried=False)
    except ValueError as exc:
        return out[0] + f"\n(no H100 timeline: {exc}; the stamps go before those lines of the course's kernel)"
    buf, grid = C.run_isolated_call(_stamped_child, src, H100_TIMELINE_SHAPE, what="the stamped run", timeout=120)
    trace = from_stamps(buf, grid, 384, align="globaltimer")
    out.append(_timeline_text(sections(trace, epilogue=("work",)), f"{hm}×{hn}×{hk} on the H100", "ns"))
    return "\n\n".join(out)


# ------------------------------------------------------------------------------------------- the ladder
#: your Lab 8 kernel's timings of this session (size or (M, N, K) -> (yours, the course's in the same run))
MEASURED = lab5.timed(KERNEL_NAME)


def ladder_rows(size: Any = 4096) -> list[dict[str, Any]]:
    """The ladder at ``size`` (size³, or (M, N, K)): the course's Lab 7 and Lab 8 kernels as measured on an H100, then
    your own Lab 8 kernel as the kernel check timed it in this session, beside the course's Lab 8 kernel timed in the
    same run."""
    from ._ladder import lab_ladder_rows

    steps = {"lab7": "Lab 7 · the course's kernel (cooperative)", "lab8": "Lab 8 · the course's kernel"}
    return lab_ladder_rows(size, "Lab 8", steps, KERNEL_NAME)


def show_ladder(size: Any = 4096) -> None:
    """The ladder at ``size`` as a table: TFLOP/s beside cuBLAS in the same run, and the ratio."""
    from ._ladder import show_rows

    show_rows(ladder_rows(size), size)
