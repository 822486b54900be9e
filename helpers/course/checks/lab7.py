"""Graders of Lab 7 (2-CTA clusters multicasting B, on Lab 6's persistent kernel): the multicast producer and the
two-CTA release (on the cluster model), and the CUDA kernel (compiled and read everywhere; run on random non-square
shapes wherever kernels run: on the H100 on every co-resident cluster, on the course's PTX executor on two clusters
with several pairs each; timed beside cuBLAS on the H100 only). ``hint`` / ``answer`` give the tiered hints.

Units: a *pair* is the 256×256 block of C one 2-CTA cluster computes (CTA r: rows 128·r … of it); pairs are
numbered in the raster order (Lab 6's grouped order, over pairs), and cluster ``c`` of ``clusters`` takes pairs
``c, c + clusters, …``.

The kernel graded is the student's own: their Lab 6 kernel (read from lab6_persistent.ipynb beside this notebook, put
together with their Labs 5 and 4 as Lab 6 graded it, and checked quickly with Lab 6's check; the course's Lab 6
kernel stands in where theirs is missing or does not pass) merged with this lab's change and their Lab 7 regions
(:mod:`helpers.course.carry`), after their wrappers of Labs 1 and 2.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from helpers.course import carry, grading
from helpers.course.hints import answer, hint
from helpers.hopper import cluster, pipeline, scheduler
from helpers.hopper.mbarrier import MBarrierError

from . import lab5, lab6
from ._common import GemmLaunch, Opening, compile_student, find_instrs, stream, symbol_plus_offset, trace
from ._kernel import check_epilogue_ptx, report_checks
from ._ptxflow import Flow
from .lab5 import HEADER, SMEM_BYTES, _gpu_check

__all__ = [
    "KERNEL_NAME",
    "LAUNCH",
    "PAIR",
    "check_produce",
    "check_release",
    "check_cluster_kernel",
    "check_arrival_counts",
    "KernelInit",
    "kernel_init",
    "course_kernel_inits",
    "source_constants",
    "model_problem",
    "opening",
    "previous",
    "MEASURED",
    "ladder_rows",
    "show_ladder",
    "hint",
    "answer",
]

KERNEL_NAME = "lab7_gemm"
PAIR = 256  # a cluster's block of C is 256×256
#: how the lab's kernel is launched (the same as bench/ladder.py's make_lab7)
LAUNCH = GemmLaunch(KERNEL_NAME, 384, SMEM_BYTES, (128, 64), (128, 64), (64, 64), out_bf16=True, cluster=2,
                    persistent_unit=(PAIR, PAIR))


def _course_lab6() -> str:
    """The course's Lab 6 kernel cell (its solution), as the course's data holds it."""
    from ._common import course_kernel

    return course_kernel("lab6")


def _lab6_check(wrappers: str) -> Callable[[str], None]:
    """Lab 6's check of its whole kernel, quick: the compile report, the loop and the epilogue read from the PTX, then
    a run on the course's PTX executor in hazard mode (on any machine; no timing)."""
    from ._common import emulated

    def check(kernel: str) -> None:
        with emulated():
            lab6.check_persistent_kernel(HEADER + wrappers + kernel, benchmark=False, carried=False)

    return check


def previous(wrappers: str) -> carry.Previous:
    """What Lab 7 builds on: your Lab 6 kernel (``LAB6_SRC`` of lab6_persistent.ipynb, put together with your Lab 5
    and Lab 4 kernels as Lab 6 graded it), checked with Lab 6's check on ``wrappers``; the course's Lab 6 kernel
    stands in where yours does not pass."""

    def whole(text: str, here: Any) -> str:
        return lab6._carried(text, wrappers, here, quiet=True)[0].kernel

    return carry.Previous("Lab 6", "lab6_persistent.ipynb", "LAB6_SRC", _course_lab6, _lab6_check(wrappers), wrappers,
                          whole=whole)


def _carried(source: str, wrappers: str | None, here: Any, quiet: bool) -> tuple[carry.Carried, str]:
    """(the merge, the whole source to compile): your Lab 6 kernel (or the course's), this lab's change and your
    regions, after your wrappers."""
    if wrappers is None:
        wrappers = lab5.carry_wrappers(checked=False)
    made = carry.carried(previous(wrappers), source, here=here, quiet=quiet)
    return made, HEADER + wrappers + made.kernel


def opening(source: str, *, wrappers: str | None = None, here: Any = None) -> Opening:
    """The kernel this lab grades, as a diff from your Lab 6 kernel (read from lab6_persistent.ipynb beside this
    notebook, with your Labs 5 and 4 under it, and checked with Lab 6's check; the course's stands in where yours is
    missing or does not pass): your Lab 6 code, this lab's change and your regions as the cell holds them. The first
    line says whose Lab 6 kernel it is; then any lines of yours this lab rewrote; then the course's Lab 6 kernel's
    measured speed."""
    from helpers.course.widgets.roofline import ladder

    from ._common import source_diff

    if wrappers is None:
        wrappers = lab5.carry_wrappers(checked=True)
    made, _ = _carried(source, wrappers, here, quiet=True)
    lines = [made.previous.line] + [f"⚠ {line}" for line in made.merge.report()]
    for size in (4096, 8192):
        row = next((m for key, _, m in ladder(size) if key == "lab6"), None)
        lines.append(f"the course's Lab 6 kernel at {size}³: {row or 'not measured yet'}")
    old = "your Lab 6 kernel" if made.previous.yours else "the course's Lab 6 kernel"
    diff = source_diff(made.previous.text, made.kernel, f"{old} (Lab 6)",
                       f"Lab 7: the kernel graded ({old} + this lab's change + your regions)", indent=False)
    return Opening(f"What Lab 7 changes in {old}", lines, diff)


