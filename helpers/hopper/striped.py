"""Block-striped movement: ``T`` threads move a run of elements, thread ``t`` touching ``t, T + t, 2T + t, …``.

Register ``j`` of thread ``t`` is element ``j·T + t``: at every register index the threads of a warp touch 32
consecutive elements (one 128-byte line of fp32: coalesced), and every element has exactly one owner. This is how
the Stream-K kernel (``bench/kernels/lab9_streamk.cu``) moves its partial accumulators through the workspace: each
consumer warpgroup (128 threads × 128 fp32 registers) owns 16384 consecutive elements of a block's slot, register
``j`` of its thread ``t`` at ``c·16384 + j·128 + t``. Nobody else ever reads the slot in the tile's layout, so it
may be in *register* order: only the same thread finds its registers again.

Pure numpy: :func:`offsets` (where each register goes), :func:`owner_map`, :func:`indices`, the moves
:func:`store`, :func:`load`, :func:`load_add` (exact, in fp32, like ``d[j] += __ldcg(…)``) and
:func:`reduce_add` (atomic adds from several blocks, in an order you pass: not deterministic), and
:func:`warp_sectors` (how many 32-byte sectors each warp-wide access touches: 4 when coalesced).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "indices", "offsets", "blocked_offsets", "kernel_offsets", "owner_map", "store", "load", "load_add",
    "reduce_add", "warp_sectors", "untouched", "StripeError", "vector_width", "accesses_per_thread",
    "reduce_add_bf16x2",
]


class StripeError(ValueError):
    """Registers and workspace that do not fit together (the message gives both shapes)."""


def indices(thread: int, threads: int, elements: int) -> np.ndarray:
    """Elements thread ``thread`` of ``threads`` touches in a run of ``elements``: t, T+t, 2T+t, …"""
    if not 0 <= thread < threads:
        raise StripeError(f"thread {thread} of {threads}: the thread index is 0..{threads - 1}")
    return np.arange(thread, elements, threads)


def offsets(threads: int, registers: int) -> np.ndarray:
    """(threads, registers) element index of register j of thread t: ``j·T + t`` (block-striped)."""
    return np.arange(registers)[None, :] * threads + np.arange(threads)[:, None]


def blocked_offsets(threads: int, registers: int) -> np.ndarray:
    """The other obvious layout, each thread's registers contiguous: ``t·R + j`` (not coalesced)."""
    return np.arange(threads)[:, None] * registers + np.arange(registers)[None, :]


def kernel_offsets(warpgroups: int = 2, threads: int = 128, registers: int = 128) -> np.ndarray:
    """(warpgroups·threads, registers): the Lab 9 kernel's slot layout, ``c·T·R + j·T + t`` for thread t of
    consumer warpgroup c (each warpgroup stripes its own half)."""
    per = offsets(threads, registers)
    return np.concatenate([c * threads * registers + per for c in range(warpgroups)])


