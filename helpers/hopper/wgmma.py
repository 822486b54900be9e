"""WGMMA: shared-memory matrix descriptors and ``wgmma.mma_async m64nNk16.f32.bf16.bf16`` on a byte image.

The 64-bit descriptor (sm_90): start address >> 4 in bits 0-13, leading byte offset (LBO) >> 4 in bits 16-29,
stride byte offset (SBO) >> 4 in bits 32-45, base offset in bits 49-51, layout in bits 62-63 (0 no swizzle,
1 128B, 2 64B, 3 32B swizzle). Operands are K-major (A is 64 x 16, B is N x 16, both "row = M or N index, 16
K values along the row"). How an H100 finds element (row, k) of an operand, as measured
(``tests/data/wgmma*.npz``):

- no swizzle: 8x16-byte core matrices; byte ``start + (row//8)*SBO + (k//8)*LBO + (row%8)*16 + (k%8)*2``;
- swizzle with span S (32/64/128): ``a = start + (row//8)*SBO + (row%8)*S + 2k`` (LBO unused), then the
  16-byte chunk is moved like a TMA swizzle, by shared *address* bits: ``a ^ ((((a >> 7) - base_offset) & m)
  << 4)`` with ``m`` = 7, 3, 1 for 128B, 64B, 32B (the base offset shifts the pattern's phase back).

So stepping K by 16 inside a 128B-swizzled tile means adding 32 bytes to the start address, exactly as TMA laid
the tile out; a wrong step or descriptor reads the wrong bytes here just as on the chip.

Accumulator fragments: thread ``t`` of the warpgroup (warp ``w = t // 32``, lane ``l = t % 32``) holds in register
``j`` (0 .. N/2-1) the element at row ``16w + l//4 + 8*((j//2) % 2)``, column ``8*(j//4) + 2*(l%4) + j%2``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .tensormap import RuleError, Swizzle

__all__ = [
    "Descriptor", "WGMMAError", "make_descriptor", "decode_descriptor", "operand_addresses", "read_operand",
    "mma_async", "element_of", "thread_register_of", "fragments_to_tile", "tile_to_fragments", "fragment_maps",
    "write_kmajor_tile", "bf16_bits_to_f32", "f32_to_bf16_bits", "LAYOUT_OF_SWIZZLE", "dot_h100",
]

# descriptor layout field <-> swizzle mode
LAYOUT_OF_SWIZZLE = {Swizzle.NONE: 0, Swizzle.B128: 1, Swizzle.B64: 2, Swizzle.B32: 3}
_SWIZZLE_OF_LAYOUT = {v: k for k, v in LAYOUT_OF_SWIZZLE.items()}
_SPAN_OF_LAYOUT = {0: 0, 1: 128, 2: 64, 3: 32}


class WGMMAError(RuleError):
    """An operand or shape the instruction cannot take (named rule, offending value)."""


@dataclass(frozen=True)
class Descriptor:
    """The fields of a shared-memory matrix descriptor, in bytes."""

    start_address: int
    leading_byte_offset: int
    stride_byte_offset: int
    swizzle: Swizzle
    base_offset: int = 0

    @property
    def layout(self) -> int:
        """The 2-bit layout field (0 none, 1 128B, 2 64B, 3 32B)."""
        return LAYOUT_OF_SWIZZLE[self.swizzle]

    def encode(self) -> int:
        """The 64-bit descriptor value."""
        return make_descriptor(self.start_address, self.leading_byte_offset, self.stride_byte_offset, self.swizzle,
                               self.base_offset)


def make_descriptor(start_address: int, leading_byte_offset: int, stride_byte_offset: int,
                    swizzle: Swizzle | int = Swizzle.NONE, base_offset: int = 0) -> int:
    """Encode a descriptor. Addresses and offsets are bytes (multiples of 16, below 256 KiB); ``swizzle`` is a
    :class:`Swizzle` (NONE, B32, B64, B128)."""
    sw = Swizzle(int(swizzle))
    if sw not in LAYOUT_OF_SWIZZLE:
        raise WGMMAError("swizzle", sw, f"swizzle {sw.name} has no WGMMA descriptor layout; use NONE, B32, B64 or "
                         "B128.")
    for name, v in (("start_address", start_address), ("leading_byte_offset", leading_byte_offset),
                    ("stride_byte_offset", stride_byte_offset)):
        if v % 16 or not 0 <= v < 1 << 18:
            raise WGMMAError(name, v, f"{name} = {v}: descriptors hold byte values that are multiples of 16 in "
                             "0 .. 2**18-16 (the field stores value >> 4 in 14 bits).")
    if not 0 <= base_offset < 8:
        raise WGMMAError("base_offset", base_offset, f"base_offset = {base_offset}: a 3-bit field (0..7).")
    return ((start_address >> 4) | ((leading_byte_offset >> 4) << 16) | ((stride_byte_offset >> 4) << 32)
            | (base_offset << 49) | (LAYOUT_OF_SWIZZLE[sw] << 62))


def decode_descriptor(desc: int) -> Descriptor:
    """Split a 64-bit descriptor into its fields (bytes)."""
    desc = int(desc) & ((1 << 64) - 1)
    return Descriptor(((desc >> 0) & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4,
                      _SWIZZLE_OF_LAYOUT[(desc >> 62) & 3], (desc >> 49) & 7)


def operand_addresses(desc: int | Descriptor, rows: int) -> np.ndarray:
    """Shared-memory byte address of element (row, k) of a K-major bf16 operand, shape (rows, 16)."""
    d = desc if isinstance(desc, Descriptor) else decode_descriptor(desc)
    r = np.arange(rows)[:, None]
    k = np.arange(16)[None, :]
    span = _SPAN_OF_LAYOUT[d.layout]
    if span == 0:
        return d.start_address + (r // 8) * d.stride_byte_offset + (k // 8) * d.leading_byte_offset \
            + (r % 8) * 16 + (k % 8) * 2
    a = d.start_address + (r // 8) * d.stride_byte_offset + (r % 8) * span + 2 * k
    m = {128: 7, 64: 3, 32: 1}[span]
    return a ^ ((((a >> 7) - d.base_offset) & m) << 4)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) to float32 values (exact)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 to bf16 bit patterns, round to nearest even (as ``ml_dtypes.bfloat16``)."""
    import ml_dtypes

    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def read_operand(smem: np.ndarray, desc: int | Descriptor, rows: int) -> np.ndarray:
    """The (rows, 16) bf16 operand a descriptor points at, as float32."""
    buf = np.asarray(smem).reshape(-1).view(np.uint8)
    addr = operand_addresses(desc, rows)
    if addr.max() + 2 > buf.size:
        raise WGMMAError("smem-range", int(addr.max()), f"the descriptor reads byte {int(addr.max()) + 1} but the "
                         f"shared-memory image has {buf.size} bytes.")
    lo = buf[addr].astype(np.uint16)
    hi = buf[addr + 1].astype(np.uint16)
    return bf16_bits_to_f32(lo | (hi << 8))


