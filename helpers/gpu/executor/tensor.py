"""The asynchronous engines: TMA (cp.async.bulk.tensor loads, multicast and stores through helpers.hopper.tma), plain
bulk copies, bulk commit/wait groups, and WGMMA (wgmma.fence / mma_async / commit_group / wait_group through
helpers.hopper.wgmma's H100 numerics).

Every async operation is an event on the machine's queue (Machine.schedule): a TMA load lands (writes shared
memory, then complete_tx on its mbarrier) ``tma_latency`` cycles after it is issued; a wgmma computes from
shared memory ``wgmma_latency`` cycles after the fourth warp of its warpgroup issued it, and its accumulators
reach a warp's registers only at that warp's ``wgmma.wait_group`` (reading them earlier gives the old values, as
the hardware does not promise more). A hazard checker replaces the latencies by "the latest moment the memory
model allows" through the same schedule calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from helpers.hopper import tma as tma_mod
from helpers.hopper.mbarrier import MBarrierError
from helpers.hopper.tensormap import RuleError

from .barriers import get_barrier
from .machine import CTA, SHARED_WINDOW, Binder, ExecFault, Machine, _indices, count
from .memory import OFFSET_MASK, RANK_SHIFT, MemoryFault
from .parser import Addr, Imm, Reg, Vec
from .registry import ctl, decoder
from .work import log_of

TMAP_MAGIC = 0x50414D54_55484550  # "PEHUTMAP": the 128 parameter bytes of an emulated tensor map start so


# ------------------------------------------------------------------------------------------- helpers
def _smem_ref(mach: Machine, c: CTA, addr: int, cluster: bool = True) -> tuple[CTA, int]:
    """(cta, offset) of a shared::cluster (or shared::cta) address."""
    off = addr & OFFSET_MASK
    cta = c
    if cluster:
        r = addr >> RANK_SHIFT
        if r >= len(c.cluster.ctas):
            raise ExecFault("CUDA_ERROR_ILLEGAL_ADDRESS", f"a shared::cluster address of block rank {r} in a "
                            f"cluster of {len(c.cluster.ctas)}")
        cta = c.cluster.ctas[r]
    return cta, off


def tensor_map_at(mach: Machine, c: CTA, addr: int) -> Any:
    """The emulator's TensorMap whose 128-byte descriptor sits at generic address ``addr``."""
    from .memops import load

    if addr % 64:
        raise ExecFault("CUDA_ERROR_MISALIGNED_ADDRESS", f"a tensor map at {addr:#x}, which is not 64-byte aligned")
    raw = load(mach, "generic", np.arange(1), c, np.array([addr], np.uint64), np.dtype(np.uint64), 2)[0]
    if int(raw[0]) != TMAP_MAGIC or int(raw[1]) not in mach.tensor_maps:
        raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                        f"the TMA instruction's tensor map at {addr:#x} is not one the course built: on the emulator, "
                        "pass a map from gpu.tensor_map / gpu.tensor_map_2d / gpu.encode_tiled as the kernel's "
                        "`const __grid_constant__ CUtensorMap` argument")
    return mach.tensor_maps[int(raw[1])]


def _tma_fault(e: RuleError) -> ExecFault:
    error = "CUDA_ERROR_MISALIGNED_ADDRESS" if e.rule == "smem-alignment" else "CUDA_ERROR_ILLEGAL_INSTRUCTION"
    if e.rule in ("gmem-size",):
        error = "CUDA_ERROR_ILLEGAL_ADDRESS"
    return ExecFault(error, f"the TMA copy was refused: {e}")


def _gmem_of(mach: Machine, tmap: Any, where: Any, c: CTA, what: str) -> np.ndarray:
    """The global bytes from the map's address on; a map over freed memory (or none) faults, in words."""
    addr = tmap.global_address
    a = mach.memory.find(addr)
    if a is not None:
        return a.data[addr - a.base:a.size]
    gone = mach.memory.freed_at(addr)
    if gone is None:
        e = ExecFault("CUDA_ERROR_ILLEGAL_ADDRESS", f"the {what} goes through a tensor map whose global address "
                      f"{addr:#x} is not in any allocation")
    else:
        e = ExecFault("CUDA_ERROR_ILLEGAL_ADDRESS", f"the {what} goes through a tensor map over {gone} before the "
                      "kernel ran: a tensor map holds the array's address, not the array, and the array's last "
                      "reference went away (e.g. `gpu.tensor_map_2d(gpu.to_device(A), 64, 64)` written inline). On "
                      "the H100 the freed memory goes back to the pool and the next allocation may take it, so the "
                      "copy reads or writes that allocation's data. Keep the array in a variable until the kernel "
                      "has finished (`da = gpu.to_device(A)`, then `gpu.tensor_map_2d(da, 64, 64)`)")
    raise _located(mach, e, where, c)


