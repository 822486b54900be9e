"""The protocol a lab teaches, checked on the executor's record of a run.

Each kernel lab declares its barriers' protocol (:class:`Protocol`): a ring of stages (:class:`Ring`: the producer
fills ``full[s]``, each fill read by ``readers`` consumer warpgroups of the block, each of which releases the stage
once on ``empty[s]`` of every block whose copies land there), and, for Lab 8, a sequence barrier (:class:`Turns`: the
consumer warpgroups take sections in turn through ``order[]`` slots). The executor records every warp's wait that
got through (the barrier, the parity it named, the phase it got through on) and every arrival, in order
(``helpers.gpu.executor.work.SyncOp``); :func:`check_protocol` reads that record against the declaration:

* a consumer's wait on ``full[s]`` gets through on a phase no wait of its warp got through on before (a wait that
  names the wrong parity gets through at once, on the phase before: the stage is read before its refill lands),
  never on a fresh barrier, and every fill is read by exactly ``readers`` warpgroups;
* each consumer warpgroup releases, in order, exactly the stages it read: its n-th release names the stage of its
  n-th read (a stale index at a tile's end releases another stage), no fewer (a last stage never released holds its
  stage forever, even where nothing waits on it again in this run) and no more;
* in a sequence barrier, warpgroup g's n-th section is entered by a wait on its slot ``order[(n % depth) ·
  len(groups) + g]`` on the phase the cursor names, and left by one arrival on the next warpgroup's slot of the same
  section, after that wait and before its next one (an arrival after the cursor moved on names the next section's
  slot).

Whatever order the run's timing gave, a kernel that breaks the protocol fails here: the record shows the slot and
the phase each wait named, not only the order that came out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from helpers.course import grading

from ._work import Launched, block_words

__all__ = ["Ring", "Turns", "Protocol", "check_protocol"]


@dataclass(frozen=True)
class Ring:
    """A ring of stages: ``full[s]`` completes when a fill lands, ``empty[s]`` when its readers released it.
    ``readers``: the consumer warpgroups of a block that read each fill (2 where both consumers read every stage,
    1 where the consumers take tiles in turn); ``producer``: the warpgroup that fills the ring."""

    full: str = "full"
    empty: str = "empty"
    readers: int = 2
    producer: int = 0


@dataclass(frozen=True)
class Turns:
    """A sequence barrier: ``groups`` (warpgroups, in turn order) take sections in turn; slot ``order[i · len(groups)
    + g]`` admits group g to section i of a ring of ``depth`` sections; ``first`` (an index into ``groups``) starts,
    its first wait getting through on the fresh barrier."""

    barrier: str = "order"
    groups: tuple[int, ...] = (1, 2)
    depth: int = 2
    first: int = 0


@dataclass(frozen=True)
class Protocol:
    """What a lab's kernel must do with its barriers, whatever its timing: a ring, a sequence barrier, or both;
    ``cluster``: the blocks of a cluster, each of which releases every block's stage its copies land in."""

    ring: Ring | None = None
    turns: Turns | None = None
    cluster: int = 1


# ------------------------------------------------------------------------------------------- reading the record
def _family(name: str) -> str:
    return name.split("[", 1)[0]


def _slot(name: str) -> int:
    try:
        return int(name[name.index("[") + 1:name.index("]")])
    except ValueError:
        return -1


def _per_warp(syncs: list[Any], family: str) -> dict[tuple[Any, int], list[Any]]:
    """Per (block, warp), its operations on barriers of ``family``, in order; a wait the warp's lanes got through in
    two pieces (on the same phase of the same barrier) counts once."""
    out: dict[tuple[Any, int], list[Any]] = defaultdict(list)
    for op in syncs:
        if _family(op.barrier) != family:
            continue
        seq = out[(op.block, op.warp)]
        last = seq[-1] if seq else None
        if (last is not None and op.kind == "wait" == last.kind and (op.owner, op.barrier, op.phase) ==
                (last.owner, last.barrier, last.phase) and op.lanes + last.lanes <= 32):
            seq[-1] = type(op)(**{**last.__dict__, "lanes": last.lanes + op.lanes})
            continue
        seq.append(op)
    return out


def _who(block: Any, warp: int, cluster: int) -> str:
    return f"warp {warp} (warpgroup {warp // 4}) of {block_words((block.ctaid[0], block.ctaid[1]), cluster)}"