def owner_map(threads: int, elements: int, layout: str = "striped", registers: int | None = None) -> np.ndarray:
    """(elements,) the thread that owns each element (``-1`` where no thread's register lands)."""
    regs = registers if registers is not None else -(-elements // threads)
    offs = offsets(threads, regs) if layout == "striped" else blocked_offsets(threads, regs)
    owner = np.full(elements, -1, np.int64)
    t = np.broadcast_to(np.arange(threads)[:, None], offs.shape)
    inside = offs < elements
    owner[offs[inside]] = t[inside]
    return owner


def _check(ws: np.ndarray, regs: np.ndarray) -> tuple[int, int]:
    if regs.ndim != 2:
        raise StripeError(f"registers of shape {regs.shape}: expected (threads, registers)")
    t, r = regs.shape
    if ws.ndim != 1 or ws.size < t * r:
        raise StripeError(f"workspace of shape {ws.shape} for {t} threads × {r} registers: a flat array of at "
                          f"least {t * r} elements")
    return t, r


def store(ws: np.ndarray, regs: np.ndarray) -> None:
    """Every thread stores its registers block-striped: ``ws[j·T + t] = regs[t, j]`` (in place)."""
    t, r = _check(ws, regs)
    ws[offsets(t, r)] = regs


def load(ws: np.ndarray, threads: int, registers: int) -> np.ndarray:
    """Every thread loads its stripes: ``regs[t, j] = ws[j·T + t]``."""
    return ws[offsets(threads, registers)].copy()


def load_add(ws: np.ndarray, regs: np.ndarray) -> np.ndarray:
    """``regs[t, j] + ws[j·T + t]`` in fp32 (what ``d[j] += __ldcg(ws + j·T)`` leaves in the registers)."""
    t, r = _check(ws, regs)
    return (regs.astype(np.float32) + ws[offsets(t, r)].astype(np.float32)).astype(np.float32)


def reduce_add(ws: np.ndarray, partials: Sequence[np.ndarray], order: Sequence[int]) -> None:
    """Atomic adds of several blocks' registers into the workspace, applied in ``order`` (block indices): each
    ``red.global.add.f32`` is exact per element, but the order the blocks get there is up to the hardware."""
    for i in order:
        t, r = _check(ws, partials[i])
        idx = offsets(t, r)
        ws[idx] = (ws[idx].astype(np.float32) + partials[i].astype(np.float32)).astype(np.float32)


def warp_sectors(offs: np.ndarray, element_bytes: int = 4, sector: int = 32) -> np.ndarray:
    """(warps, registers): 32-byte sectors one warp-wide access of register j touches (4 for 32 consecutive fp32)."""
    t, r = offs.shape
    warps = -(-t // 32)
    out = np.zeros((warps, r), np.int64)
    for w in range(warps):
        lanes = offs[32 * w:32 * w + 32]
        out[w] = [np.unique(lanes[:, j] * element_bytes // sector).size for j in range(r)]
    return out


def untouched(ws: np.ndarray) -> np.ndarray:
    """Indices of a NaN-poisoned workspace that no store reached (still NaN)."""
    return np.flatnonzero(np.isnan(ws))


# ---------------------------------------------------------------------------------------------------------
# the element type decides the access: vector width from a static shape, packed 16-bit reductions
# ---------------------------------------------------------------------------------------------------------
def vector_width(elements: int, threads: int, element_bytes: int, max_bytes: int = 16) -> int:
    """Elements per access when ``threads`` move ``elements`` block-striped, the access a power of two of at most
    ``max_bytes`` (16: one ``ld.global.v4.b32``): the widest that divides the run, so every access is whole and
    aligned and no thread needs a scalar tail. Known at compile time only when the shape is (the reason a
    block-striped move wants a static shape)."""
    if element_bytes not in (2, 4, 8) or elements < 1 or threads < 1:
        raise StripeError(f"{elements} elements of {element_bytes} bytes over {threads} threads: elements and "
                          "threads at least 1, elements 16, 32 or 64 bits wide")
    width = max_bytes // element_bytes
    while width > 1 and elements % width:
        width //= 2
    return width


def accesses_per_thread(elements: int, threads: int, element_bytes: int, max_bytes: int = 16) -> int:
    """How many accesses the busiest thread makes at :func:`vector_width` (``ceil(elements / width / threads)``)."""
    width = vector_width(elements, threads, element_bytes, max_bytes)
    return -(-(elements // width) // threads)


def _bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """float64 → bf16 bits, round to nearest even (exact values in, one rounding)."""
    f = x.astype(np.float32)  # exact for the sums of two bf16 this model forms within 16 binades of each other
    u = f.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _flush(bits: np.ndarray) -> np.ndarray:
    """Subnormal bf16 (exponent field 0, fraction not 0) → signed zero: what a flush-to-zero add does."""
    sub = ((bits & 0x7F80) == 0) & ((bits & 0x7F) != 0)
    return np.where(sub, bits & 0x8000, bits).astype(np.uint16)


def reduce_add_bf16x2(ws: np.ndarray, partials: Sequence[np.ndarray], order: Sequence[int], *,
                      flush: bool = False) -> None:
    """``red.global.add.noftz.bf16x2`` from several blocks, in ``order``: each 32-bit word of ``ws`` (uint32)
    holds two bf16 (low half = the lower address), and one atomic adds both halves, each rounded to nearest
    even. ``.noftz`` keeps subnormal inputs and results; ``flush=True`` shows what a flushing add would lose."""
    for i in order:
        add = np.asarray(partials[i], np.uint32)
        if add.shape != ws.shape:
            raise StripeError(f"partial {i} of shape {add.shape} for a workspace of shape {ws.shape}")
        halves = []
        for shift in (0, 16):
            a = ((ws >> shift) & 0xFFFF).astype(np.uint16)
            b = ((add >> shift) & 0xFFFF).astype(np.uint16)
            if flush:
                a, b = _flush(a), _flush(b)
            r = _round_bf16(_bf16_value(a) + _bf16_value(b))
            halves.append(_flush(r) if flush else r)
        ws[...] = halves[0].astype(np.uint32) | (halves[1].astype(np.uint32) << 16)