def _bulk_state(c: CTA, t: int) -> dict:
    st = c.bulk.get(t)
    if st is None:
        st = {"open": [], "groups": []}
        c.bulk[t] = st
    return st


def _issuers(m: Any) -> list[int]:
    return _indices(m).tolist()


# ------------------------------------------------------------------------------------------- TMA
@decoder("cp")
def _cp(b: Binder) -> Any:
    q = b.q
    if q[:2] == ["async", "bulk"]:
        rest = q[2:]
        if rest and rest[0] == "tensor":
            return _tensor(b, rest[1:])
        if rest and rest[0] in ("commit_group", "wait_group"):
            return _bulk_group(b, rest)
        if rest and rest[0] == "prefetch":
            return lambda m, c: None
        return _bulk_copy(b, rest)
    if q[:1] == ["reduce"]:
        raise b.fail("cp.reduce.async.bulk (TMA reductions) is not emulated yet")
    if q[:1] == ["async"]:
        return _cp_async(b, q[1:])
    raise b.fail()


_CP_ASYNC_Q = {"ca", "cg", "shared", "shared::cta", "global", "L2::64B", "L2::128B", "L2::256B", "L2::cache_hint"}


def _cp_async(b: Binder, rest: list[str]) -> Any:
    """Ampere's ``cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size | ignore-src}``: the bytes land in
    shared memory when the copy is issued (the earliest moment the hardware may make them visible; a thread sees
    them for certain only after the ``cp.async.wait_group``/``wait_all`` that covers its group), the bytes past
    src-size, or all of them with ignore-src, as zeros. ``commit_group``/``wait_group``/``wait_all`` then have
    nothing left to wait for."""
    from .memops import global_load, smem_store

    if rest and rest[0] in ("commit_group", "wait_group", "wait_all"):
        return lambda m, c: None
    if rest and rest[0] == "mbarrier":
        raise b.fail("cp.async.mbarrier.arrive is not emulated")
    bad = [x for x in rest if x not in _CP_ASYNC_Q]
    if bad or not ({"ca", "cg"} & set(rest)):
        raise b.fail(f"qualifier .{bad[0]} is not emulated" if bad else "cp.async needs .ca or .cg")
    if "L2::cache_hint" in rest:
        raise b.fail("cp.async with an L2 cache policy operand is not emulated")
    ops = list(b.ops)
    dst = b.addr(ops[0])
    src = b.addr(ops[1])
    if not isinstance(ops[2], Imm) or ops[2].value not in (4, 8, 16):
        raise b.fail("cp-size must be the immediate 4, 8 or 16")
    size = int(ops[2].value)
    if "cg" in rest and size != 16:
        raise b.fail("cp.async.cg copies 16 bytes")
    src_size: Any = None
    ignore: Any = None
    if len(ops) > 3:
        extra = ops[3]
        if isinstance(extra, Reg) and b.reg(extra.name)[0] == "P":
            ignore = b.pred(extra)
        else:
            src_size = b.val(extra, "u32")
    mach = b.mach
    u8 = np.dtype(np.uint8)

    def copy(m: Any, c: CTA) -> None:
        n = count(m)
        da = np.broadcast_to(np.asarray(dst(m), np.uint64), (n,))
        sa = np.broadcast_to(np.asarray(src(m), np.uint64), (n,))
        if (da % np.uint64(size)).any() or (sa % np.uint64(size)).any():
            raise ExecFault("CUDA_ERROR_MISALIGNED_ADDRESS", f"cp.async of {size} bytes from or to an address that is "
                            f"not a multiple of {size}")
        sz = np.full(n, size, np.int64)
        if src_size is not None:
            sz = np.minimum(np.broadcast_to(np.asarray(src_size(m), np.int64), (n,)), size)
        if ignore is not None:
            sz = np.where(np.broadcast_to(np.asarray(ignore(m), bool), (n,)), 0, sz)
        data = np.zeros((n, size), np.uint8)
        full = sz == size
        if full.any():
            data[full] = np.asarray(global_load(mach, sa[full], u8, size)).reshape(-1, size)
        for k in range(size):  # partial copies, byte by byte (never past src-size: it may point nowhere)
            pick = (sz > k) & ~full
            if pick.any():
                data[pick, k] = np.asarray(global_load(mach, sa[pick] + np.uint64(k), u8, 1)).reshape(-1)
        smem_store(mach, c, da, data, u8, size)
        mach.since_progress = 0

    return copy


_TENSOR_Q = {"shared::cluster", "shared::cta", "global", "tile", "mbarrier::complete_tx::bytes", "multicast::cluster",
             "bulk_group", "L2::cache_hint", "1d", "2d", "3d", "4d", "5d", "L2", "prefetch"}