def _wg_words(block: Any, group: int, cluster: int) -> str:
    return f"warpgroup {group} of {block_words((block.ctaid[0], block.ctaid[1]), cluster)}"


# ------------------------------------------------------------------------------------------- the ring
def _check_ring(c: grading.Check, run: Launched, ring: Ring, cluster: int, label: str, hint: str) -> int:
    log = run.log
    waits = _per_warp([s for s in log.syncs if s.kind == "wait"], ring.full)
    fills = {(e.block, e.name): e.phases for e in log.barriers if _family(e.name) == ring.full}
    readers: dict[tuple[Any, str, int], set[int]] = defaultdict(set)
    reads: dict[tuple[Any, int], list[Any]] = {}
    for (block, warp), seq in sorted(waits.items(), key=lambda kv: (kv[0][0].ctaid, kv[0][1])):
        group = warp // 4
        if group == ring.producer:
            continue
        seen: set[tuple[str, int]] = set()
        for n, op in enumerate(seq):
            who = _who(block, warp, cluster)
            if op.phase < 0:
                c.fail(f"{label}: {who}: its wait #{n + 1} on {op.barrier} named parity {op.parity} and got through on "
                       "the fresh barrier, before any fill landed: it read a stage the producer had not filled",
                       hint=hint)
            if (op.barrier, op.phase) in seen:
                c.fail(f"{label}: {who}: its wait #{n + 1} on {op.barrier} named parity {op.parity} and got through on "
                       f"phase {op.phase}, which an earlier wait of this warp got through on already: the wait names "
                       "a phase that had completed before, so the stage is read before its refill lands", hint=hint)
            seen.add((op.barrier, op.phase))
            readers[(block, op.barrier, op.phase)].add(group)
        reads.setdefault((block, group), seq)
    for (block, name), phases in sorted(fills.items(), key=lambda kv: (kv[0][0].ctaid, kv[0][1])):
        for phase in range(phases):
            got = readers.get((block, name, phase), set())
            if len(got) != ring.readers:
                groups = ", ".join(str(g) for g in sorted(got)) or "none"
                c.fail(f"{label}: {block_words((block.ctaid[0], block.ctaid[1]), cluster)}: fill #{phase} of "
                       f"{name} (its phase {phase}) was read by {len(got)} consumer warpgroup(s) (warpgroups "
                       f"{groups}); the protocol has {ring.readers} read each fill, each naming that phase in its wait",
                       hint=hint)
    # releases: each consumer warpgroup releases, in order, the stages it read, on every block its copies land in
    arrivals: dict[tuple[Any, int, Any], list[Any]] = defaultdict(list)
    for op in log.syncs:
        if op.kind != "arrive" or _family(op.barrier) != ring.empty or op.warp // 4 == ring.producer:
            continue
        seq = arrivals[(op.block, op.warp // 4, op.owner)]
        last = seq[-1] if seq else None
        if last is not None and last.barrier == op.barrier and op.warp not in last.warps:
            last.warps.add(op.warp)  # another warp of the warpgroup arriving with it: the same release
            continue
        seq.append(_Release(op.barrier, {op.warp}))
    owners: dict[Any, set[Any]] = defaultdict(set)
    blocks = {b for b, _ in reads}
    for b in blocks:
        owners[b] = {o for o in blocks if o.ctaid[0] // cluster == b.ctaid[0] // cluster
                     and o.ctaid[1:] == b.ctaid[1:]} if cluster > 1 else {b}
    count = 0
    for (block, group), seq in sorted(reads.items(), key=lambda kv: (kv[0][0].ctaid, kv[0][1])):
        stages = [_slot(op.barrier) for op in seq]
        for owner in sorted(owners[block], key=lambda o: o.ctaid):
            rel = [_slot(r.barrier) for r in arrivals.get((block, group, owner), [])]
            whose = "" if owner == block else \
                f" on {block_words((owner.ctaid[0], owner.ctaid[1]), cluster)} (its copies land there too)"
            who = _wg_words(block, group, cluster)
            for n, (want, got) in enumerate(zip(stages, rel, strict=False)):
                if want != got:
                    c.fail(f"{label}: {who}: its release #{n + 1}{whose} named {ring.empty}[{got}], but its "
                           f"read #{n + 1} was of {ring.full}[{want}]: each release names the stage its read used "
                           "(a stale index, at a tile's end or after the cursor moved on, releases another stage)",
                           hint=hint)
            if len(rel) < len(stages):
                c.fail(f"{label}: {who}: {len(rel)} release(s){whose} for {len(stages)} reads: the stage of its read "
                       f"#{len(rel) + 1} ({ring.full}[{stages[len(rel)]}]) was never released (each fill is released "
                       "once by every consumer that reads it, the last one too, even where nothing waits on it again "
                       "in this run)", hint=hint)
            if len(rel) > len(stages):
                c.fail(f"{label}: {who}: {len(rel)} releases{whose} for {len(stages)} reads: release "
                       f"#{len(stages) + 1} ({ring.empty}[{rel[len(stages)]}]) frees a stage it did not read, so the "
                       "producer may refill a stage that is still being read", hint=hint)
            count += len(rel)
    return count


@dataclass
class _Release:
    barrier: str
    warps: set[int]


# ------------------------------------------------------------------------------------------- the turns
def _check_turns(c: grading.Check, run: Launched, turns: Turns, cluster: int, label: str, hint: str) -> int:
    ops = _per_warp(run.log.syncs, turns.barrier)
    k = len(turns.groups)
    sections = 0
    for (block, warp), seq in sorted(ops.items(), key=lambda kv: (kv[0][0].ctaid, kv[0][1])):
        group = warp // 4
        if group not in turns.groups:
            continue
        i = turns.groups.index(group)
        who = _who(block, warp, cluster)
        n, waiting = 0, True
        for op in seq:
            slot = (n % turns.depth) * k
            if op.kind == "wait":
                if not waiting:
                    c.fail(f"{label}: {who}: waited on {op.barrier} for section {n + 1} before it handed section {n} "
                           "on: a section is left by one arrival on the next warpgroup's slot, "
                           f"{turns.barrier}[{slot + (i + 1) % k}], before the next wait", hint=hint)
                want = (n // turns.depth) - (1 if i == turns.first else 0)
                if _slot(op.barrier) != slot + i:
                    c.fail(f"{label}: {who}: entered its section {n} with a wait on {op.barrier}; the protocol admits "
                           f"warpgroup {group} to section {n} through {turns.barrier}[{slot + i}] (the section's index "
                           f"{n % turns.depth} · {k} + its place {i} in the turn)", hint=hint)
                if op.phase != want:
                    c.fail(f"{label}: {who}: its wait on {op.barrier} for section {n} named parity {op.parity} and got "
                           f"through on phase {op.phase}; section {n} is that slot's phase {want} (the cursor's phase "
                           "flips each time its index wraps; the warpgroup that starts waits for the phase a fresh "
                           "barrier has completed)", hint=hint)
                waiting = False
            else:
                want_slot = slot + (i + 1) % k
                if waiting:
                    c.fail(f"{label}: {who}: arrived on {op.barrier} before it had entered section {n} (no wait "
                           "since its last arrival): a section is entered with a wait, left with one arrival",
                           hint=hint)
                if _slot(op.barrier) != want_slot:
                    c.fail(f"{label}: {who}: handed its section {n} on through {op.barrier}; the protocol hands it on "
                           f"through {turns.barrier}[{want_slot}], the next warpgroup's slot of the same section: "
                           "arrive before the cursor moves on to the next section", hint=hint)
                waiting = True
                n += 1
        sections = max(sections, n)
    return sections


def check_protocol(c: grading.Check, run: Launched, protocol: Protocol, *, label: str, ring_hint: str = "",
                   turns_hint: str = "") -> None:
    """Grade one launch's record (``run.log.syncs``, the executor's) against ``protocol``: see the module's text."""
    if run.log is None or not getattr(run.log, "syncs", None):
        return
    said = []
    if protocol.ring is not None:
        n = _check_ring(c, run, protocol.ring, protocol.cluster, label, ring_hint)
        said.append(f"every wait on {protocol.ring.full}[s] named the phase of a fill not read before, each fill read "
                    f"by {protocol.ring.readers} consumer warpgroup(s), and each of them released, in order, exactly "
                    f"the stages it read ({n} releases)")
    if protocol.turns is not None:
        n = _check_turns(c, run, protocol.turns, protocol.cluster, label, turns_hint)
        said.append(f"every section entered by a wait on its own slot of {protocol.turns.barrier}[] on the phase the "
                    f"cursor names and left by one arrival on the next warpgroup's slot ({n} sections a warp at most)")
    if said:
        c.ok(f"{label}: the protocol, as the emulator recorded it: " + "; ".join(said))