def _check_n(n: int) -> None:
    if n % 8 or not 8 <= n <= 256:
        raise WGMMAError("n", n, f"N = {n}: wgmma m64nNk16 takes N from 8 to 256 in steps of 8.")


def _exponent(x: np.ndarray) -> np.ndarray:
    """floor(log2|x|) per element; a very negative number for zeros (they never set the alignment)."""
    m = np.abs(x)
    _, e = np.frexp(m)
    return np.where(m > 0, e - 1, -(1 << 20)).astype(np.int64)


def _round_to_zero_f32(x: np.ndarray, overflow_inf: bool = False) -> np.ndarray:
    """fp64 -> fp32 rounded toward zero; a sum of 2**128 or more gives the largest fp32 (or, with
    ``overflow_inf``, infinity, as the tensor cores do)."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        over = np.abs(f.astype(np.float64)) > np.abs(x)
        if overflow_inf:
            over &= np.isfinite(f)
    return np.where(over, np.nextafter(f, np.float32(0)), f).astype(np.float32)


def dot_h100(a: np.ndarray, b: np.ndarray, c: np.ndarray, overflow_inf: bool = False) -> np.ndarray:
    """The H100's fp32 result of ``c + sum_k a[..., k] * b[..., k]`` for bf16 a, b (16 terms) and fp32 c.

    Model fitted to silicon (bit-exact on 90112 random accumulators): every product is exact; the alignment
    exponent is the largest of ``exp(a_k) + exp(b_k)`` (the factors' exponents, before the product is
    normalised) and ``exp(c)``; each of the 17 terms is truncated toward zero to a multiple of 2**(that - 25);
    the terms are added exactly and the sum is rounded toward zero to fp32.

    The terms are multiples of 2**(that - 25) below 2**(that + 2), so their fp64 sum is exact in any order: the
    products are computed with k as the leading axis (contiguous rows to add), the accumulator's term added last.
    A NaN result (whose sign depends on the order) is computed with the terms in their own order.
    """
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    c = np.asarray(c, np.float64)
    ak = np.ascontiguousarray(np.moveaxis(a, -1, 0))  # (K, ...): each k a contiguous block
    bk = np.ascontiguousarray(np.moveaxis(b, -1, 0))
    pair = (_exponent16(ak) + _exponent16(bk)).max(axis=0).astype(np.int64)
    emax = np.maximum(pair, _exponent16(c).astype(np.int64))
    if emax.size and int(emax.max()) > 1000:  # near fp64 overflow (never for bf16 and fp32): term by term
        return _dot_h100_terms(a, b, c, overflow_inf)
    q = np.ldexp(1.0, np.clip(emax - 25, -1074, 1023).astype(np.int32))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        p = ak * bk
        p /= q
        np.trunc(p, out=p)
        p *= q
        s = p.sum(axis=0)
        s += np.trunc(c / q) * q
    s = np.where(emax <= -(1 << 13), 0.0, s)
    if np.isnan(s).any():  # which NaN (its sign) depends on the order of the terms: the terms' own order
        return _dot_h100_terms(a, b, c, overflow_inf)
    return _round_to_zero_f32(s, overflow_inf)


def _exponent16(x: np.ndarray) -> np.ndarray:
    """:func:`_exponent` as int16, -2**14 for zeros: the sum of two stays in int16 and below any real pair's."""
    m = np.abs(x)
    _, e = np.frexp(m)
    return np.where(m > 0, e - 1, -(1 << 14)).astype(np.int16)