def _tensor(b: Binder, rest: list[str]) -> Any:
    bad = [x for x in rest if x not in _TENSOR_Q]
    if bad:
        raise b.fail(f"qualifier .{bad[0]} is not emulated")
    if "prefetch" in rest:
        return lambda m, c: None
    rank = int(rest[0][0])
    dst_first = rest[1] in ("shared::cluster", "shared::cta")
    mach = b.mach
    where = b.ins
    ops = list(b.ops)
    if dst_first:  # load: [dst], [tmap, {coords}], [mbar] {, ctaMask} {, policy}
        dst = b.addr(ops[0])
        tm = ops[1]
        bar = b.addr(ops[2])
        multicast = "multicast::cluster" in rest
        mask = b.val(ops[3], "u16") if multicast else None
    else:  # store: [tmap, {coords}], [src]
        tm = ops[0]
        src = b.addr(ops[1])
    if not isinstance(tm, Addr) or tm.coords is None or len(tm.coords.items) != rank:
        raise b.fail(f"a {rank}-d tensor copy needs [tensorMap, {{{rank} coordinates}}]")
    tmap_r = b.addr(Addr(tm.base, tm.offset))
    coords = [b.val(x, "s32") for x in tm.coords.items]
    cluster = rest[1] == "shared::cluster"

    if dst_first:
        @ctl
        def load(m: Any, c: CTA) -> None:
            n = count(m)
            ta = np.broadcast_to(np.asarray(tmap_r(m), np.uint64), (n,))
            da = np.broadcast_to(np.asarray(dst(m), np.uint64), (n,))
            ba = np.broadcast_to(np.asarray(bar(m), np.uint64), (n,))
            cs = [np.broadcast_to(np.asarray(f(m), np.int32), (n,)) for f in coords]
            ms = np.broadcast_to(np.asarray(mask(m), np.uint16), (n,)) if mask is not None else None
            for k in range(n):
                tmap = tensor_map_at(mach, c, int(ta[k]))
                xy = [int(x[k]) for x in cs]
                dcta, doff = _smem_ref(mach, c, int(da[k]), cluster)
                _, boff = _smem_ref(mach, c, int(ba[k]), cluster)
                targets = [dcta]
                if ms is not None:
                    bits = int(ms[k])
                    targets = [c.cluster.ctas[r] for r in range(len(c.cluster.ctas)) if bits >> r & 1]
                    if bits >> len(c.cluster.ctas):
                        raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                                        f"a multicast mask {bits:#x} names blocks outside the cluster of "
                                        f"{len(c.cluster.ctas)}")
                try:
                    tma_mod._check_coords(tmap, xy, doff, store=False)
                except RuleError as e:
                    raise _tma_fault(e) from None
                if doff + tma_mod.smem_footprint(tmap) > mach.smem_bytes:
                    raise ExecFault("CUDA_ERROR_ILLEGAL_ADDRESS",
                                    f"the TMA box ({tma_mod.smem_footprint(tmap)} bytes at shared offset {doff:#x}) "
                                    f"runs past the block's {mach.smem_bytes} bytes of shared memory")
                _launch_load(mach, c, tmap, xy, targets, doff, boff, where)

        return load

    @ctl
    def store(m: Any, c: CTA) -> None:
        n = count(m)
        ta = np.broadcast_to(np.asarray(tmap_r(m), np.uint64), (n,))
        sa = np.broadcast_to(np.asarray(src(m), np.uint64), (n,))
        cs = [np.broadcast_to(np.asarray(f(m), np.int32), (n,)) for f in coords]
        for k, t in enumerate(_issuers(m)):
            tmap = tensor_map_at(mach, c, int(ta[k]))
            xy = [int(x[k]) for x in cs]
            _, soff = _smem_ref(mach, c, int(sa[k]), False)
            try:
                tma_mod._check_coords(tmap, xy, soff, store=True)
            except RuleError as e:
                raise _tma_fault(e) from None
            _launch_store(mach, c, t, tmap, xy, soff, where)

    return store


