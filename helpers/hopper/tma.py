"""TMA tile copies and shared-memory swizzle, modelled byte for byte on what an H100 writes.

A tile load (``cp.async.bulk.tensor.Nd.shared::cluster.global.tile``) writes the box densely, dim 0 fastest, at
the destination shared-memory address; out-of-bounds elements are written as zero (or NaN with
``OOBFill.NAN_REQUEST_ZERO_FMA``) and count towards the transaction bytes like the others. With a swizzle mode
the 16-byte chunk at shared address ``a`` moves to ``a XOR (((a >> 7) & m) << 4)``, ``m`` = 1, 3, 7 for 32B,
64B, 128B: the pattern follows the *address* bits, so it repeats every 256/512/1024 bytes and a destination that
is not aligned to that repeat sees a shifted pattern. All of this was checked against an H100
(``tests/data/tma_*.npz``).

The hardware refuses (illegal instruction) a box whose dim-0 start ``coords[0] * element size`` is not a multiple
of 16 bytes, a shared-memory address that is not 128-byte aligned, and (for stores) a box starting at a negative
coordinate; the emulator raises :class:`TMAError` for each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .tensormap import OOBFill, RuleError, Swizzle, TensorMap, swizzle_span

__all__ = [
    "TMAError", "load_tile", "store_tile", "tx_bytes", "swizzle_chunk", "swizzled_offset", "unswizzled_offset",
    "swizzle_image", "unswizzle_image", "chunk_map", "ChunkPlacement", "smem_bank", "box_elements",
    "row_pitch", "smem_footprint", "chunk_offsets",
]

_MASK = {0: 0, 32: 1, 64: 3, 128: 7}
# NaN fill seen on an H100: the 16-bit pattern 0x7FF7 repeated, whatever the element size (a bf16/fp16 NaN;
# 0x7FF77FF7 for fp32, also a NaN)
_NAN_FILL = np.array([0xF7, 0x7F] * 4, np.uint8)


class TMAError(RuleError):
    """A copy the H100 would refuse (the kernel dies with an illegal-instruction or misaligned-address error)."""


def _mode_span(mode: Swizzle | int) -> int:
    if int(mode) in (0, 32, 64, 128) and int(mode) not in (1, 2, 3):
        return int(mode)  # allow spans given in bytes (32, 64, 128) as well as Swizzle values
    return swizzle_span(mode)


def swizzled_offset(byte_offset: int | np.ndarray, mode: Swizzle | int) -> int | np.ndarray:
    """Where the byte at ``byte_offset`` (from a 1024-aligned shared address) lands after swizzling.

    Bits 4.. of the 16-byte chunk index are XORed with address bits 7..: 1 bit (32B), 2 bits (64B), 3 (128B).
    ``mode`` is a :class:`Swizzle` or a span in bytes. The map is its own inverse.
    """
    m = _MASK[_mode_span(mode)]
    return byte_offset ^ (((byte_offset >> 7) & m) << 4)


unswizzled_offset = swizzled_offset  # XOR swizzles are involutions


def swizzle_chunk(row: int, chunk: int, mode: Swizzle | int) -> int:
    """For a box whose rows are exactly one swizzle span wide, the chunk index (0..span/16-1) that 16-byte chunk
    ``chunk`` of row ``row`` lands in. For 128B: ``chunk ^ (row % 8)``; 64B: ``chunk ^ ((row // 2) % 4)``;
    32B: ``chunk ^ ((row // 4) % 2)``."""
    span = _mode_span(mode)
    if span == 0:
        return chunk
    off = row * span + chunk * 16
    return (int(swizzled_offset(off, span)) % span) // 16


def smem_bank(byte_address: int) -> int:
    """The shared-memory bank (0..31, 4 bytes wide) of a byte address."""
    return (int(byte_address) // 4) % 32


@dataclass(frozen=True)
class ChunkPlacement:
    """Where one 16-byte chunk of a box lands in shared memory."""

    box_row: int  # row of the box (all dims above 0 flattened, dim 1 fastest)
    chunk: int  # 16-byte chunk within the box row
    smem_offset: int  # byte offset from the copy's destination
    banks: tuple[int, int, int, int]  # the four 4-byte banks it occupies

    @property
    def smem_row(self) -> int:
        """Row of the shared image, counting rows of the box's row width."""
        return self.smem_offset // 16


def chunk_map(tmap: TensorMap, smem_address: int = 0) -> list[ChunkPlacement]:
    """For every 16-byte chunk of the box (in box order), where it lands and which banks it occupies."""
    inner = tmap.inner_box_bytes
    pos = chunk_offsets(tmap, smem_address)
    out = []
    for k, phys in enumerate(pos.tolist()):
        banks = tuple(smem_bank(smem_address + phys + 4 * i) for i in range(4))
        out.append(ChunkPlacement((k * 16) // inner, (k * 16 % inner) // 16, phys, banks))  # type: ignore[arg-type]
    return out


def row_pitch(tmap: TensorMap) -> int:
    """Bytes between consecutive box rows in shared memory: the swizzle span when swizzled (a box row narrower
    than the span still takes a whole span-wide row; the rest is left untouched), else the box row itself."""
    return tmap.swizzle_span or tmap.inner_box_bytes


def smem_footprint(tmap: TensorMap) -> int:
    """Bytes of shared memory a tile copy covers (``>= tx_bytes``; larger when box rows are narrower than the
    swizzle span)."""
    return (tmap.box_bytes // tmap.inner_box_bytes) * row_pitch(tmap)


def chunk_offsets(tmap: TensorMap, smem_address: int = 0) -> np.ndarray:
    """Byte offset from the destination of every 16-byte chunk of the box, in box order (dim 0 fastest)."""
    per_row = tmap.inner_box_bytes // 16
    k = np.arange(tmap.box_bytes // 16)
    lin = (k // per_row) * row_pitch(tmap) + (k % per_row) * 16
    if tmap.swizzle_span == 0:
        return lin
    return swizzled_offset(smem_address + lin, tmap.swizzle) - smem_address


def tx_bytes(tmap: TensorMap) -> int:
    """Bytes one tile copy adds to its mbarrier's transaction count (``complete_tx``): the whole box, out-of-bounds
    elements included."""
    return tmap.box_bytes


def box_elements(tmap: TensorMap, coords: Sequence[int], store: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Global element indices (per dim, innermost first) of every box element in shared-memory order, and a mask
    of which are in bounds. Returns ``(idx, inb)`` with ``idx`` of shape (rank, n) and ``inb`` of shape (n,).

    For a store (``store=True``) dim 0's bound is rounded up to whole 16-byte chunks: an H100 writes the last,
    partly out-of-bounds chunk of a row entirely."""
    dims = tmap.smem_box_dim
    grids = np.indices(tuple(reversed(dims))).reshape(len(dims), -1)[::-1]  # innermost first, smem order
    idx = np.empty_like(grids, dtype=np.int64)
    inb = np.ones(grids.shape[1], bool)
    for k in range(tmap.rank):
        step = 1 if k == 0 else tmap.element_strides[k]
        idx[k] = int(coords[k]) + grids[k] * step
        bound = tmap.global_dim[k]
        if store and k == 0:
            es = tmap.element_size
            bound = -(-bound * es // 16) * 16 // es
        inb &= (idx[k] >= 0) & (idx[k] < bound)
    return idx, inb


def _check_coords(tmap: TensorMap, coords: Sequence[int], smem_address: int, store: bool) -> None:
    if int(tmap.interleave) != 0:
        raise TMAError("interleave-not-emulated", tmap.interleave, "copies with an interleaved layout (NC/8HWC8) "
                       "are not modelled by the emulator; the course's GEMM uses Interleave.NONE.")
    if len(coords) != tmap.rank:
        raise TMAError("coords", tuple(coords), f"{len(coords)} coordinates given for a rank-{tmap.rank} tensor "
                       "map (give them innermost first, as in the PTX instruction).")
    for i, c in enumerate(coords):
        if not -(1 << 31) <= int(c) < (1 << 31):
            raise TMAError("coord-range", c, f"coords[{i}] = {c} does not fit a signed 32-bit register.")
    start = int(coords[0]) * tmap.element_size
    if start % 16:
        raise TMAError("coord0-alignment", coords[0],
                       f"coords[0] = {coords[0]} puts the box's first row at byte {start} of a tensor row, not a "
                       f"multiple of 16: the H100 stops the kernel (illegal instruction). Start boxes at multiples "
                       f"of {16 // tmap.element_size} elements along dim 0.")
    if smem_address % 128:
        raise TMAError("smem-alignment", smem_address,
                       f"shared-memory address {smem_address:#x} is not 128-byte aligned: the H100 stops the kernel "
                       "(misaligned address). Align TMA destinations to 128 bytes (1024 for 128B swizzle to get "
                       "the textbook pattern).")
    if store:
        for i, c in enumerate(coords):
            if int(c) < 0:
                raise TMAError("store-negative-coord", c,
                               f"coords[{i}] = {c}: a TMA store whose box starts before the tensor stops the "
                               "kernel on an H100 (illegal instruction), although loads allow it.")


def _gmem_bytes(tmap: TensorMap, gmem: np.ndarray | bytes | bytearray | memoryview) -> np.ndarray:
    if isinstance(gmem, bytes | bytearray | memoryview):
        return np.frombuffer(gmem, np.uint8)
    a = np.asarray(gmem)
    if a.dtype.itemsize not in (1, tmap.element_size):
        raise TMAError("gmem-dtype", a.dtype, f"gmem holds {a.dtype} ({a.dtype.itemsize} bytes) but the map's "
                       f"elements are {tmap.element_size} bytes; pass the array of the map's type or raw bytes.")
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _byte_offsets(tmap: TensorMap, idx: np.ndarray) -> np.ndarray:
    off = np.zeros(idx.shape[1], np.int64)
    for k, s in enumerate(tmap.byte_strides):
        off += idx[k] * s
    return off


def load_tile(tmap: TensorMap, gmem: np.ndarray | bytes, coords: Sequence[int], smem_address: int = 0,
              smem: np.ndarray | None = None) -> np.ndarray:
    """The shared-memory image a TMA tile load writes: ``smem_footprint(tmap)`` uint8 bytes (``tx_bytes`` of
    them written; with rows narrower than the swizzle span the rest of each row is left untouched: zero here,
    or whatever ``smem`` held).

    ``gmem`` is the tensor the map describes, starting at ``tmap.global_address``: a numpy array of the map's
    element type (any shape; its bytes are read with the map's strides) or raw bytes. ``coords`` are the box's
    starting element coordinates, innermost first (as in the PTX instruction); they may be negative or past the
    end: out-of-bounds elements read as zero (NaN with ``OOBFill.NAN_REQUEST_ZERO_FMA``).
    ``smem_address`` is the destination's shared address (the swizzle follows address bits; use a multiple of
    1024 for the textbook pattern). With ``smem`` (a uint8 array standing for shared memory) the copy is written
    into it at ``smem_address`` in place, and the returned image is a view of it.
    """
    _check_coords(tmap, coords, smem_address, store=False)
    buf = _gmem_bytes(tmap, gmem)
    es = tmap.element_size
    idx, inb = box_elements(tmap, coords)
    eoff = _byte_offsets(tmap, idx)
    n = idx.shape[1]
    if inb.any() and eoff[inb].max() + es > buf.size:
        raise TMAError("gmem-size", buf.size, f"the box reads up to byte {int(eoff[inb].max()) + es} of the tensor "
                       f"but gmem holds only {buf.size} bytes.")
    dense = np.zeros((n, es), np.uint8)
    if tmap.oob_fill == OOBFill.NAN_REQUEST_ZERO_FMA:
        dense[:] = _NAN_FILL[:es]
    src = eoff[inb, None] + np.arange(es)
    dense[inb] = buf[src]
    pos = chunk_offsets(tmap, smem_address)
    chunks = dense.reshape(-1, 16)
    if smem is None:
        out = np.zeros(smem_footprint(tmap), np.uint8)
        out.reshape(-1, 16)[pos // 16] = chunks
        return out
    view = smem.reshape(-1).view(np.uint8)
    view[(smem_address + pos)[:, None] + np.arange(16)] = chunks
    return view[smem_address:smem_address + smem_footprint(tmap)]


def _chunk_destinations(n_chunks: int, span: int, smem_address: int) -> np.ndarray:
    """Index of the 16-byte chunk where dense chunk i lands, for an image placed at ``smem_address``."""
    addr = smem_address + np.arange(n_chunks) * 16
    return (swizzled_offset(addr, span) - smem_address) // 16


def swizzle_image(dense: np.ndarray, mode: Swizzle | int, smem_address: int = 0) -> np.ndarray:
    """Apply a swizzle to a dense image of whole span-wide rows placed at ``smem_address`` (128-byte aligned)."""
    dense = np.asarray(dense, np.uint8).reshape(-1)
    span = _mode_span(mode)
    if span == 0:
        return dense.copy()
    chunks = dense.reshape(-1, 16)
    out = np.empty_like(chunks)
    out[_chunk_destinations(chunks.shape[0], span, smem_address)] = chunks
    return out.reshape(-1)


def unswizzle_image(image: np.ndarray, mode: Swizzle | int, smem_address: int = 0) -> np.ndarray:
    """Inverse of :func:`swizzle_image`: the dense box bytes from a swizzled shared-memory image."""
    image = np.asarray(image, np.uint8).reshape(-1)
    span = _mode_span(mode)
    if span == 0:
        return image.copy()
    chunks = image.reshape(-1, 16)
    return chunks[_chunk_destinations(chunks.shape[0], span, smem_address)].reshape(-1)


def store_tile(tmap: TensorMap, smem_image: np.ndarray, gmem: np.ndarray | bytearray, coords: Sequence[int],
               smem_address: int = 0) -> None:
    """A TMA tile store: write the box held in ``smem_image`` (as laid out in shared memory, swizzled per the
    map, ``smem_footprint(tmap)`` bytes) into ``gmem`` in place. Out-of-bounds elements are not written, except
    that a row's last 16-byte chunk is written whole (seen on an H100: a 300-byte 1D tensor got bytes 300-303)."""
    _check_coords(tmap, coords, smem_address, store=True)
    img = np.asarray(smem_image)
    img = np.ascontiguousarray(img).reshape(-1).view(np.uint8)
    if img.size < smem_footprint(tmap):
        raise TMAError("smem-size", img.size, f"the shared image holds {img.size} bytes; the box covers "
                       f"{smem_footprint(tmap)}.")
    pos = chunk_offsets(tmap, smem_address)
    dense = img.reshape(-1, 16)[pos // 16].reshape(-1)
    es = tmap.element_size
    if isinstance(gmem, bytearray):
        buf = np.frombuffer(gmem, np.uint8)
    else:
        if not isinstance(gmem, np.ndarray) or not gmem.flags.c_contiguous:
            raise TMAError("gmem-writable", type(gmem), "store_tile writes into gmem in place: pass a "
                           "C-contiguous numpy array or a bytearray.")
        buf = gmem.reshape(-1).view(np.uint8)
    idx, inb = box_elements(tmap, coords, store=True)
    eoff = _byte_offsets(tmap, idx)[inb]
    if eoff.size and eoff.max() + es > buf.size:
        raise TMAError("gmem-size", buf.size, f"the box writes up to byte {int(eoff.max()) + es} but gmem holds "
                       f"only {buf.size} bytes.")
    src = dense.reshape(-1, es)[inb]
    buf[eoff[:, None] + np.arange(es)] = src