def _dot_h100_terms(a: np.ndarray, b: np.ndarray, c: np.ndarray, overflow_inf: bool = False) -> np.ndarray:
    """:func:`dot_h100` with the 17 terms side by side (any fp64 inputs)."""
    prods = a * b
    emax = np.maximum((_exponent(a) + _exponent(b)).max(axis=-1), _exponent(c))
    q = np.ldexp(1.0, np.clip(emax - 25, -1074, 1023).astype(np.int32))
    terms = np.concatenate([prods, c[..., None]], axis=-1)
    with np.errstate(invalid="ignore", over="ignore"):
        s = (np.trunc(terms / q[..., None]) * q[..., None]).sum(axis=-1)
    s = np.where(emax <= -(1 << 19), 0.0, s)
    return _round_to_zero_f32(s, overflow_inf)


def mma_async(smem: np.ndarray, desc_a: int | Descriptor, desc_b: int | Descriptor, n: int,
              accum: np.ndarray | None = None, scale_d: int = 1, numerics: str = "h100") -> np.ndarray:
    """One ``wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16`` with K-major A and B read from ``smem``.

    ``smem`` is the shared-memory byte image (index = shared address). Returns the accumulators as
    (128 threads, n/2 registers) float32: D = A @ B.T (+ ``accum`` if ``scale_d``), ``accum`` being the same
    (128, n/2) fragment array (None = zeros). ``numerics="h100"`` rounds as the H100 does (see
    :func:`dot_h100`, bit-exact on silicon); ``"exact"`` rounds the exact sum once to nearest.
    """
    _check_n(n)
    with np.errstate(all="ignore"):  # NaN/Inf bit patterns in shared memory propagate like on the GPU
        return _mma(smem, desc_a, desc_b, n, accum, scale_d, numerics)