def _launch_load(mach: Machine, c: CTA, tmap: Any, coords: list[int], targets: list[CTA], doff: int, boff: int,
                 where: Any) -> None:
    nbytes = tma_mod.tx_bytes(tmap)
    log_of(mach).loaded(targets, doff, tmap, coords)
    bar0 = c.barriers.get(boff)
    bname, phase = (bar0.name, bar0.phase) if bar0 is not None else ("", -1)
    mach.copy_seq += 1
    seq = mach.copy_seq

    def land() -> None:
        gmem = _gmem_of(mach, tmap, where, c, "TMA load")
        if mach.opts.trace:
            mach.event(c, -1, "tma_landed", bname, phase, -1, f"copy {seq}: {nbytes} bytes at {doff:#x}")
        for cta in targets:
            if not cta.alive:
                continue
            try:
                tma_mod.load_tile(tmap, gmem, coords, smem_address=doff, smem=cta.smem)
            except RuleError as e:
                raise _located(mach, _tma_fault(e), where, c) from None
            bar = cta.barriers.get(boff) or get_barrier(mach, cta, boff)
            try:
                bar.complete_tx(nbytes)
            except MBarrierError as e:
                raise _located(mach, ExecFault("CUDA_ERROR_LAUNCH_FAILED", str(e)), where, c) from None

    if mach.hz is not None:
        what = "TMA multicast load" if len(targets) > 1 or targets[0] is not c else "TMA load"
        mach.hz.copy_issued(c, what, [(cta, doff, boff) for cta in targets], tma_mod.smem_footprint(tmap), nbytes,
                            land)
    else:
        mach.schedule(c, mach.opts.tma_latency, land)
    mach.since_progress = 0
    if mach.opts.trace:
        mach.event(c, c.cur_warp - c.w0, "tma_issue", bname, phase, -1, f"copy {seq}: {nbytes} bytes to {doff:#x}")


