"""The kernel checks the labs share, read from a kernel's PTX and compile report: the compile report's verdicts
(setmaxnreg kept, wgmma asynchronous, no spills) and the TMA-store epilogue (its rounding, its store's form, and the
order of its writes, fences, barriers, stores and waits run through the epilogue model). Labs 5, 6 and 7 grade their
epilogues with these; a lab's module says only what is particular to it."""

from __future__ import annotations

from typing import Any

from helpers.course import grading
from helpers.hopper import epilogue

from ._common import find_instrs, stream

__all__ = ["epilogue_ops_from_ptx", "report_checks", "check_epilogue_ptx", "KERNEL_RULE_HINTS"]


def epilogue_ops_from_ptx(ptx: str, entry: str, buffers: int = 2) -> tuple[list[list[tuple]], list[tuple], list[str]]:
    """The epilogue of a kernel as the model's operations, read from its PTX in text order after the last
    ``wgmma.wait_group 0``: a run of st.shared is one ("write", sub % buffers), fence.proxy.async ("fence",),
    bar.sync ("bar",), the TMA store ("store", sub % buffers), commit / wait_group(.read). Returns the ops of each
    sub-tile, the ops after the tile loop (past its back edge) or after the last store, and notes (e.g. a
    whole-block barrier)."""
    lines = stream(ptx, entry)
    waits = [i for i, ln in enumerate(lines) if ln.instr and ln.instr.opcode.startswith("wgmma.wait_group")
             and ln.instr.operands.strip() == "0"]
    start = waits[-1] + 1 if waits else 0
    labels = {ln.label: i for i, ln in enumerate(lines) if ln.label}
    flat: list[tuple[int, tuple]] = []
    notes: list[str] = []
    back_edges: list[int] = []
    writing, subs = False, 0
    for i in range(start, len(lines)):
        ln = lines[i]
        if ln.target is not None and labels.get(ln.target, len(lines)) < start:  # the tile loop's back edge
            back_edges.append(len(flat))
        if ln.instr is None:
            continue
        op, args = ln.instr.opcode, ln.instr.operands.strip()
        if op.startswith("st.shared"):
            if not writing:
                flat.append((i, ("write", subs % buffers)))
            writing = True
            continue
        if op.startswith("fence.proxy.async"):
            kind: tuple | None = ("fence",)
        elif op.split(".")[0] in ("bar", "barrier") and ".sync" in op and "cluster" not in op:
            if args in ("0", ""):
                notes.append("a whole-block barrier (bar.sync 0 / __syncthreads) in the epilogue: the producer "
                             "warpgroup never reaches it")
            kind = ("bar",)
        elif op.startswith("cp.async.bulk.tensor") and ".global.shared::cta" in op:
            kind = ("store", subs % buffers)
            subs += 1
        elif op == "cp.async.bulk.commit_group":
            kind = ("commit",)
        elif op.startswith("cp.async.bulk.wait_group"):
            kind = ("wait_read" if op.endswith(".read") else "wait", int(args) if args.isdigit() else 0)
        else:
            continue
        writing = False
        flat.append((i, kind))
    last_store = max((k for k, (_, o) in enumerate(flat) if o[0] == "store"), default=-1)
    cut = last_store + 1
    later_edges = [b for b in back_edges if b > last_store]
    if later_edges:
        cut = later_edges[0]
    body, final = [o for _, o in flat[:cut]], [o for _, o in flat[cut:]]
    chunks: list[list[tuple]] = [[]]
    for o in body:
        if o[0] == "write" and any(x[0] == "write" for x in chunks[-1]):
            chunks.append([])
        chunks[-1].append(o)
    if chunks == [[]]:
        chunks = []
    return chunks, final, notes


def report_checks(c: grading.Check, report: Any, *, spills_allowed: bool = False) -> None:
    c.ok(f"compiles: {report.summary()}")
    c.true("setmaxnreg is kept (ptxas did not ignore it: __launch_bounds__(384, 1))",
           report.uses_setmaxnreg and not report.setmaxnreg_ignored,
           hint="keep __launch_bounds__(384, 1): with 384 alone ptxas cannot tell the entry register count")
    c.true("the compiler kept wgmma asynchronous (not serialized)", not report.wgmma_serialized,
           hint="see kernel.report.log for ptxas's C7510/C7511 notes")
    if not spills_allowed:
        c.true("no register spills", report.spill_bytes == 0,
               hint="the 128 accumulators must stay in registers: index d[] only with compile-time constants")