def _mma(smem, desc_a, desc_b, n, accum, scale_d, numerics) -> np.ndarray:
    a = read_operand(smem, desc_a, 64).astype(np.float64)
    b = read_operand(smem, desc_b, n).astype(np.float64)
    c = np.zeros((64, n))
    if scale_d and accum is not None:
        acc = np.asarray(accum, np.float32)
        if acc.shape != (128, n // 2):
            raise WGMMAError("accum-shape", acc.shape, f"accum has shape {acc.shape}; m64n{n} fragments are "
                             f"(128, {n // 2}) (thread, register).")
        c = fragments_to_tile(acc, n).astype(np.float64)
    if numerics == "h100":
        d = dot_h100(a[:, None, :], b[None, :, :], c)
    elif numerics == "exact":
        d = (a @ b.T + c).astype(np.float32)
    else:
        raise WGMMAError("numerics", numerics, 'numerics is "h100" or "exact".')
    return tile_to_fragments(d, n)


def element_of(thread: int, register: int, n: int) -> tuple[int, int]:
    """(row, col) of the 64 x n tile that accumulator ``register`` of warpgroup thread ``thread`` holds."""
    _check_n(n)
    if not 0 <= thread < 128 or not 0 <= register < n // 2:
        raise WGMMAError("fragment", (thread, register), f"thread 0..127 and register 0..{n // 2 - 1} for N = {n}.")
    w, lane = divmod(thread, 32)
    return 16 * w + lane // 4 + 8 * ((register // 2) % 2), 8 * (register // 4) + 2 * (lane % 4) + register % 2


def thread_register_of(row: int, col: int, n: int) -> tuple[int, int]:
    """(thread, register) holding element (row, col) of the 64 x n accumulator tile."""
    _check_n(n)
    if not 0 <= row < 64 or not 0 <= col < n:
        raise WGMMAError("element", (row, col), f"row 0..63 and col 0..{n - 1} for N = {n}.")
    w, r16 = divmod(row, 16)
    half, lr = divmod(r16, 8)
    group, c8 = divmod(col, 8)
    pair, low = divmod(c8, 2)
    return 32 * w + 4 * lr + pair, 4 * group + 2 * half + low


def fragment_maps(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised maps: ``rows, cols`` arrays of shape (128, n/2) giving each fragment's tile position (read-only,
    shared between calls)."""
    _check_n(n)
    return _fragment_maps(n)


@functools.cache
def _fragment_maps(n: int) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(128)[:, None]
    j = np.arange(n // 2)[None, :]
    w, lane = t // 32, t % 32
    rows, cols = 16 * w + lane // 4 + 8 * ((j // 2) % 2), 8 * (j // 4) + 2 * (lane % 4) + j % 2
    rows.setflags(write=False)
    cols.setflags(write=False)
    return rows, cols


def fragments_to_tile(frags: np.ndarray, n: int) -> np.ndarray:
    """(128, n/2) per-thread registers -> the (64, n) tile."""
    rows, cols = fragment_maps(n)
    frags = np.asarray(frags)
    tile = np.empty((64, n), frags.dtype)
    tile[rows, cols] = frags
    return tile


def tile_to_fragments(tile: np.ndarray, n: int) -> np.ndarray:
    """The (64, n) tile -> (128, n/2) per-thread registers."""
    rows, cols = fragment_maps(n)
    return np.asarray(tile)[rows, cols]


def write_kmajor_tile(smem: np.ndarray, offset: int, tile: np.ndarray, swizzle: Swizzle | int = Swizzle.B128) -> None:
    """Write a row-major (rows, cols) bf16 tile into ``smem`` at ``offset`` exactly as a TMA load of that box
    would (rows of ``cols * 2`` bytes, span-wide rows when swizzled, chunks swizzled by address bits).

    ``tile`` may be ``ml_dtypes.bfloat16``, uint16 bit patterns or floats (rounded to bf16).
    """
    from .tensormap import DataType, encode_tiled
    from .tma import load_tile

    t = np.asarray(tile)
    if t.dtype == np.uint16:
        bits = t
    elif t.dtype.name == "bfloat16":
        bits = t.view(np.uint16)
    else:
        bits = f32_to_bf16_bits(t)
    rows, cols = bits.shape
    tmap = encode_tiled(DataType.BFLOAT16, 2, 0, (cols, rows), (cols * 2,), (cols, rows), (1, 1), 0, swizzle)
    load_tile(tmap, np.ascontiguousarray(bits), (0, 0), smem_address=offset, smem=smem)


# --------------------------------------------------------------------------------------------- every input type
#: K of one wgmma and the element size in bytes, per input type (one K-major row is 32 bytes for every type)
K_OF = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}


def mn_major_addresses(desc: int | Descriptor, rows: int) -> np.ndarray:
    """Shared-memory byte address of 16-bit element (row, k) of an MN-major (transposed) swizzled operand, shape
    (rows, 16) (:func:`_mn_major_elements`)."""
    d = desc if isinstance(desc, Descriptor) else decode_descriptor(desc)
    span = _SPAN_OF_LAYOUT[d.layout]
    if span == 0:
        raise WGMMAError("layout", 0, "a transposed (MN-major) operand without swizzle is not modelled.")
    per = span // 2
    mn = np.arange(rows)[:, None]
    k = np.arange(16)[None, :]
    a = d.start_address + (mn // per) * d.leading_byte_offset + (k // 8) * d.stride_byte_offset + (k % 8) * span \
        + (mn % per) * 2
    mask = {128: 7, 64: 3, 32: 1}[span]
    return a ^ ((((a >> 7) - d.base_offset) & mask) << 4)


def _mn_major_elements(buf: np.ndarray, d: Descriptor, rows: int) -> np.ndarray:
    """(rows, 16) 16-bit elements of an MN-major (transposed) swizzled operand: atoms of 8 K-rows of ``span``
    bytes (span/2 consecutive M or N elements); K-row groups ``SBO`` apart, atoms along M/N ``LBO`` apart, the
    16-byte chunks swizzled by address bits as in the K-major case."""
    addr = mn_major_addresses(d, rows)
    if addr.max() + 2 > buf.size:
        raise WGMMAError("smem-range", int(addr.max()), f"the descriptor reads byte {int(addr.max()) + 2} but the "
                         f"shared-memory image has {buf.size} bytes.")
    return (buf[addr].astype(np.uint32) | (buf[addr + 1].astype(np.uint32) << 8)).astype(np.uint32)


def operand_elements(smem: np.ndarray, desc: int | Descriptor, rows: int, etype: str,
                     transposed: bool = False) -> np.ndarray:
    """The (rows, K) element bit patterns (uint32) of a K-major operand of type ``etype`` a descriptor points at:
    byte ``p`` (0..31) of row ``r`` sits where :func:`operand_addresses` puts byte ``p`` of a bf16 row.
    ``transposed``: an MN-major f16/bf16 operand (:func:`_mn_major_elements`)."""
    buf = np.asarray(smem).reshape(-1).view(np.uint8)
    if transposed:
        d = desc if isinstance(desc, Descriptor) else decode_descriptor(desc)
        return _mn_major_elements(buf, d, rows)
    addr, top = _kmajor_bytes(int(desc.encode() if isinstance(desc, Descriptor) else desc), rows)
    if top + 1 > buf.size:
        raise WGMMAError("smem-range", top, f"the descriptor reads byte {top + 1} but the shared-memory image has "
                         f"{buf.size} bytes.")
    e = 32 // K_OF[etype]
    if e == 2:  # 16-bit elements: the even and odd bytes
        return buf[addr[:, 0::2]].astype(np.uint32) | (buf[addr[:, 1::2]].astype(np.uint32) << 8)
    byts = buf[addr].astype(np.uint32).reshape(rows, K_OF[etype], e)
    return np.bitwise_or.reduce(byts << (8 * np.arange(e, dtype=np.uint32)), axis=-1).astype(np.uint32)


@functools.lru_cache(maxsize=256)
def _kmajor_bytes(desc: int, rows: int) -> tuple[np.ndarray, int]:
    """Addresses (rows, 32) of the bytes of a K-major operand's rows, and the largest (cached per descriptor: a
    kernel issues the same few descriptors over and over)."""
    d = decode_descriptor(desc)
    r = np.arange(rows)[:, None]
    p = np.arange(32)[None, :]
    span = _SPAN_OF_LAYOUT[d.layout]
    if span == 0:
        addr = d.start_address + (r // 8) * d.stride_byte_offset + (p // 16) * d.leading_byte_offset \
            + (r % 8) * 16 + p % 16
    else:
        a = d.start_address + (r // 8) * d.stride_byte_offset + (r % 8) * span + p
        mask = {128: 7, 64: 3, 32: 1}[span]
        addr = a ^ ((((a >> 7) - d.base_offset) & mask) << 4)
    addr = np.ascontiguousarray(addr, np.int64)
    addr.setflags(write=False)
    return addr, int(addr.max())


def a_fragment_tile(regs: np.ndarray, etype: str) -> np.ndarray:
    """A from registers: (128 threads, 4 registers) uint32 -> the (64, K) element bit patterns. Warp ``w`` holds
    rows 16w..16w+15 in the layout of mma.sync's m16 A fragment (helpers.hopper.tensorcore.a_map)."""
    from . import tensorcore as tc

    k = K_OF[etype]
    rows, cols = tc.a_map(16, k, etype, 4)
    el = tc.unpack(np.asarray(regs, np.uint32).reshape(4, 32, 4), etype)  # (warp, lane, reg, E)
    tile = np.zeros((64, k), np.uint64)
    for w in range(4):
        tile[16 * w + rows, cols] = el[w]
    return tile.astype(np.uint32)