def _launch_store(mach: Machine, c: CTA, t: int, tmap: Any, coords: list[int], soff: int, where: Any) -> None:
    log_of(mach).stored(c, tmap, coords)
    st = _bulk_state(c, t)
    op = {"read": False, "done": False}
    st["open"].append(op)
    snap: dict = {}

    def read() -> None:
        if op["read"]:
            return
        snap["img"] = c.smem[soff:soff + tma_mod.smem_footprint(tmap)].copy()
        op["read"] = True
        c.pending_reads.remove(read)
        mach.wake(("bulk", c.slot))

    c.pending_reads.append(read)  # a block that exits first keeps its shared memory until the copy has read it

    def write() -> None:
        gmem = _gmem_of(mach, tmap, where, c, "TMA store")
        try:
            tma_mod.store_tile(tmap, snap["img"], gmem, coords, smem_address=soff)
        except RuleError as e:
            raise _located(mach, _tma_fault(e), where, c) from None
        op["done"] = True
        mach.wake(("bulk", c.slot))

    op["read_fn"], op["write_fn"] = read, write
    if mach.opts.trace:
        mach.event(c, c.cur_warp - c.w0, "store_issue", "", -1, -1, f"TMA store from {soff:#x}")
    if mach.hz is not None:  # the latest moment: the wait_group that covers it (or the block's exit)
        mach.hz.store_issued(c, t, soff, tma_mod.smem_footprint(tmap), op)
    else:
        mach.schedule(c, mach.opts.tma_latency // 2, read)
        mach.schedule(c, mach.opts.tma_latency, write)
    mach.since_progress = 0


def _located(mach: Machine, e: ExecFault, ins: Any, c: CTA) -> ExecFault:
    cell = f"line {ins.cell_line} of the CUDA source, " if ins.cell_line else ""
    e.where = f"(at {cell}PTX line {ins.line}: `{ins.text}`; block {c.label})"
    return e


_BULK_Q = {"shared::cluster", "shared::cta", "global", "mbarrier::complete_tx::bytes", "bulk_group",
           "multicast::cluster", "L2::cache_hint"}


def _bulk_copy(b: Binder, rest: list[str]) -> Any:
    bad = [x for x in rest if x not in _BULK_Q]
    if bad:
        raise b.fail(f"qualifier .{bad[0]} is not emulated")
    if "multicast::cluster" in rest:
        raise b.fail("multicast bulk copies are not emulated")
    mach = b.mach
    where = b.ins
    dst = b.addr(b.ops[0])
    src = b.addr(b.ops[1])
    size = b.val(b.ops[2], "u32")
    to_shared = rest[0].startswith("shared")
    from_shared = rest[1].startswith("shared") if len(rest) > 1 else False
    bar = b.addr(b.ops[3]) if to_shared else None

    @ctl
    def bulk(m: Any, c: CTA) -> None:
        n = count(m)
        da = np.broadcast_to(np.asarray(dst(m), np.uint64), (n,))
        sa = np.broadcast_to(np.asarray(src(m), np.uint64), (n,))
        sz = np.broadcast_to(np.asarray(size(m), np.uint32), (n,))
        ba = np.broadcast_to(np.asarray(bar(m), np.uint64), (n,)) if bar is not None else None
        for k, t in enumerate(_issuers(m)):
            nbytes = int(sz[k])
            d, s = int(da[k]), int(sa[k])
            if nbytes % 16 or d % 16 or s % 16:
                raise ExecFault("CUDA_ERROR_MISALIGNED_ADDRESS",
                                f"a bulk copy of {nbytes} bytes from {s:#x} to {d:#x}: size and both addresses must "
                                "be multiples of 16")
            if to_shared:
                dcta, doff = _smem_ref(mach, c, d, True)
                _, boff = _smem_ref(mach, c, int(ba[k]), True)

                def land(dcta=dcta, doff=doff, boff=boff, s=s, nbytes=nbytes) -> None:
                    if from_shared:
                        scta, soff = _smem_ref(mach, c, s, False)
                        data = scta.smem[soff:soff + nbytes].copy()
                    else:
                        data = mach.memory.read_bytes(s, nbytes).copy()
                    dcta.smem[doff:doff + nbytes] = data
                    bb = dcta.barriers.get(boff) or get_barrier(mach, dcta, boff)
                    try:
                        bb.complete_tx(nbytes)
                    except MBarrierError as e:
                        raise _located(mach, ExecFault("CUDA_ERROR_LAUNCH_FAILED", str(e)), where, c) from None

                if mach.hz is not None:
                    mach.hz.copy_issued(c, "bulk copy", [(dcta, doff, boff)], nbytes, nbytes, land)
                else:
                    mach.schedule(c, mach.opts.tma_latency, land)
            else:
                st = _bulk_state(c, t)
                op = {"read": False, "done": False}
                st["open"].append(op)
                _, soff = _smem_ref(mach, c, s, False)
                snap: dict = {}

                def read(soff=soff, nbytes=nbytes, op=op, snap=snap) -> None:
                    if op["read"]:
                        return
                    snap["v"] = c.smem[soff:soff + nbytes].copy()
                    op["read"] = True
                    c.pending_reads[:] = [f for f in c.pending_reads if f is not read]
                    mach.wake(("bulk", c.slot))

                c.pending_reads.append(read)

                def write(d=d, op=op, snap=snap, nbytes=nbytes) -> None:
                    try:
                        mach.memory.store(np.array([d], np.uint64), snap["v"].reshape(1, -1), np.dtype(np.uint8),
                                          nbytes)
                    except MemoryFault as e:
                        raise _located(mach, ExecFault(e.error, e.detail), where, c) from None
                    op["done"] = True
                    mach.wake(("bulk", c.slot))

                op["read_fn"], op["write_fn"] = read, write
                if mach.hz is not None:
                    mach.hz.store_issued(c, t, soff, nbytes, op)
                else:
                    mach.schedule(c, mach.opts.tma_latency // 2, read)
                    mach.schedule(c, mach.opts.tma_latency, write)
        mach.since_progress = 0

    return bulk


def _bulk_group(b: Binder, rest: list[str]) -> Any:
    mach = b.mach
    pc = b.pc
    if rest[0] == "commit_group":
        if len(rest) > 1:
            raise b.fail()

        def commit(m: Any, c: CTA) -> None:
            for t in _issuers(m):
                st = _bulk_state(c, t)
                st["groups"].append(st["open"])
                st["open"] = []

        return commit
    if any(x not in ("wait_group", "read") for x in rest):
        raise b.fail()
    if not isinstance(b.ops[0], Imm):
        raise b.fail("wait_group takes an immediate")
    keep = b.ops[0].value
    key = "read" if "read" in rest else "done"

    @ctl
    def wait(m: Any, c: CTA) -> bool:
        ok = []
        for t in _issuers(m):
            st = _bulk_state(c, t)
            groups = st["groups"]
            old = groups[:max(len(groups) - keep, 0)]
            if mach.hz is not None:  # hazard mode: the stores read (and write) only now, when waited for
                ops = [op for g in old for op in g]
                for op in ops:
                    if not op["read"]:
                        op["read_fn"]()
                    if key == "done" and not op["done"]:
                        op["write_fn"]()
                mach.hz.bulk_waited(c, t, ops, key == "read")
            ok.append(all(op[key] for g in old for op in g))
            if ok[-1]:
                st["groups"] = [g for g in groups if not all(op["done"] for op in g)]
        okv = np.array(ok)
        idx = _indices(m)
        mach.PC[idx[okv]] = pc + 1
        if not okv.all():
            mach.park(idx[~okv], c, ("bulk", c.slot), "bulk", pc, retry=True,
                      what="waits for bulk copies (cp.async.bulk.wait_group) that never finish")
        return True

    return wait


# ------------------------------------------------------------------------------------------- WGMMA
class _WGOp:
    __slots__ = ("seq", "n", "desc", "scale_d", "rows", "inputs", "result", "done", "pc", "count", "chain", "ins",
                 "hz_id", "n_cols", "kind", "a_regs")

    def __init__(self, seq: int, n: int, rows: np.ndarray, pc: int) -> None:
        self.seq = seq
        self.n = n
        self.rows = rows
        self.pc = pc
        self.desc: tuple[int, int] | None = None
        self.scale_d: bool | None = None
        self.inputs: dict[int, Any] = {}
        self.result: np.ndarray | None = None
        self.done = False
        self.count = 0
        self.chain: dict[int, Any] = {}
        self.ins: Any = None
        self.hz_id: int | None = None
        self.n_cols = n  # N of the instruction (``n`` counts accumulator registers x 2)
        self.kind: tuple = ("bf16", "bf16", "f32", False, False, False, False, False)
        self.a_regs: dict[int, np.ndarray] = {}


class _WG:
    def __init__(self) -> None:
        self.ops: list[_WGOp] = []
        self.issued = [0, 0, 0, 0]
        self.groups: list[list[int]] = [[], [], [], []]  # per warp: end sequence number of each committed group
        self.open_from = [0, 0, 0, 0]
        self.written = [0, 0, 0, 0]


def _wg_of(mach: Machine, c: CTA, m: Any) -> tuple[_WG, int, int, np.ndarray]:
    idx = _indices(m)
    wl = int(mach.WARPG[idx[0]]) - c.w0
    g = wl // 4
    if (g + 1) * 128 > mach.T:
        raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                        f"wgmma in warp {wl}: its warpgroup {g} needs all 4 warps (threads {128 * g}..{128 * g + 127}) "
                        f"but the block has {mach.T} threads")
    st = c.wg.get(g)
    if st is None:
        st = _WG()
        c.wg[g] = st
    return st, g, wl % 4, idx


@decoder("wgmma")
def _wgmma(b: Binder) -> Any:
    kind = b.q[0] if b.q else ""
    if kind == "fence":
        b.only({"fence", "sync", "aligned"})
        mach = b.mach
        if mach.hz is None:
            return _aligned(b, lambda m, c: None)
        return _aligned(b, lambda m, c: mach.hz.wgmma_fence(c, m))
    if kind == "commit_group":
        b.only({"commit_group", "sync", "aligned"})
        return _aligned(b, _wg_commit(b))
    if kind == "wait_group":
        b.only({"wait_group", "sync", "aligned"})
        return _aligned(b, _wg_wait(b))
    if kind == "mma_async":
        return _aligned(b, _wg_mma(b))
    raise b.fail()


def _aligned(b: Binder, op: Any) -> Any:
    """A ``.sync.aligned`` warpgroup instruction runs with the whole warp: lanes that arrive while others of the
    warp are still behind (parked inside a branch only one lane took, like the producer's) wait for them, as the
    convergence the compiler guarantees for .aligned instructions makes them on the GPU."""
    from .control import FULL
    from .machine import collective

    mach = b.mach
    pc = b.pc

    @ctl
    def run(m: Any, c: CTA) -> bool:
        if not (isinstance(m, slice) and m.stop - m.start == 32):
            g = collective(mach, m, c, pc, FULL)
            if g is None:
                return True
            m = g
        if op(m, c) is None:
            mach.PC[m] = pc + 1
        return True

    return run


def _wg_commit(b: Binder) -> Any:
    mach = b.mach

    def commit(m: Any, c: CTA) -> None:
        st, g, w, _ = _wg_of(mach, c, m)
        st.groups[w].append(st.issued[w])
        st.open_from[w] = st.issued[w]
        if mach.opts.trace:
            mach.event(c, 4 * g + w, "commit", "", -1, -1, f"group of wgmmas up to {st.issued[w]}")
        if mach.hz is not None:
            mach.hz.wgmma_commit(c, st, g, w)

    return commit


def _wg_wait(b: Binder) -> Any:
    if not isinstance(b.ops[0], Imm):
        raise b.fail("wait_group takes an immediate")
    keep = b.ops[0].value
    mach = b.mach
    pc = b.pc
    W = mach.view("W", np.dtype(np.uint32))

    @ctl
    def wait(m: Any, c: CTA) -> bool:
        st, g, w, idx = _wg_of(mach, c, m)
        groups = st.groups[w]
        upto = groups[len(groups) - keep - 1] if len(groups) > keep else 0
        if mach.hz is not None:  # hazard mode: a wgmma reads shared memory and computes only when waited for
            for op in st.ops[st.written[w]:upto]:
                if not op.done and op.count == 4:
                    _compute(mach, c, st, g, op, op.ins)
        if any(not op.done for op in st.ops[st.written[w]:upto]):
            if mach.opts.trace:
                mach.wait_began(c, c.w0 + 4 * g + w, "wait_group", "", keep)
            return mach.park(m, c, ("wgmma", c.slot, g), "wgmma", pc, retry=True,
                             what=f"waits in wgmma.wait_group for wgmma of warpgroup {g} that the other warps of "
                                  "the warpgroup never issue (every warp of the warpgroup must issue each wgmma)")
        lo = mach.wlo[c.w0 + 4 * g + w]
        hi = mach.whi[c.w0 + 4 * g + w]
        for op in st.ops[st.written[w]:upto]:
            W[op.rows, lo:hi] = op.result[32 * w:32 * w + (hi - lo)].T
        st.written[w] = max(st.written[w], upto)
        if mach.opts.trace and mach.open_waits:
            mach.wait_ended(c, c.w0 + 4 * g + w, "wait_group")
        if mach.hz is not None:
            mach.hz.wgmma_waited(c, g, w, upto, keep)
        mach.PC[m] = pc + 1
        return True

    return wait


def _wg_mma(b: Binder) -> Any:
    from helpers.hopper.wgmma import K_OF

    q = b.q[1:]
    shape = next((x for x in q if x.startswith("m64n") and "k" in x), None)
    types = [x for x in q if x in ("f32", "f16", "bf16", "tf32", "e4m3", "e5m2", "s8", "u8", "s32")]
    bad = [x for x in q if x not in {"sync", "aligned", "satfinite"} and x != shape and x not in types]
    if shape is None or bad or len(types) != 3:
        raise b.fail("wgmma.mma_async.sync.aligned.m64nNkK.dtype.atype.btype with f16/bf16/tf32/e4m3/e5m2/s8/u8 "
                     "inputs is emulated")
    dty, aty, bty = types
    n_s, k_s = shape[4:].split("k")
    n, k = int(n_s), int(k_s)
    if aty not in K_OF or bty not in K_OF or K_OF[aty] != k or K_OF[bty] != k:
        raise b.fail(f"types .{aty}.{bty} with K = {k}")
    ints = aty in ("s8", "u8")
    if ints != (dty == "s32") or (aty in ("f16", "bf16") and aty != bty) or (aty == "tf32" and bty != "tf32") \
            or (dty == "f16" and aty in ("bf16", "tf32")):
        raise b.fail(f"accumulator .{dty} with .{aty}.{bty}")
    if n % 8 or not 8 <= n <= 256:
        raise b.fail(f"N = {n}")
    nreg = n // 4 if dty == "f16" else n // 2
    ops = list(b.ops)
    d = ops[0]
    if not isinstance(d, Vec) or len(d.items) != nreg:
        raise b.fail(f"m64n{n}k{k}.{dty} takes {nreg} accumulator registers")
    a_regs = isinstance(ops[1], Vec)
    want = 4 if ints else (6 if aty not in ("f16", "bf16") else (7 if a_regs else 8))
    if len(ops) != want:
        raise b.fail(f"{want} operands expected")
    neg = [False, False]
    if not ints:
        for i, (kk, name) in enumerate(((4, "imm-scale-a"), (5, "imm-scale-b"))):
            if not isinstance(ops[kk], Imm) or ops[kk].value not in (1, -1, (1 << 32) - 1):
                raise b.fail(f"{name} = {ops[kk]!r}: 1 or -1")
            neg[i] = ops[kk].value != 1
    trans = [False, False]
    if aty in ("f16", "bf16"):
        names = ["imm-trans-b"] if a_regs else ["imm-trans-a", "imm-trans-b"]
        for kk, tname in zip(range(6, want), names, strict=True):
            if not isinstance(ops[kk], Imm) or ops[kk].value not in (0, 1):
                raise b.fail(f"{tname} = {ops[kk]!r}: 0 (K-major) or 1 (MN-major)")
            trans[1 if tname == "imm-trans-b" else 0] = ops[kk].value == 1
    rows = []
    for r in d.items:
        if not isinstance(r, Reg):
            raise b.fail("accumulators must be registers")
        bank, row, _ = b.reg(r.name)
        if bank != "W":
            raise b.fail("accumulators must be 32-bit registers")
        rows.append(row)
    kind = (aty, bty, dty, neg[0], neg[1], "satfinite" in q, trans[0], trans[1])
    a_readers = None
    if a_regs:
        if len(ops[1].items) != 4:
            raise b.fail("A from registers takes 4 registers")
        a_readers = [b.val(r, "b32") for r in ops[1].items]
    rows_a = np.array(rows)
    da = (lambda m: np.zeros(count(m), np.uint64)) if a_regs else b.val(ops[1], "b64")
    db = b.val(ops[2], "b64")
    sd = b.pred(ops[3])
    mach = b.mach
    pc = b.pc
    W = mach.view("W", np.dtype(np.uint32))
    line = b.ins
    def issue(m: Any, c: CTA) -> None:
        st, g, w, idx = _wg_of(mach, c, m)
        if len(idx) != 32:
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                            "wgmma.mma_async with part of a warp (every lane must execute .sync.aligned "
                            "instructions together)")
        seq = st.issued[w]
        st.issued[w] += 1
        if seq == len(st.ops):
            st.ops.append(_WGOp(seq, n, rows_a, pc))
            st.ops[-1].ins = line
        op = st.ops[seq]
        if op.pc != pc:
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                            f"warps of warpgroup {g} issued different wgmma instructions as their wgmma number {seq} "
                            "(every warp of the warpgroup must issue the same sequence)")
        a_desc = np.unique(np.asarray(da(m), np.uint64))
        b_desc = np.unique(np.asarray(db(m), np.uint64))
        s = np.unique(np.asarray(sd(m)))
        if len(a_desc) != 1 or len(b_desc) != 1 or len(s) != 1:
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                            "wgmma descriptors and scale-d must be the same in every thread of the warpgroup")
        desc = (int(a_desc[0]), int(b_desc[0]))
        if op.desc is None:
            op.desc, op.scale_d = desc, bool(s[0])
        elif op.desc != desc or op.scale_d != bool(s[0]):
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                            f"the warps of warpgroup {g} gave wgmma number {seq} different descriptors or scale-d")
        # accumulator input: a pending result on the same registers (chained in the async pipe), else registers
        prev = next((p for p in reversed(st.ops[st.written[w]:seq]) if np.array_equal(p.rows, rows_a)), None)
        lo, hi = (m.start, m.stop) if isinstance(m, slice) else (int(idx[0]), int(idx[-1]) + 1)
        op.chain[w] = prev
        op.inputs[w] = None if prev is not None else W[rows_a, lo:hi].T.copy()
        op.kind = kind
        if a_readers is not None:
            op.a_regs[w] = np.stack([np.broadcast_to(np.asarray(f(m), np.uint32), (32,)) for f in a_readers], 1)
        op.count += 1
        if op.count == 1:
            log_of(mach).mma(c, g, desc[0], desc[1], n)
        if mach.hz is not None:
            mach.hz.wgmma_issue(c, st, g, w, op, n)
        if mach.opts.trace:
            mach.event(c, int(mach.WARPG[idx[0]]) - c.w0, "wgmma_issue", "", -1, -1, f"wgmma {seq} of warpgroup {g}")
        if op.count == 4:
            if mach.hz is not None:  # computed at the wait_group that covers it; waiters may now retry
                mach.wake(("wgmma", c.slot, g))
            elif mach.opts.trace:  # a timeline: the block's tensor cores take one wgmma at a time
                start = max(c.clock, getattr(c, "tc_free", 0))
                c.tc_free = start + mach.opts.wgmma_latency
                mach.event(c, 4 * g, "wgmma", "", -1, -1, f"wgmma {seq} of warpgroup {g}", start, c.tc_free)
                mach.schedule(c, c.tc_free - c.clock, lambda: _compute(mach, c, st, g, op, line))
            else:
                mach.schedule(c, mach.opts.wgmma_latency, lambda: _compute(mach, c, st, g, op, line))
        mach.since_progress = 0

    return issue