def _subtile_hint(lines: list[Any], chunks: list[list[tuple]]) -> str:
    """What the PTX shows when the epilogue is not 4 sub-tiles, each its shared-memory writes then its store: a loop
    left inside the epilogue, fewer stores, or the writes of several sub-tiles grouped before their stores."""
    waits = [i for i, ln in enumerate(lines) if ln.instr and ln.instr.opcode.startswith("wgmma.wait_group")
             and ln.instr.operands.strip() == "0"]
    start = waits[-1] + 1 if waits else 0
    labels = {ln.label: i for i, ln in enumerate(lines) if ln.label}
    inner = any(ln.target is not None and start <= labels.get(ln.target, -1) < i for i, ln in enumerate(lines)
                if i >= start)
    stores = sum(o[0] == "store" for ch in chunks for o in ch)
    found = f"found {len(chunks)} group(s) of shared-memory writes and {stores} TMA store(s) after the mainloop"
    if inner and stores < 4:
        return (f"{found}, inside a loop the compiler did not unroll (a branch goes back within the epilogue): put "
                "#pragma unroll on the sub-tile loop (its trip count a constant), so each sub-tile's buffer is known")
    if stores != 4:
        return f"{found}: the tile leaves as 4 sub-tiles of 64×64, one TMA store each"
    return (f"{found}: the 4 stores are there, but the writes are not one group per sub-tile: each sub-tile's "
            "writes, then its fence, barrier and store, before the next sub-tile's writes")


def check_epilogue_ptx(c: grading.Check, ptx: str, entry: str, *, tiles: int, final_required: bool) -> None:
    """The static checks of the epilogue both labs share: rounding instruction, the TMA store's full form, and the
    order of writes, fences, barriers, stores and waits run through the epilogue model."""
    lines = stream(ptx, entry)
    opcodes = [ln.instr.opcode for ln in lines if ln.instr]
    if any(o.startswith("cvt.rz") and "bf16" in o for o in opcodes):
        c.fail("the accumulators are converted with cvt.rz (toward zero)",
               hint="round to nearest: __floats2bfloat162_rn (cvt.rn.bf16x2.f32)")
    c.true("the accumulators are rounded to bf16 with cvt.rn.bf16x2.f32 (round to nearest even)",
           "cvt.rn.bf16x2.f32" in opcodes,
           hint="convert each register pair with __floats2bfloat162_rn(d[j], d[j + 1]); shifting the bits "
                "truncates")
    stores = find_instrs(ptx, "cp.async.bulk.tensor", entry)
    stores = [s for s in stores if ".global.shared::cta" in s.opcode]
    c.true("the sub-tiles leave through cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
           bool(stores) and all(s.opcode == "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
                                for s in stores),
           hint="hopper::tma_store_2d(&tmap_c, buf, column, row), one per 64×64 sub-tile")
    chunks, final, notes = epilogue_ops_from_ptx(ptx, entry)
    if notes:
        c.fail("the epilogue's barrier", detail="    " + notes[0],
               hint="use the warpgroup's named barrier: hopper::named_bar_sync(1 + c, 128)")
    c.true("the epilogue stores 4 sub-tiles per tile (the sub-tile loop unrolled)", len(chunks) == 4,
           hint=_subtile_hint(lines, chunks))
    if final_required and not any(o[0] in ("wait", "wait_read") and o[1] == 0 for o in final):
        c.fail("no cp.async.bulk.wait_group 0 after the last store",
               hint="before the block exits, thread 0 waits until every store has read its buffer: "
                    "hopper::tma_store_wait<0>()")
    try:
        result = epilogue.run(chunks, len(chunks), 2, tiles=tiles, final=final)
    except epilogue.EpilogueError as exc:
        c.fail(f"the epilogue's order, read from the PTX ({exc.rule})", detail=f"    {str(exc).split('] ', 1)[-1]}",
               hint=KERNEL_RULE_HINTS.get(exc.rule, ""))
    waits = sorted({o[1] for ch in chunks for o in ch if o[0] == "wait_read"})
    ideal = [min(i + 1, 2) for i in range(len(chunks))] if tiles == 1 else [2] * (len(chunks) * tiles - 1)
    got = result.in_flight_after_store if tiles == 1 else result.in_flight_after_store[1:]
    if got != ideal:
        c.fail("the epilogue waits more than it must", ideal, got,
               hint=f"your cp.async.bulk.wait_group.read {waits}: with two buffers one store may stay in flight: "
                    "hopper::tma_store_wait_read<1>()")
    c.ok("read from the PTX and run on the epilogue model: st.shared → fence.proxy.async → bar.sync → store → "
         f"commit_group; wait_group.read {waits} then bar.sync before a buffer is reused"
         + (f"; {tiles} tiles in a row with the stores left in flight across tiles" if tiles > 1 else ""))


KERNEL_RULE_HINTS = {
    "unfenced-store": "hopper::fence_proxy_async() after stage_subtile, by every thread, before the named barrier",
    "fence-after-barrier": "stage_subtile, then fence_proxy_async(), then named_bar_sync(1 + c, 128), then the store",
    "unsynced-store": "hopper::named_bar_sync(1 + c, 128) between the fence and thread 0's store",
    "overwrite-in-flight": "before writing a buffer again: thread 0 hopper::tma_store_wait_read<1>(), then "
                           "hopper::named_bar_sync(1 + c, 128); and hopper::tma_store_commit() after every store",
    "exit-in-flight": "hopper::tma_store_commit() after each store and hopper::tma_store_wait<0>() before the end",
}