def _call(c: grading.Check, what: str, fn: Callable[..., Any], *args: Any, hint: str = "") -> Any:
    try:
        return grading.call_student(fn, *args, what=what.split("(")[0])
    except (grading.CheckFailed, NotImplementedError):
        raise
    except Exception as exc:  # noqa: BLE001 - reported to the student
        c.fail(f"{what}: your function raised {type(exc).__name__}: {exc}", hint=hint)


# ------------------------------------------------------------------------------------------- 1, 2 · multicast
def model_problem(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """A small random problem for the cluster model: A, B with partial tiles, K long enough for the 4-stage ring to
    wrap inside a tile and across tiles, and the 2–3 pairs one cluster takes in the grouped order."""
    from .lab3 import make_operands

    pm_total, pn_total = int(rng.integers(1, 3)), int(rng.integers(2, 4))
    m = pm_total * PAIR - 8 * int(rng.integers(0, 8))
    n = pn_total * PAIR - 8 * int(rng.integers(0, 8))
    k = 64 * int(rng.integers(3, 7)) - 8 * int(rng.integers(0, 2))
    a, b = make_operands(rng, m, n, k)
    visits = scheduler.grouped(pm_total, pn_total, 8)
    clusters = 1 if len(visits) <= 3 else 2  # cluster 0 takes 2 or 3 pairs: the ring runs on across tiles
    return a, b, [(int(v[0]), int(v[1])) for v in visits[0::clusters]]


def _run_model(c: grading.Check, what: str, init: Callable, produce: Callable, release: Callable,
               rng: np.random.Generator, hint: str) -> None:
    a, b, pairs = model_problem(rng)
    try:
        models = cluster.run_mainloop(a, b, pairs, init, produce, release)
    except (cluster.ClusterError, MBarrierError) as exc:
        c.fail(f"{what}: on the cluster model ({type(exc).__name__})", detail="    " + str(exc).replace("\n", "\n    "),
               hint=hint)
    except (grading.CheckFailed, NotImplementedError):
        raise
    except Exception as exc:  # noqa: BLE001 - the student's code raised inside the model
        c.fail(f"{what}: your code raised {type(exc).__name__}: {exc}", hint=hint)
    m = models[0]
    c.ok(f"{what}: 2 CTAs, {len(pairs)} tiles × {m.steps} K steps, {len(models)} timings (a slow CTA, late and "
         f"early multicast bytes): every one of the {m.reads} stage reads saw exactly the A rows and the whole B "
         f"slice it needs; {m.multicasts} multicasts, {m.remote_arrivals} remote arrivals")


def _produce_hint(calls: list[tuple], want: list[tuple], rank: int) -> str:
    ctx = cluster.RecordingContext(rank)
    exp = [x for x in calls if x[0] == "arrive_expect_tx"]
    if len(exp) != 1:
        return f"one ctx.arrive_expect_tx(ctx.full[s], …) per stage fill (you made {len(exp)})"
    if exp[0][2] != ctx.STAGE_BYTES:
        n = exp[0][2]
        if n == ctx.A_BYTES + ctx.B_HALF:
            return ("full[s] expects only this CTA's own loads (A + its half of B): the half the other CTA multicasts "
                    "lands here too and counts on this same barrier — expect the whole stage, ctx.STAGE_BYTES")
        return f"full[s] must expect every byte that lands in this CTA's stage: ctx.STAGE_BYTES = {ctx.STAGE_BYTES}"
    loads = [x for x in calls if x[0] == "tma_load"]
    multi = [x for x in loads if x[5] is not None]
    if len(multi) != 1:
        return "one multicast load per stage: this CTA's share of B, sent to every CTA of the cluster (mask=…)"
    mask = multi[0][5]
    full_mask = (1 << ctx.size) - 1
    if mask != full_mask:
        if mask == 1 << rank:
            return (f"mask {mask:#04b} sends the share only to this CTA: the other CTA needs it too, mask "
                    f"{full_mask:#04b}")
        return f"the share of B goes to both CTAs of the cluster: mask {full_mask:#04b} = (1 << ctx.size) - 1"
    w_multi = [x for x in want if x[0] == "tma_load" and x[5] is not None][0]
    if multi[0][1] != "B":
        return "multicast B (the operand both CTAs of the cluster share); A is each CTA's own"
    if multi[0][2] != w_multi[2]:
        return ("CTA r's share of B lands at ctx.A_BYTES + r·ctx.B_HALF inside the stage, in both CTAs: the two "
                "shares must not land on top of each other")
    if multi[0][3] != w_multi[3]:
        return "CTA r's share holds B rows n0 + r·ctx.B_ROWS …: coordinates (k·ctx.BK, n0 + ctx.rank·ctx.B_ROWS)"
    if any(x[4] != cluster.BarrierRef(rank, "full", want[0][1].index) for x in loads):
        return "every load completes on this CTA's full[s] (the one you armed)"
    own = [x for x in loads if x[5] is None]
    w_own = [x for x in want if x[0] == "tma_load" and x[5] is None][0]
    if len(own) != 1 or own[0][1:4] != w_own[1:4]:
        return "the A box: ctx.tma_load('A', s·ctx.STAGE_BYTES, (k·ctx.BK, m0), ctx.full[s]) — no mask, A is not shared"
    return "expect the whole stage, load A for this CTA, load this CTA's share of B and multicast it to both"


def check_produce(init_barriers: Callable, produce: Callable) -> None:
    """Grade ``init_barriers(ctx)`` and ``produce(ctx, s, k, m0, n0)`` on the cluster model (the release is the
    reference's): the barrier counts, the expect-tx, the multicast mask, where the shares land."""
    rng = grading.fresh_rng()
    with grading.check("Lab 7 · the multicast producer and its barriers", seed=rng.seed) as c:
        ctx = cluster.RecordingContext(0)
        calls = _call(c, "init_barriers(ctx)", lambda: cluster.record(init_barriers, 0)) or []
        counts: dict[str, set[int]] = {"full": set(), "empty": set()}
        inited = set()
        for call in calls:
            if call[0] == "init":
                counts[call[1].kind].add(int(call[2]))
                inited.add((call[1].kind, call[1].index))
        c.true("init_barriers initialises full[s] and empty[s] of every stage",
               inited == {(k, s) for k in ("full", "empty") for s in range(ctx.stages)},
               hint="for s in range(ctx.stages): ctx.init(ctx.full[s], …); ctx.init(ctx.empty[s], …)")
        if counts["full"] != {1}:
            c.fail("full[s]'s arrival count", 1, sorted(counts["full"]),
                   hint="one arrival per phase: this CTA's producer's arrive.expect_tx (the bytes are counted apart)")
        if counts["empty"] != {ctx.consumers * ctx.size}:
            got = sorted(counts["empty"])
            hint = (f"{ctx.consumers} is this CTA's consumers only: a refill lands in both CTAs' shared memory, so "
                    "empty[s] waits for the consumers of both: ctx.consumers · ctx.size"
                    if got == [ctx.consumers] else
                    "every consumer warpgroup of every CTA arrives once per fill: ctx.consumers · ctx.size")
            c.fail("empty[s]'s arrival count", ctx.consumers * ctx.size, got, hint=hint)
        c.ok(f"full[s] counts 1 arrival, empty[s] counts {ctx.consumers * ctx.size} (2 consumers × 2 CTAs)")
        for rank in range(ctx.size):
            s, k = int(rng.integers(0, ctx.stages)), int(rng.integers(0, 9))
            m0, n0 = PAIR * int(rng.integers(0, 9)) + 128 * rank, PAIR * int(rng.integers(0, 9))
            want = cluster.record(cluster.reference_produce, rank, s, k, m0, n0)
            got = _call(c, f"produce(ctx of CTA {rank}, s={s}, k={k}, m0={m0}, n0={n0})",
                        lambda rank=rank, s=s, k=k, m0=m0, n0=n0: cluster.record(produce, rank, s, k, m0, n0))
            if sorted(map(repr, got)) != sorted(map(repr, want)):
                c.fail(f"produce on CTA {rank} for stage {s}, K step {k}", detail=_show_calls(want, got),
                       hint=_produce_hint(got, want, rank))
        c.ok("produce: arrive.expect_tx of the whole stage (49152 bytes), this CTA's A box, its share of B "
             "multicast with mask 0b11, at the right offsets and coordinates")
        _run_model(c, "your init_barriers and produce with the course's release", init_barriers, produce,
                   cluster.reference_release, rng, hint=_produce_hint(
                       cluster.record(produce, 0, 0, 0, 0, 0), cluster.record(cluster.reference_produce, 0, 0, 0, 0, 0),
                       0))


def _show_calls(want: list[tuple], got: list[tuple]) -> str:
    def fmt(x: tuple) -> str:
        name, *args = x
        return f"{name}(" + ", ".join(str(a) if not isinstance(a, int) or a < 4096 else f"{a}" for a in args
                                      if a is not None or name != "tma_load") + (
            f", mask={x[5]:#04b}" if name == "tma_load" and x[5] is not None else "") + ")"

    return ("    expected calls:\n" + "\n".join("      " + fmt(x) for x in want)
            + "\n    your calls:\n" + "\n".join("      " + fmt(x) for x in got))


def _release_hint(got: list[tuple], rank: int, s: int) -> str:
    targets = [x[1] for x in got if x[0] == "arrive"]
    if any(t.kind != "empty" or t.index != s for t in targets):
        return f"release stage {s}: arrive on empty[{s}] (ctx.empty[s]), not another barrier"
    ranks = sorted(t.rank for t in targets)
    if ranks == [rank, rank]:
        return ("both arrivals went to this CTA's own empty[s]: the other CTA's producer waits on ITS empty[s] before "
                "multicasting into this CTA's stage, so one arrival goes there: ctx.mapa(ctx.empty[s], other rank)")
    if ranks == [rank]:
        return ("the other CTA's empty[s] waits for this consumer too: arrive on ctx.mapa(ctx.empty[s], cta) for both "
                "CTAs")
    if len(ranks) == 1:
        return "arrive on this CTA's empty[s] too: one arrival on empty[s] of every CTA"
    return "one arrival on empty[s] of each CTA of the cluster: for cta in range(ctx.size): ctx.arrive(ctx.mapa(...))"


def check_release(release: Callable) -> None:
    """Grade ``release(ctx, s)`` (a consumer warpgroup done with stage s) on the cluster model with the course's
    barriers and producer: one arrival on empty[s] of each CTA."""
    rng = grading.fresh_rng()
    with grading.check("Lab 7 · releasing a stage in both CTAs", seed=rng.seed) as c:
        for rank in range(2):
            s = int(rng.integers(0, 4))
            got = _call(c, f"release(ctx of CTA {rank}, s={s})",
                        lambda rank=rank, s=s: cluster.record(release, rank, s))
            want = cluster.record(cluster.reference_release, rank, s)
            if sorted(map(repr, got)) != sorted(map(repr, want)):
                c.fail(f"release on CTA {rank}, stage {s}", detail=_show_calls(want, got),
                       hint=_release_hint(got, rank, s))
        c.ok("release: one arrival on empty[s] of this CTA and one on the other CTA's, through mapa")
        _run_model(c, "your release with the course's barriers and producer", cluster.reference_init,
                   cluster.reference_produce, release, rng, hint=_release_hint(cluster.record(release, 0, 0), 0, 0))


# ------------------------------------------------------------------------------------------- 3 · the kernel
def _release_cluster_note() -> str:
    import json
    from pathlib import Path

    one_run = Path(__file__).resolve().parents[3] / "tests" / "data" / "lab6_arrive_speed_h100.json"
    if one_run.exists():
        med = json.loads(one_run.read_text())["medians"]["8192×8192×8192"]
        slow, fast = med[".release.cluster arrive"]["tflops"], med["plain arrive"]["tflops"]
        return (f"measured on the H100 in one run at 8192³: {slow:.0f} TFLOP/s with the .release.cluster form, "
                f"{fast:.0f} with the bare arrive (tests/data/lab6_arrive_speed_h100.json)")
    return "the .release.cluster form puts a GPU-wide memory barrier before every arrive"


def _mapa_ranks(ptx: str, entry: str) -> list[str]:
    """Where the CTA operand of each mapa feeding an mbarrier arrive comes from."""
    out = []
    for ins in find_instrs(ptx, "mapa", entry):
        ops = [o.strip() for o in ins.operands.split(",")]
        if len(ops) == 3:
            origin, _ = trace(ptx, ops[2])
            out.append(origin)
    return out


def _cluster_values(flow: Flow, operand: str) -> set[int] | None:
    """The values an operand takes in the two CTAs of a cluster of 2 (``%cluster_nctarank`` 2, ``%cluster_ctarank`` 0
    and 1): what the compiler folded, or what the PTX computes from the cluster's registers; None when it depends on
    anything else (a value only the run knows)."""
    out: set[int] = set()
    for rank in (0, 1):
        v = flow.evaluate(operand, {"%cluster_nctarank": 2, "%cluster_ctarank": rank, "%cluster_nctaid.x": 2,
                                    "%cluster_ctaid.x": rank})
        if v is None:
            return None
        out.add(v)
    return out


def _shown(values: set[int] | None) -> Any:
    """A set of values as the failure shows it (one value: that value, as text)."""
    if values is None:
        return "computed at run time"
    return str(next(iter(values))) if len(values) == 1 else sorted(values)


def check_cluster_kernel(source: str, *, benchmark: bool = True, sizes: tuple[Any, ...] = (4096, 8192),
                         wrappers: str | None = None, here: Any = None, carried: bool = True) -> None:
    """Grade the Lab 7 kernel: your Lab 6 kernel (the course's where yours does not pass Lab 6's check) with this
    lab's change and your regions from ``source`` (the LAB7_SRC cell), after your wrappers (``wrappers``; by default
    carried from your Lab 1 and 2 notebooks beside this one). ``carried=False``: ``source`` is a whole kernel, graded
    as it is (the course's bench/kernels/lab7_clusters.cu).

    Compile it (report); read from its PTX: the 2-CTA cluster, the multicast load and its mask,
    the whole-stage expect-tx, the EMPTY count, the remote arrivals through mapa (bare, not .release.cluster), the
    cluster barriers around the kernel, and the persistent epilogue on the epilogue model. Wherever kernels run:
    random non-square shapes, C poisoned, against fp64 (on the H100 on every co-resident cluster, with partial waves;
    on the course's PTX executor on two clusters that each take several pairs); on the H100 then timing beside
    cuBLAS (bf16 C)."""
    from ._common import can_run

    made = None
    if carried:
        made, source = _carried(source, wrappers, here, quiet=True)
    rng = grading.fresh_rng()
    with grading.check("Lab 7 · the clustered, multicasting kernel", seed=rng.seed) as c:
        if made is not None:
            c.ok(f"graded: {made.whose('Lab 7')}")
            for line in made.merge.report():
                print(f"   ⚠ {line}")
        kernel = compile_student(source, KERNEL_NAME, what="your kernel")
        ptx = kernel.ptx
        report_checks(c, kernel.report, spills_allowed=True)
        c.true("the kernel is compiled for clusters of 2 CTAs (.reqnctapercluster 2, 1, 1)",
               ".reqnctapercluster 2, 1, 1" in ptx, hint="keep __cluster_dims__(2, 1, 1) on the kernel")
        loads = [i for i in find_instrs(ptx, "cp.async.bulk.tensor", KERNEL_NAME)
                 if ".shared::cluster.global" in i.opcode]
        multi = [i for i in loads if i.opcode.endswith(".multicast::cluster")]
        c.true("one plain TMA load (A) and one multicast load (B) per stage fill",
               len(multi) == 1 and len(loads) == 2,
               hint="your my_tma_load_2d for A, hopper::tma_load_2d_multicast for this CTA's half of B")
        flow = Flow(ptx, KERNEL_NAME)
        runtime: list[str] = []  # values the PTX computes from the cluster's registers at run time: the run checks
        mask_op = [o.strip() for o in multi[0].operands.rsplit(",", 1)][-1]
        mask = _cluster_values(flow, mask_op)
        if mask is None:
            runtime.append("the multicast mask")
        elif mask != {3}:
            c.fail("the multicast mask", "3 (0b11: both CTAs)", _shown(mask),
                   hint="the half of B lands in both CTAs: (1u << CLUSTER) - 1" if mask != {1, 2} else
                   "the mask names every CTA the copy lands in; one bit for this CTA only multicasts to it alone")
        else:
            c.ok("the multicast load of B goes to both CTAs (mask 0b11)")
        expects = (find_instrs(ptx, "mbarrier.arrive.expect_tx", KERNEL_NAME)  # the header's, or your wrapper's
                   + find_instrs(ptx, "mbarrier.expect_tx", KERNEL_NAME))
        nbytes = [_cluster_values(flow, i.operands.rsplit(",", 1)[-1]) for i in expects]
        if any(v is None for v in nbytes):
            runtime.append("the bytes full[s] expects")
        elif set().union(*nbytes) != {49152}:
            got = set().union(*nbytes)
            hint = ("32768 is this CTA's own loads only: the half the other CTA multicasts lands here and counts on "
                    "this full[s] too: STAGE_BYTES" if got == {32768} else "STAGE_BYTES = 49152: A + all of B")
            c.fail("the bytes full[s] expects", {"49152"}, _shown(got), hint=hint)
        else:
            c.ok("full[s] expects the whole stage: 49152 bytes (A 16384 + both halves of B)")
        counts: dict[str, set[int] | None] = {}
        for ins in find_instrs(ptx, "mbarrier.init", KERNEL_NAME):
            addr, count = (o.strip() for o in ins.operands.split(","))
            where = symbol_plus_offset(ptx, addr)
            name = "empty" if where and "empty" in where[0] else "full" if where and "full" in where[0] else "?"
            vals = _cluster_values(flow, count)
            counts[name] = None if vals is None or counts.get(name, set()) is None else counts.get(name, set()) | vals
        if "empty" in counts and counts["empty"] is None:
            runtime.append("empty[s]'s arrival count")
        elif counts.get("empty") != {4}:
            hint = ("2 counts this CTA's consumers only: the other CTA's consumers read the same refill, so "
                    "empty[s] counts CONSUMERS * CLUSTER" if counts.get("empty") == {2} else
                    "CONSUMERS * CLUSTER = 4 arrivals per phase")
            c.fail("mbarrier.init of empty[s]", {"4"}, _shown(counts.get("empty")), hint=hint)
        else:
            c.ok("empty[s] is initialised for 4 arrivals (2 consumer warpgroups × 2 CTAs)")
        if runtime:
            c.ok(f"{', '.join(runtime)}: computed at run time from the cluster's registers (the PTX holds no constant "
                 "to read): the run below checks it (the wrong value deadlocks a stage or leaves C wrong)")
        if find_instrs(ptx, "mbarrier.arrive.release.cluster", KERNEL_NAME):
            c.fail("the remote arrivals use mbarrier.arrive.release.cluster",
                   hint="use the bare hopper::mbar_arrive_cluster: the default release at CTA scope is enough for "
                        "'my reads of this stage are done', and ptxas puts MEMBAR.ALL.GPU before every "
                        f".release.cluster arrive ({_release_cluster_note()})")
        remote = find_instrs(ptx, "mbarrier.arrive.shared::cluster", KERNEL_NAME)
        ranks = _mapa_ranks(ptx, KERNEL_NAME)
        if not remote or not ranks:
            c.fail("no arrival on the other CTA's empty[s]",
                   hint="hopper::mbar_arrive_cluster(&empty[s], cta) from two threads, cta = 0 and 1 (t < CLUSTER)")
        if all(r == "%cluster_ctarank" for r in ranks):
            c.fail("every remote arrival names this CTA's own rank",
                   hint="mapa with this CTA's rank is this CTA's own barrier: thread t arrives on CTA t's empty[s]")
        constants = {r for r in ranks if r.isdigit()}
        if ranks and all(r.isdigit() for r in ranks) and constants != {"0", "1"}:
            c.fail(f"every remote arrival goes to CTA {sorted(constants)}",
                   hint="one arrival on empty[s] of each CTA: cta = 0 and cta = 1")
        c.ok(f"consumers arrive on both CTAs' empty[s] through mapa ({len(remote)} sites, the bare form, no "
             ".release.cluster)")
        lines = [ln for ln in stream(ptx, KERNEL_NAME) if ln.instr]
        arrives = [i for i, ln in enumerate(lines) if ln.instr.opcode.startswith("barrier.cluster.arrive")]
        waits = [i for i, ln in enumerate(lines) if ln.instr.opcode.startswith("barrier.cluster.wait")]
        first_load = min((i for i, ln in enumerate(lines) if ln.instr.opcode.startswith("cp.async.bulk.tensor")),
                         default=len(lines))
        stores_done = max((i for i, ln in enumerate(lines) if ln.instr.opcode == "cp.async.bulk.wait_group"),
                          default=-1)
        c.true("a cluster barrier after the barriers are initialised, before any copy",
               bool(arrives) and bool(waits) and min(waits) < first_load,
               hint="hopper::cluster_sync() after mbar_fence_init: the other CTA multicasts into this CTA's shared "
                    "memory and arrives on its barriers, which must exist first")
        c.true("a cluster barrier at the end, after the last store has drained",
               len(arrives) >= 2 and max(arrives) > stores_done and max(waits) > stores_done,
               hint="hopper::cluster_sync() before the kernel ends: no CTA may leave while the other can still "
                    "multicast into its shared memory or arrive on its barriers")
        check_epilogue_ptx(c, ptx, KERNEL_NAME, tiles=3, final_required=True)
        if not can_run(kernel, checked="the cluster, multicast, barrier counts and remote arrivals (from the PTX), "
                                       "the epilogue's order across tiles (on the epilogue model)"):
            return
        _gpu_check(c, source, LAUNCH, rng, what="your kernel", benchmark=benchmark, sizes=sizes)


# ------------------------------------------------------------------------------------------- the ladder
#: your Lab 7 kernel's timings of this session (size -> (yours, the course's in the same run))
MEASURED = lab5.timed(KERNEL_NAME)


def ladder_rows(size: int = 4096) -> list[dict[str, Any]]:
    """The ladder at size³: the course's Lab 6 and Lab 7 kernels as measured on an H100, then your own Lab 7 kernel
    as the check timed it in this session, beside the course's Lab 7 kernel timed in the same run."""
    steps = {"lab6": "Lab 6 · the course's kernel", "lab7": "Lab 7 · the course's kernel"}
    return lab5.lab_ladder_rows(size, "Lab 7", steps, KERNEL_NAME)


def show_ladder(size: int = 4096) -> None:
    """The ladder at size³ as a table (Markdown in a notebook, text elsewhere): TFLOP/s beside cuBLAS in the same
    run, and the ratio."""
    lab5.show_rows(ladder_rows(size), size)


# ------------------------------------------------------------------------------------------- 4 · counts at init
@dataclass(frozen=True)
class KernelInit:
    """A course kernel's ring as its source sets it up: the counts its ``mbar_init`` calls give ``full[s]`` and
    ``empty[s]``, and the roles read from its own constants (consumer warpgroups reading a stage, cluster shape,
    which operand is multicast)."""

    name: str
    stages: int
    full: int
    empty: int
    consumer_warpgroups: int
    cluster: tuple[int, int]
    multicast: str


def source_constants(src: str) -> dict[str, int]:
    """The integer constants of a CUDA source: its ``#define NAME number`` and ``constexpr int`` declarations (each
    evaluated with the constants before it; one this reader cannot evaluate is left out)."""
    consts: dict[str, int] = {name: int(v) for name, v in re.findall(r"#define\s+(\w+)\s+(\d+)\b", src)}
    for decl in re.findall(r"constexpr\s+(?:int|unsigned)\s+([^;]+);", src):
        for part in decl.split(","):
            if "=" in part:
                name, expr = (x.strip() for x in part.split("=", 1))
                try:
                    consts[name] = int(eval(expr, {}, dict(consts)))  # noqa: S307 - the course's own constants
                except Exception:  # noqa: BLE001 - an expression of things this reader does not know
                    pass
    return consts


def kernel_init(src: str, name: str = "kernel") -> KernelInit | None:
    """Read a kernel's ring set-up from its source: ``mbar_init(&full[s], …)`` and ``mbar_init(&empty[s], …)``
    evaluated with its constants, STAGES, and its roles (CONSUMERS warpgroups read each stage, or one in turn where
    the kernel orders its consumers (ORDER_DEPTH); clusters of CLUSTER blocks along M multicast B). None for a kernel
    without a full/empty ring."""
    full = re.search(r"mbar_init\(&full\[s\],\s*([^)]+)\)", src)
    empty = re.search(r"mbar_init\(&empty\[s\],\s*([^)]+)\)", src)
    if not (full and empty):
        return None
    consts = source_constants(src)
    f, e = (int(eval(m.group(1), {}, dict(consts))) for m in (full, empty))  # noqa: S307 - the course's kernels
    cm = consts.get("CLUSTER", 1)
    wg = 1 if "ORDER_DEPTH" in consts else consts.get("CONSUMERS", 1)
    return KernelInit(name, consts.get("STAGES", 4), f, e, wg, (cm, 1), "B" if cm > 1 else "")


def course_kernel_inits() -> list[KernelInit]:
    """The ring set-up of every course kernel of ``bench/kernels/`` that has one (lab*.cu), in name order."""
    from pathlib import Path

    kernels = Path(__file__).resolve().parents[3] / "bench" / "kernels"
    found = (kernel_init(p.read_text(), p.name) for p in sorted(kernels.glob("lab*.cu")))
    return [k for k in found if k is not None]


_TOPIC_WORDS = ((r"\bnamed[ _]barrier\s*#?\s*(-?\d+)", None), (r"\bfull\b", "FULL"), (r"\bempty\b", "EMPTY"),
                (r"\bstages?\b", "stages"))


def _topic(sentence: str) -> str | None:
    """What one problem sentence is about, whatever its capitals: a named barrier ("named barrier <id>") first; then
    FULL or EMPTY as the text writes them in capitals (the first of them); then the one topic the sentence names in
    any case ("Full barrier …", "empty: …", "Stages: 0"); where it names several, the first it names."""
    m = re.search(_TOPIC_WORDS[0][0], sentence, re.I)
    if m:
        return f"named barrier {m.group(1)}"
    capital = next((t for t in ("FULL", "EMPTY") if re.search(rf"\b{t}\b", sentence)), None)
    if capital:
        return capital
    found = [(m.start(), topic) for pattern, topic in _TOPIC_WORDS[1:] for m in [re.search(pattern, sentence, re.I)]
             if m]
    return min(found)[1] if found else None


def _topics(stages: int, full: int, empty: int, wg: int, cl: tuple[int, int], mc: str,
            bars: dict[int, int]) -> list[str]:
    """What each problem of a set-up is about, as the model finds them (pipeline.verify_init's rules)."""
    want_full, want_empty = pipeline.arrival_counts(wg, cl, mc)
    out = ["stages"] * (stages < 1) + ["FULL"] * (full != want_full) + ["EMPTY"] * (empty != want_empty)
    for i, t in bars.items():
        out += [f"named barrier {i}"] * (not 0 <= i < 16) + [f"named barrier {i}"] * (t <= 0 or t % 32 != 0)
    return sorted(out)


def _counts_hint(fn: Callable[..., Any]) -> str:
    """Name the mistake of a wrong ``arrival_counts`` from what it answers for a few roles."""
    probe = [(2, (2, 1), "B"), (2, (2, 2), "A"), (3, (2, 2), ""), (1, (4, 2), "B"), (2, (2, 4), "A")]
    try:
        got = [tuple(int(x) for x in grading.call_student(fn, *p)) for p in probe]
    except Exception:  # noqa: BLE001 - the first failure already said what it raised
        return "FULL: the producer's one arrive.expect_tx; EMPTY: see the text above"
    want = [pipeline.arrival_counts(*p) for p in probe]
    full, empty = [g[0] for g in got], [g[1] for g in got]
    if full != [w[0] for w in want]:
        return ("FULL counts arrivals, not copies: one thread of the producer announces the stage's bytes "
                "(arrive.expect_tx) and the copies, multicast ones too, complete bytes. FULL is 1")
    rules = {
        "both": [(cm + cn - 1) * wg for wg, (cm, cn), _ in probe],
        "all blocks": [cm * cn * wg for wg, (cm, cn), _ in probe],
        "blocks only": [w[1] // wg for w, (wg, _, _) in zip(want, probe, strict=True)],
        "swapped": [pipeline.arrival_counts(wg, (cn, cm), mc)[1] for wg, (cm, cn), mc in probe],
        "own block": [wg for wg, _, _ in probe],
        "threads": [128 * w[1] for w in want],
    }
    words = {
        "both": ("only an operand that is multicast brings other blocks' copies into this block's stage: count the "
                 "cm − 1 blocks of the column only when B is multicast, the cn − 1 of the row only when A is"),
        "all blocks": ("not every block of the cluster writes into this block's stage: only those that share an "
                       "operand with it, its cluster column (B, along M) and its row (A, along N)"),
        "blocks only": "EMPTY counts one arrival per consumer warpgroup of each of those blocks: multiply by them",
        "swapped": ("the axes are swapped: B is shared along M (the cm blocks of a column receive the same B slice), "
                    "A along N (the cn blocks of a row)"),
        "own block": ("the consumers of the other blocks whose multicast lands in this stage must release it too, "
                      "before any of them refills it"),
        "threads": "one elected thread of each consumer warpgroup arrives, not all 128",
    }
    for key, values in rules.items():
        if empty == values:
            return words[key]
    return ("EMPTY = (1 + (cm − 1)·[B multicast] + (cn − 1)·[A multicast]) × consumer warpgroups: the consumers of "
            "every block whose copies land in the stage")


def _problems_hint(case: tuple, want: list[str], got: list[str]) -> str:
    """Name what a wrong ``init_problems`` missed or made up in one set-up."""
    stages, full, empty, wg, cl, mc, bars = case
    want_full, want_empty = pipeline.arrival_counts(wg, cl, mc)
    missing = [t for t in want if want.count(t) > got.count(t)]
    extra = [t for t in got if got.count(t) > want.count(t)]
    if missing:
        t = missing[0]
        if t in ("FULL", "EMPTY"):
            have, need = (full, want_full) if t == "FULL" else (empty, want_empty)
            if have > need:
                return (f"{t} is initialised with {have} but {need} arrive per phase: a count that is too high is a "
                        "problem too (the phase never completes: a deadlock)")
            return f"{t} is initialised with {have} but {need} arrive per phase: the phase completes too early"
        if t == "stages":
            return f"{stages} stages: a ring needs at least one"
        i = int(t.rsplit(" ", 1)[1])
        if not 0 <= i < 16:
            return f"named barrier {i}: a block has named barriers 0..15"
        return (f"named barrier {i} counts {bars[i]} threads: bar.sync counts whole warps, so the count must be a "
                "positive multiple of 32")
    t = extra[0] if extra else "?"
    return (f"you found a problem ({t}) that is not there: the counts the roles need are FULL {want_full}, EMPTY "
            f"{want_empty}; a named barrier is fine with an id in 0..15 and a positive multiple of 32 threads")


def _init_cases(rng: np.random.Generator) -> list[tuple]:
    """(stages, full, empty, warpgroups, cluster, multicast, named barriers): the course kernels' own set-ups, then
    named broken ones, then random ones."""
    cases = [(k.stages, k.full, k.empty, k.consumer_warpgroups, k.cluster, k.multicast, {})
             for k in course_kernel_inits()]
    cases += [
        (4, 1, 2, 2, (2, 1), "B", {}),  # Lab 4's count kept after clusters were added: too low
        (4, 1, 8, 2, (2, 1), "B", {}),  # every consumer of both blocks counted twice: too high
        (4, 2, 4, 2, (2, 1), "B", {}),  # FULL counting the multicast copies
        (0, 1, 2, 2, (1, 1), "AB", {}),
        (4, 1, 2, 2, (1, 1), "AB", {1: 256, 2: 176}),
        (4, 1, 2, 2, (1, 1), "AB", {16: 128, 3: 0}),
        (3, 1, 6, 2, (2, 2), "AB", {15: 32, 0: 384}),
    ]
    for _ in range(40):
        wg, cl = int(rng.integers(1, 4)), (int(rng.choice([1, 2, 4])), int(rng.choice([1, 2, 4])))
        mc = str(rng.choice(["", "A", "B", "AB"]))
        f, e = pipeline.arrival_counts(wg, cl, mc)
        f = int(rng.choice([f, f, f, 2, 0]))
        e = int(rng.choice([e, e, e + 1, max(e - 1, 0), wg, cl[0] * cl[1] * wg]))
        bars = {int(rng.integers(0, 18)): int(rng.choice([32, 128, 256, 384, 96, 176, 0, 100]))
                for _ in range(int(rng.integers(0, 3)))}
        cases.append((int(rng.choice([4, 4, 3, 6, 1, 0])), f, e, wg, cl, mc, bars))
    return cases


def check_arrival_counts(arrival_counts: Callable[..., Any], init_problems: Callable[..., Any]) -> None:
    """Grade ``arrival_counts(consumer_warpgroups, cluster, multicast) -> (full, empty)`` against the model
    (pipeline.arrival_counts) over named and random roles, and ``init_problems(stages, full, empty,
    consumer_warpgroups, cluster, multicast, named_barriers) -> list of sentences``, each naming what it is about
    ("named barrier <id>", "FULL", "EMPTY" or "stages", the first it names counts), against the model's rules
    (pipeline.verify_init) on the course kernels' own set-ups (read from their mbar_init calls), named broken ones
    and random ones."""
    rng = grading.fresh_rng()
    with grading.check("Lab 7 · arrival counts, derived and checked at init", seed=rng.seed) as c:
        roles = [(1, (1, 1), "AB"), (2, (1, 1), "AB"), (2, (2, 1), "B"), (1, (2, 1), "B"), (2, (2, 1), "A"),
                 (2, (2, 2), "AB"), (2, (1, 4), "AB"), (3, (2, 2), ""), (2, (2, 2), "A"), (1, (4, 2), "B"),
                 (2, (2, 4), "A"), (3, (4, 4), "AB")]
        roles += [(int(rng.integers(1, 5)), (int(rng.integers(1, 5)), int(rng.integers(1, 5))),
                   str(rng.choice(["", "A", "B", "AB"]))) for _ in range(30)]
        for wg, cl, mc in roles:
            what = f"arrival_counts({wg}, {cl}, {mc!r})"
            got = _call(c, what, arrival_counts, wg, cl, mc)
            try:
                pair = tuple(int(x) for x in got)
            except (TypeError, ValueError):  # not a pair of numbers (None, a float, a string)
                pair = None
            want = pipeline.arrival_counts(wg, cl, mc)
            if pair is None or len(pair) != 2:
                c.fail(what, want, got, hint="return a pair of ints: (FULL count, EMPTY count)")
            if pair != want:
                c.fail(what, want, pair, hint=_counts_hint(arrival_counts))
        c.ok(f"arrival_counts: {len(roles)} roles (cluster shapes, warpgroups, multicast A, B, both or neither), "
             "FULL and EMPTY as the model derives them")
        cases = _init_cases(rng)
        for case in cases:
            stages, full, empty, wg, cl, mc, bars = case
            what = f"init_problems({stages}, {full}, {empty}, {wg}, {cl}, {mc!r}, {bars})"
            got = _call(c, what, init_problems, stages, full, empty, wg, cl, mc, dict(bars))
            if not isinstance(got, list | tuple) or not all(isinstance(p, str) for p in got):
                c.fail(what, "a list of sentences", got, hint="return a list of str, empty when the set-up is sound")
            found = []
            for p in got:
                topic = _topic(p)
                if topic is None:
                    c.fail(f"{what}: a sentence that does not say what it is about", "one of stages, FULL, EMPTY, "
                           "named barrier <id> in it", p, hint="name the topic in each sentence, e.g. 'EMPTY "
                           "initialised with 2, but 4 arrive per phase'")
                found.append(topic)
            want = _topics(*case)
            if sorted(found) != want:
                c.fail(what, want or "no problem", sorted(found) or "no problem",
                       hint=_problems_hint(case, want, sorted(found)))
            for p in got:
                topic = _topic(p)
                if topic in ("FULL", "EMPTY"):
                    need = pipeline.arrival_counts(wg, cl, mc)[topic == "EMPTY"]
                    if str(need) not in re.findall(r"\d+", p):
                        c.fail(f"{what}: {p!r} does not say how many arrive", need, p,
                               hint="say the count the roles need (your arrival_counts), beside the one found")
        names = ", ".join(k.name for k in course_kernel_inits())
        c.ok(f"init_problems: {len(cases)} set-ups, every problem found and none made up (the course kernels' own: "
             f"{names})")