def _compute(mach: Machine, c: CTA, st: _WG, g: int, op: _WGOp, ins: Any) -> None:
    from helpers.hopper import wgmma as wg

    regs = len(op.rows)
    acc = np.zeros((128, regs), np.uint32)
    for w in range(4):
        prev = op.chain.get(w)
        if prev is not None:
            if prev.result is None:
                raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION", "wgmma chained on an unfinished wgmma")
            acc[32 * w:32 * w + 32] = prev.result[32 * w:32 * w + 32]
        else:
            acc[32 * w:32 * w + 32] = op.inputs[w]
    aty, bty, dty, neg_a, neg_b, satf, tr_a, tr_b = op.kind
    a: Any = op.desc[0]
    if op.a_regs:
        a = np.concatenate([op.a_regs[w] for w in range(4)], axis=0)
    try:
        op.result = wg.mma_async_typed(c.smem, a, op.desc[1], op.n_cols, acc, int(op.scale_d), aty, bty, dty,
                                       neg_a, neg_b, satf, tr_a, tr_b)
    except RuleError as e:
        raise _located(mach, ExecFault("CUDA_ERROR_ILLEGAL_ADDRESS", f"wgmma refused: {e}"), ins, c) from None
    op.done = True
    mach.wake(("wgmma", c.slot, g))
    mach.note_progress()


__all__ = ["TMAP_MAGIC", "tensor_map_at", "SHARED_WINDOW", "MemoryFault"]