def mma_async_typed(smem: np.ndarray, a: int | np.ndarray, desc_b: int, n: int, accum: np.ndarray | None,
                    scale_d: int, atype: str, btype: str, dtype: str, neg_a: bool = False, neg_b: bool = False,
                    satfinite: bool = False, trans_a: bool = False, trans_b: bool = False) -> np.ndarray:
    """One ``wgmma.mma_async m64n{n}k{K}.{dtype}.{atype}.{btype}`` with K-major operands: ``a`` is A's descriptor
    or, from registers, the (128, 4) uint32 fragment registers; ``accum`` the (128, R) uint32 accumulator registers
    (R = n/2, or n/4 for f16 accumulators), None = zeros. Returns the (128, R) uint32 result registers.

    Floating types sum through helpers.hopper.tensorcore.dot (the bf16 model; NaN canonical, subnormal fp32
    accumulators as zero); s8/u8 exactly into s32 (wrapping, or clamped with ``satfinite``)."""
    from . import tensorcore as tc

    _check_n(n)
    if isinstance(a, np.ndarray):
        abits = a_fragment_tile(a, atype)
    else:
        abits = operand_elements(smem, a, 64, atype, trans_a)
    bbits = operand_elements(smem, desc_b, n, btype, trans_b)
    A = tc.decode(abits, atype)
    B = tc.decode(bbits, btype)
    if neg_a:
        A = -A
    if neg_b:
        B = -B
    rows, cols = fragment_maps(n)
    half = dtype == "f16"
    C = np.zeros((64, n), np.float64 if dtype != "s32" else np.int64)
    if scale_d and accum is not None:
        acc = np.asarray(accum, np.uint32)
        if half:
            acc = tc.unpack(acc, "f16").reshape(128, n // 2)
        C[rows, cols] = tc.decode(acc, "f16" if half else ("s32" if dtype == "s32" else "f32"))
    if dtype == "s32":
        D = C + A @ B.T
        if satfinite:
            D = np.clip(D, -(1 << 31), (1 << 31) - 1)
        return (D & 0xFFFFFFFF).astype(np.uint32)[rows, cols]
    with np.errstate(all="ignore"):
        D = tc.dot(A[:, None, :], B[None, :, :], C, atype, tc.WGMMA_PRECISION.get((atype, dtype), (25, 24)), btype)
    out = tc.round_accumulator(D, dtype)[rows, cols]
    if half:
        return tc.pack(out.reshape(128, n // 4, 2), "f16")
    return out.astype(np.uint32)
