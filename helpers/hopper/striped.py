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
    "reduce_add", "warp_sectors", "untouched", "StripeError",
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
