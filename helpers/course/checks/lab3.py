"""Graders of Lab 3 (WGMMA): descriptors, the K-step addressing, the accumulator fragment map, one emulated
m64n64k16, the fragment store, a whole GEMM on the emulator, the student's own wgmma inline asm (compared with the
header's), and the lab's kernel: Lab 2's load loop with the product on the tensor cores. The CUDA exercises are
graded by running them (on the H100, or on the course's PTX executor without one), their PTX and compile report
as the explanation (see ``_common.Explanation``); the kernel is timed beside cuBLAS on the H100 only.

Every Python grader takes a ``seed``: fixed cases that tell apart every mistake the tests name come first, random
ones on top.

Conventions of the lab: A is M×K bf16 row-major, B is N×K bf16 row-major (K-major, the layout wgmma reads
without transposing), C = A·Bᵀ is M×N fp32 row-major. Shared-memory tiles are 64×64 bf16, 128B-swizzled by TMA,
1024-byte aligned.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from helpers.course import grading
from helpers.course.checks import _common as C
from helpers.course.hints import answer, hint

__all__ = [
    "check_wgmma_asm",
    "carry_wrappers",
    "kernel_changes",
    "hint",
    "answer",
    "reference_descriptor",
    "reference_kslice_descriptor",
    "reference_fragment_coords",
    "check_descriptor",
    "check_kslice_descriptor",
    "check_fragment_coords",
    "check_one_product",
    "check_store_tile",
    "check_emulated_gemm",
    "check_gemm_kernel",
    "ladder_rows",
    "show_ladder",
    "make_operands",
    "stage_image",
    "TILE_BYTES",
]

TILE = 64
TILE_BYTES = TILE * TILE * 2  # one 64×64 bf16 tile: 8 KB
SMEM_BYTES = 227 * 1024  # the most shared memory one block may use on an H100
_MODE = {0: 0, 128: 1, 64: 2, 32: 3}  # swizzle bytes -> descriptor bits 62-63
_SWIZZLE_OF_MODE = {v: k for k, v in _MODE.items()}
KERNEL_NAME = "lab3_gemm"
HEADER = "#include <hopper.cuh>\n"


# ------------------------------------------------------------------------------------------- references
def reference_descriptor(start: int, lbo: int, sbo: int, swizzle: int) -> int:
    """The 64-bit wgmma shared-memory descriptor (sm_90), as the H100 ran it."""
    return (((start & 0x3FFFF) >> 4) | (((lbo & 0x3FFFF) >> 4) << 16) | (((sbo & 0x3FFFF) >> 4) << 32)
            | (_MODE[swizzle] << 62))


def reference_kslice_descriptor(tile_addr: int, k: int) -> int:
    """Descriptor of the k-th 16-wide K slice of a 1024-aligned, 128B-swizzled, K-major 64×64 bf16 tile."""
    return reference_descriptor(tile_addr + 32 * k, 16, 1024, 128)


def reference_fragment_coords(t: int, j: int) -> tuple[int, int]:
    """(row, col) in the 64×64 tile of accumulator register j of thread t, for wgmma m64n64k16 with fp32 D."""
    w, lane = divmod(t, 32)
    return 16 * w + lane // 4 + 8 * ((j // 2) % 2), 8 * (j // 4) + 2 * (lane % 4) + j % 2


def _coord_table() -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(128)[:, None]
    j = np.arange(32)[None, :]
    w, lane = t // 32, t % 32
    rows = 16 * w + lane // 4 + 8 * ((j // 2) % 2)
    cols = 8 * (j // 4) + 2 * (lane % 4) + j % 2
    return rows + 0 * j, cols + 0 * t


def _fields(desc: int) -> dict[str, int]:
    return {
        "start address >> 4 (bits 0-13)": desc & 0x3FFF,
        "LBO >> 4 (bits 16-29)": (desc >> 16) & 0x3FFF,
        "SBO >> 4 (bits 32-45)": (desc >> 32) & 0x3FFF,
        "base offset (bits 49-51)": (desc >> 49) & 0x7,
        "swizzle mode (bits 62-63)": (desc >> 62) & 0x3,
        "other bits (14-15, 30-31, 46-48, 52-61)": desc & ~(0x3FFF | 0x3FFF << 16 | 0x3FFF << 32 | 0x7 << 49
                                                               | 0x3 << 62) & (2**64 - 1),
    }


def _field_diff(got: int, expected: int) -> str:
    lines = []
    for (name, g), e in zip(_fields(got).items(), _fields(expected).values(), strict=True):
        if g != e:
            lines.append(f"      {name}: expected {e} ({e:#x}), got {g} ({g:#x})")
    return "    fields that differ:\n" + "\n".join(lines) if lines else ""


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | np.integer):
        return int(value)
    return None


def carry_wrappers(*, checked: bool = True) -> str:
    """Your wrappers from Labs 1 and 2 (read from the notebooks beside this one): my_tma_load_2d, the mbarrier
    wrappers and the wait loop, in the order the kernel needs them. ``checked=False``: read quietly, without
    running each lab's check (a later lab's kernel check compiles them anyway)."""
    import contextlib
    import io

    from helpers.course.checks import lab1, lab2

    if not checked:
        with contextlib.redirect_stdout(io.StringIO()):
            return (C.carry("lab1_tma.ipynb", "TMA_LOAD", "Lab 1") + C.carry("lab2_mbarrier.ipynb", "MBAR_INIT_ARRIVE",
                    "Lab 2") + C.carry("lab2_mbarrier.ipynb", "MBAR_TX_WAIT", "Lab 2"))
    return (C.carry("lab1_tma.ipynb", "TMA_LOAD", "Lab 1", check=lambda s: lab1.check_tma_load(s, rank=2))
            + C.carry("lab2_mbarrier.ipynb", "MBAR_INIT_ARRIVE", "Lab 2", check=lab2.check_init_arrive)
            + C.carry("lab2_mbarrier.ipynb", "MBAR_TX_WAIT", "Lab 2", check=lab2.check_tx_wait))


def kernel_changes() -> Any:
    """The diff this lab makes to Lab 2's kernel, with Lab 2's measured speed."""
    return C.lab_diff("lab2", "lab3")


# ------------------------------------------------------------------------------------------- 1 · descriptor
def _descriptor_hint(got: int, start: int, lbo: int, sbo: int, swizzle: int) -> str:
    if got == reference_descriptor(start, sbo, lbo, swizzle):
        return "LBO and SBO are swapped: the leading byte offset goes in bits 16-29, the stride byte offset in 32-45"
    if got == (start | lbo << 16 | sbo << 32 | _MODE[swizzle] << 62) & (2**64 - 1):
        return "every offset is stored in units of 16 bytes: shift start, LBO and SBO right by 4"
    unmasked = ((start >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (_MODE[swizzle] << 62))
    if got == unmasked or got == unmasked & (2**64 - 1):
        return ("an address or offset past 18 bits spilled into the next field: keep only its low 18 bits "
                "((x & 0x3FFFF) >> 4), as the hardware does")
    for wrong_mode in range(4):
        if wrong_mode != _MODE[swizzle] and got == (reference_descriptor(start, lbo, sbo, 0) | wrong_mode << 62):
            return (f"swizzle {swizzle} B is mode {_MODE[swizzle]} in bits 62-63 (128B → 1, 64B → 2, 32B → 3, none "
                    f"→ 0); you wrote mode {wrong_mode}")
    return "start >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, swizzle mode in 62-63"


#: (start, lbo, sbo, swizzle): every mode, the smallest and largest field values, LBO ≠ SBO, the course's tile, and
#: every field at its largest value at once, with addresses and offsets past 18 bits (only their low 18 bits count:
#: an encoder without the mask spills them into the next field)
DESC_CASES = [(0x7400, 16, 1024, 128), (0, 16, 16, 0), (0x3FFF0, 0x3FFF0, 0x20, 64), (0x10, 0x100, 0x3FFF0, 32),
              (0x1230, 0x40, 0x200, 128), (0x20000, 0x80, 0x400, 0)]
DESC_CASES += [(0x3FFF0, 0x3FFF0, 0x3FFF0, sw) for sw in (128, 64, 32, 0)]
DESC_CASES += [(0xFFFFFFF0, 16, 1024, 128), (0x1FFFF0, 0x3FFF0, 0x3FFF0, 64), (0x400, 0xFFFFF0, 0x400, 32),
               (0x400, 0x10, 0xFFFFF0, 0), (0xFFFFFFF0, 0xFFFFFFF0, 0xFFFFFFF0, 128)]


def check_descriptor(encode_desc: Callable[[int, int, int, int], int], seed: int | None = None) -> None:
    """Grade ``encode_desc(start, lbo, sbo, swizzle)`` bit for bit: fixed edge cases, then random fields for
    every swizzle mode."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 3 · shared-memory matrix descriptor", seed=rng.seed) as c:
        cases = list(DESC_CASES)
        cases += [(int(16 * rng.integers(0, 2**14)), int(16 * rng.integers(1, 2**14)), int(16 * rng.integers(1, 2**14)),
                   sw) for sw in (128, 64, 32, 0) for _ in range(3)]
        for start, lbo, sbo, sw in cases:
            what = f"encode_desc(start={start:#x}, lbo={lbo}, sbo={sbo}, swizzle={sw})"
            got_raw = C.call(c, what, encode_desc, start, lbo, sbo, sw)
            got = _as_int(got_raw)
            expected = reference_descriptor(start, lbo, sbo, sw)
            if got is None:
                c.fail(what, f"an int, e.g. {expected:#018x}", got_raw, hint="return the descriptor as a Python int")
            if got != expected:
                c.fail(what, f"{expected:#018x}", f"{got:#018x}" if 0 <= got < 2**64 else got,
                       detail=_field_diff(got & (2**64 - 1), expected),
                       hint=_descriptor_hint(got, start, lbo, sbo, sw))
        c.ok(f"{len(cases)} descriptors bit-identical (every swizzle mode, both ends of every field)")


# ------------------------------------------------------------------------------------------- 2 · K slices
def _kslice_hint(got: int, tile: int, k: int) -> str:
    if got == reference_descriptor(tile + 16 * k, 16, 1024, 128):
        return ("the start moved 16 bytes per slice: one slice is 16 bf16 values = 32 bytes along the row "
                "(&sA[16*k] in C++ counts elements, not bytes)")
    if got in (reference_descriptor(tile + 16 * k * 128, 16, 1024, 128),
               reference_descriptor(tile + 2048 * k, 16, 1024, 128)):
        return "the slice moves along K, inside each 128-byte row, not down the rows of the tile"
    if got == reference_descriptor(tile + 32 * k, 1024, 16, 128):
        return "LBO and SBO are swapped: LBO = 16 bytes (bits 16-29), SBO = 1024 bytes (bits 32-45)"
    if got == reference_descriptor(tile, 16, 1024, 128) and k:
        return "every slice got the descriptor of slice 0: add 32·k bytes to the start address"
    if (got & ~(3 << 62)) == (reference_kslice_descriptor(tile, k) & ~(3 << 62)):
        return "128B swizzle is mode 1 in bits 62-63 (bit 62 set, bit 63 clear)"
    return ("the start field follows the tile_addr you are given, plus the slice's offset along the row; LBO, SBO "
            "and swizzle are those of the 128B K-major tile")


def check_kslice_descriptor(kslice_desc: Callable[[int, int], int], seed: int | None = None) -> None:
    """Grade ``kslice_desc(tile_addr, k)`` bit for bit: k = 0..3 for the first and last possible tile and random
    1024-aligned ones."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 3 · descriptors of the four K slices", seed=rng.seed) as c:
        last = SMEM_BYTES // 1024 * 1024 - TILE_BYTES
        tiles = [0, last, 0x2000] + [int(1024 * x) for x in rng.choice(np.arange(1, last // 1024), size=3,
                                                                        replace=False)]
        for tile in tiles:
            for k in range(4):
                what = f"kslice_desc(tile_addr={tile:#x}, k={k})"
                got = _as_int(C.call(c, what, kslice_desc, tile, k))
                expected = reference_kslice_descriptor(tile, k)
                if got is None:
                    c.fail(what, "an int", got, hint="return the descriptor as a Python int")
                if got != expected:
                    c.fail(what, f"{expected:#018x}", f"{got:#018x}" if 0 <= got < 2**64 else got,
                           detail=_field_diff(got & (2**64 - 1), expected), hint=_kslice_hint(got, tile, k))
            c.ok(f"tile at {tile:#x}: the 4 slice descriptors step the start field by 2 (= 32 bytes)")


# ------------------------------------------------------------------------------------------- 3 · fragments
def check_fragment_coords(fragment_coords: Callable[[int, int], tuple[int, int]], seed: int | None = None) -> None:
    """Grade ``fragment_coords(t, j) -> (row, col)`` on all 128 threads × 32 registers (no randomness)."""
    with grading.check("Lab 3 · accumulator fragment map of m64n64k16") as c:
        rows = np.full((128, 32), -1, np.int64)
        cols = np.full((128, 32), -1, np.int64)
        for t in range(128):
            for j in range(32):
                got = C.call(c, f"fragment_coords({t}, {j})", fragment_coords, t, j)
                try:
                    r, col = got
                    rows[t, j], cols[t, j] = int(r), int(col)
                except (TypeError, ValueError):
                    c.fail(f"fragment_coords({t}, {j})", reference_fragment_coords(t, j), got,
                           hint="return a pair of ints (row, col)")
        exp_r, exp_c = _coord_table()
        if np.array_equal(rows, exp_c) and np.array_equal(cols, exp_r):
            c.fail("every (row, col) is transposed", hint="you returned (col, row): row comes from the warp and "
                   "lane/4, column from lane%4 and the register index")
        t = np.arange(128)[:, None]
        j = np.arange(32)[None, :]
        hint_r = "row = 16·warp + lane/4 + 8·((j/2) % 2), with warp = t/32 and lane = t%32"
        if np.array_equal(rows, 16 * (t // 32) + t // 4 + 8 * ((j // 2) % 2)):
            hint_r = "use the lane (t % 32), not the thread index t, in lane/4"
        c.array("row of every (thread, register)", rows, exp_r, hint=hint_r)
        c.array("column of every (thread, register)", cols, exp_c, hint="col = 8·(j/4) + 2·(lane % 4) + j % 2")
        c.true("the 4096 registers cover the 64×64 tile exactly once", np.unique(rows * 64 + cols).size == 4096)


# ------------------------------------------------------------------------------------------- shared pieces
def make_operands(rng: np.random.Generator, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Random bf16 A (m×k) and B (n×k, K-major), normal values."""
    return C.make_operands(rng, m, n, k)


def _tmaps(a: np.ndarray, b: np.ndarray) -> tuple[Any, Any]:
    from helpers.hopper import tensormap

    ta = tensormap.for_matrix(a.shape, tensormap.DataType.BFLOAT16, 64, 64, tensormap.Swizzle.B128)
    tb = tensormap.for_matrix(b.shape, tensormap.DataType.BFLOAT16, 64, 64, tensormap.Swizzle.B128)
    return ta, tb


def stage_image(a: np.ndarray, b: np.ndarray, m0: int, n0: int, k0: int, a_addr: int = 0,
                b_addr: int = TILE_BYTES, size: int = 2 * TILE_BYTES) -> np.ndarray:
    """The shared memory of one K step as TMA leaves it: A[m0:m0+64, k0:k0+64] at ``a_addr`` and
    B[n0:n0+64, k0:k0+64] at ``b_addr``, both 128B-swizzled (uint8 image of ``size`` bytes)."""
    from helpers.hopper import tma

    ta, tb = _tmaps(a, b)
    smem = np.zeros(size, np.uint8)
    smem[a_addr:a_addr + TILE_BYTES] = tma.load_tile(ta, a, (k0, m0), smem_address=a_addr)
    smem[b_addr:b_addr + TILE_BYTES] = tma.load_tile(tb, b, (k0, n0), smem_address=b_addr)
    return smem


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _as_float_array(c: grading.Check, what: str, got: Any, shape: tuple[int, ...]) -> np.ndarray:
    try:
        arr = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        c.fail(what, f"an array of shape {shape}", type(got).__name__, hint="return a numpy array")
    if arr.shape != shape:
        c.fail(what + " (shape)", shape, arr.shape)
    return arr


def _tile_bytes(x: np.ndarray, addr: int) -> np.ndarray:
    from helpers.hopper import tensormap, tma

    tm = tensormap.for_matrix(x.shape, tensormap.DataType.BFLOAT16, 64, 64, tensormap.Swizzle.B128)
    return tma.load_tile(tm, x, (0, 0), smem_address=addr)


# ------------------------------------------------------------------------------------------- 4 · one product
def check_one_product(one_product: Callable[[np.ndarray, int, int, int], np.ndarray],
                      seed: int | None = None) -> None:
    """Grade ``one_product(smem, a_addr, b_addr, k)``: one m64n64k16 on the emulator, for every slice k = 0..3,
    from a shared-memory image the check builds with emulated TMA at 1024-aligned addresses."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 3 · one m64n64k16 on the emulator", seed=rng.seed) as c:
        places = [(0, TILE_BYTES), (0xC000, 0x2000)]
        for k in range(4):
            while len(places) <= k + 1:  # two non-overlapping 8 KB tiles, 1024-aligned, in a 64 KB image
                a_addr, b_addr = (1024 * int(x) for x in rng.integers(0, 64 - 8 + 1, size=2))
                if abs(a_addr - b_addr) >= TILE_BYTES:
                    places.append((a_addr, b_addr))
            a_addr, b_addr = places[k]
            a, b = make_operands(rng, 64, 64, 64)
            img = np.zeros(64 * 1024, np.uint8)
            img[a_addr:a_addr + TILE_BYTES] = _tile_bytes(a, a_addr)
            img[b_addr:b_addr + TILE_BYTES] = _tile_bytes(b, b_addr)
            what = f"one_product(smem, a_addr={a_addr:#x}, b_addr={b_addr:#x}, k={k})"
            got = _as_float_array(c, what, C.call(c, what, one_product, img.copy(), a_addr, b_addr, k), (64, 64))
            sa, sb = a[:, 16 * k:16 * k + 16], b[:, 16 * k:16 * k + 16]
            expected = _f64(sa) @ _f64(sb).T
            if np.allclose(got, expected.T, rtol=1e-3, atol=1e-3) and not np.allclose(got, expected, 1e-3, 1e-3):
                c.fail(what, hint="the result is the transpose of A·Bᵀ, which two mistakes give alike: the A and "
                       "B descriptors swapped (desc-a describes the tile at a_addr), or register (t, j) placed at "
                       "(col, row) instead of fragment_coords(t, j) = (row, col)")
            c.array(what + " against A[:, 16k:16k+16] · B[:, 16k:16k+16]ᵀ in fp64", got, expected,
                    atol=grading.gemm_tolerance(sa, _f64(sb).T), hint=_diagnose_product(img, a_addr, b_addr, k, got))


def _diagnose_product(img: np.ndarray, a_addr: int, b_addr: int, k: int, got: np.ndarray) -> str:
    """Name the mistake when a wrong product equals what a plausible wrong descriptor gives."""
    from helpers.hopper import wgmma

    def product(desc: Callable[[int, int], int], da: int = a_addr, db: int = b_addr) -> np.ndarray:
        return wgmma.fragments_to_tile(wgmma.mma_async(img, desc(da, k), desc(db, k), 64), 64)

    variants = [
        (lambda t, kk: reference_descriptor(t + 16 * kk, 16, 1024, 128),
         "these are the columns a descriptor stepped by 16 bytes per slice reads: one slice is 16 bf16 = 32 bytes"),
        (lambda t, kk: reference_descriptor(t + 32 * kk, 1024, 16, 128),
         "this is what a descriptor with LBO and SBO swapped reads: LBO 16, SBO 1024"),
        (lambda t, kk: reference_descriptor(t + 32 * kk, 16, 1024, 0),
         "this is what a descriptor without the 128B swizzle mode reads: the tiles are swizzled"),
        (lambda t, kk: reference_descriptor(t, 16, 1024, 128), "this is slice 0's product: use slice k"),
    ]
    for desc, why in variants:
        if k == 0 and "slice 0" in why:
            continue
        try:
            if np.allclose(got, product(desc), rtol=1e-4, atol=1e-4):
                return why
        except Exception:  # noqa: BLE001 - a variant the emulator refuses is simply not the diagnosis
            continue
    try:
        if np.allclose(got, product(reference_kslice_descriptor, b_addr, a_addr).T, rtol=1e-4, atol=1e-4):
            return "the A and B descriptors are swapped: desc_a describes the A tile (a_addr), desc_b the B tile"
    except Exception:  # noqa: BLE001
        pass
    return ("descriptors from kslice_desc(a_addr, k) and kslice_desc(b_addr, k); then place register (t, j) at "
            "fragment_coords(t, j)")


# ------------------------------------------------------------------------------------------- 5 · the store
def fragments_to_tile(acc: np.ndarray) -> np.ndarray:
    """The 64×64 tile that (128, 32) accumulator fragments stand for (reference map)."""
    rows, cols = _coord_table()
    tile = np.empty((64, 64), np.asarray(acc).dtype)
    tile[rows, cols] = acc
    return tile


def _random_shape(rng: np.random.Generator, lo: int = 1, hi: int = 4) -> tuple[int, int, int]:
    """(M, N, K), multiples of 64 in [64·lo, 64·hi], with M ≠ N and K ≠ N (and K ≥ 128: several K steps)."""
    while True:
        m, n, k = (64 * int(x) for x in rng.integers(lo, hi + 1, size=3))
        if m != n and k != n and k >= 128:
            return m, n, k


def check_store_tile(store_tile: Callable[[np.ndarray, np.ndarray, int, int], Any], seed: int | None = None) -> None:
    """Grade ``store_tile(acc, C, m0, n0)``: fragments written to C[m0:m0+64, n0:n0+64] in place, nothing else:
    the first tile, the last one, and one in between of a NaN-poisoned non-square C."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 3 · storing the accumulators to C", seed=rng.seed) as c:
        m, n = 192, 320
        C_ = np.full((m, n), np.nan, np.float32)
        expected = C_.copy()
        tiles = [(0, 0), (m - 64, n - 64), (64, 128)]
        tiles.append((int(rng.integers(0, m // 64)) * 64, int(rng.integers(0, n // 64)) * 64))
        for m0, n0 in tiles:
            acc = rng.standard_normal((128, 32)).astype(np.float32)
            what = f"store_tile(acc, C of shape {C_.shape}, m0={m0}, n0={n0})"
            C.call(c, what, store_tile, acc, C_, m0, n0,
                   hint="write C[m0 + row, n0 + col] for (row, col) = fragment_coords(t, j)")
            expected[m0:m0 + 64, n0:n0 + 64] = fragments_to_tile(acc)
            got_tile = C_[m0:m0 + 64, n0:n0 + 64]
            if np.array_equal(got_tile, fragments_to_tile(acc).T):
                c.fail(what, hint="the tile is transposed: row of C from fragment_coords(t, j)[0], column from [1]")
            c.array(f"{what}: the tile", got_tile, expected[m0:m0 + 64, n0:n0 + 64],
                    hint="register (t, j) goes to C[m0 + row, n0 + col], (row, col) = fragment_coords(t, j); C is "
                    "row-major (a common write-up stores column-major: C[(n0 + col) * M + m0 + row])")
            outside = np.isnan(expected)
            c.true(f"{what}: nothing written outside the tile (C is poisoned with NaN beforehand)",
                   bool(np.isnan(C_[outside]).all()), hint="only the 64×64 block at (m0, n0) of the row-major C may "
                   "change")


# ------------------------------------------------------------------------------------------- 6 · whole GEMM
def check_emulated_gemm(emulated_gemm: Callable[[np.ndarray, np.ndarray, np.ndarray], Any],
                        seed: int | None = None) -> None:
    """Grade ``emulated_gemm(A, B, C)`` (TMA + wgmma on the emulator): a fixed non-square shape with several tiles
    and K steps, then a random one; every element of the poisoned C against fp64 with the bf16 bound."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 3 · the whole GEMM on the emulator", seed=rng.seed) as c:
        for m, n, k in [(128, 64, 128), _random_shape(rng)]:
            a, b = make_operands(rng, m, n, k)
            C_ = np.full((m, n), np.nan, np.float32)
            what = f"emulated_gemm on M={m}, N={n}, K={k}"
            C.call(c, what, emulated_gemm, a, b, C_)
            a64, b64 = _f64(a), _f64(b)
            expected = a64 @ b64.T
            tol = grading.gemm_tolerance(a64, b64.T)
            ok = bool((np.abs(C_ - expected) <= tol).all())
            c.array(f"{what}: C = A·Bᵀ against fp64", C_, expected, atol=tol,
                    hint="" if ok else _diagnose_gemm(a64, b64, C_))


def _diagnose_gemm(a: np.ndarray, b: np.ndarray, got: np.ndarray) -> str:
    """Name the mistake when a wrong C equals what a plausible wrong loop gives (a, b in float64)."""
    k = a.shape[1]
    with np.errstate(invalid="ignore"):
        if np.isnan(got).any():
            return "some elements were never written (C was poisoned with NaN): store every tile of C"
        last = a[:, k - 64:] @ b[:, k - 64:].T
        if np.allclose(got, last, rtol=1e-3, atol=1e-3):
            return "C holds only the last K step: keep the accumulators across K steps, zero them once per tile"
        first = a[:, :64] @ b[:, :64].T
        if np.allclose(got, first, rtol=1e-3, atol=1e-3):
            return "C holds only the first K step: loop k0 over 0, 64, …, K - 64"
    return ("for every 64×64 tile: zero the accumulators; for every K step stage the tiles and issue the 4 slices, "
            "each adding to the accumulators; then store_tile once")


# ------------------------------------------------------------------------------------------- 7 · your wgmma
PROBE_WGMMA = r"""
extern "C" __global__ void probe_wgmma(unsigned long long probe_da, unsigned long long probe_db, int probe_scale,
                                       float* out) {
  float d1[32], d2[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) { d1[j] = out[j]; d2[j] = out[32 + j]; }
  hopper::wgmma_fence_operands(d1);  // the loads above stay before the fence (the compiler may not sink them)
  hopper::wgmma_fence_operands(d2);
  hopper::wgmma_fence();
  my_wgmma_m64n64k16(d1, probe_da, probe_db, probe_scale);
  hopper::wgmma_m64n64k16_bf16(d2, probe_da, probe_db, probe_scale != 0);
  hopper::wgmma_commit();
  hopper::wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < 32; ++j) { out[j] = d1[j]; out[32 + j] = d2[j]; }
}
"""

SELFTEST_WGMMA = r"""
// Four K slices of a 64x64x64 product, once with your my_wgmma_m64n64k16 and once with the header's, from the same
// swizzled tiles and the same starting accumulators; the first slice scales the accumulators by `scale` (0 or 1).
extern "C" __global__ void __launch_bounds__(128) selftest_wgmma(const unsigned short* a_img,
                                                                const unsigned short* b_img, const float* acc_in,
                                                                float* out, int scale) {
  __shared__ alignas(1024) unsigned short sA[64 * 64];
  __shared__ alignas(1024) unsigned short sB[64 * 64];
  const int t = threadIdx.x;
  for (int i = t; i < 64 * 64; i += 128) { sA[i] = a_img[i]; sB[i] = b_img[i]; }
  hopper::fence_proxy_async();  // ordinary stores, read next by the tensor cores (the async proxy)
  __syncthreads();
  float d1[32], d2[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) d1[j] = d2[j] = acc_in[t * 32 + j];
  hopper::wgmma_fence_operands(d1);  // the accumulators are written here, before the fence
  hopper::wgmma_fence_operands(d2);
  hopper::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k)
    my_wgmma_m64n64k16(d1, hopper::make_smem_desc(sA + 16 * k, 16, 1024), hopper::make_smem_desc(sB + 16 * k, 16,
                       1024), k > 0 ? 1 : scale);
#pragma unroll
  for (int k = 0; k < 4; ++k)
    hopper::wgmma_m64n64k16_bf16(d2, hopper::make_smem_desc(sA + 16 * k, 16, 1024),
                                 hopper::make_smem_desc(sB + 16 * k, 16, 1024), k > 0 || scale != 0);
  hopper::wgmma_commit();
  hopper::wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < 32; ++j) { out[t * 32 + j] = d1[j]; out[4096 + t * 32 + j] = d2[j]; }
}
"""


def _normalised(ins: C.Instr) -> tuple[str, list[str]]:
    """An instruction with its registers replaced by their kind, in words ("32 fp32 registers", "a predicate")."""
    kinds = []
    for op in C.split_operands(ins.operands):
        if op.startswith("{"):
            regs = [r.strip() for r in op.strip("{}").split(",")]
            kinds.append(f"{len(regs)} " + ("fp32 registers" if all(r.startswith("%f") for r in regs) else
                                            "registers, not all fp32"))
        elif re.fullmatch(r"%rd\d+", op):
            kinds.append("a 64-bit register")
        elif re.fullmatch(r"%r\d+", op):
            kinds.append("a 32-bit register")
        elif re.fullmatch(r"-?\d+", op):
            kinds.append(f"the immediate {op}")
        else:
            kinds.append("a predicate")
    return ins.opcode, kinds


WGMMA_OPERANDS = ("accumulators d", "desc-a", "desc-b", "scale-d", "imm-scale-a", "imm-scale-b", "imm-trans-a",
                  "imm-trans-b")
WGMMA_WHY = {
    "imm-scale-a": "imm-scale-a = 1 (-1 would negate A)", "imm-scale-b": "imm-scale-b = 1 (-1 would negate B)",
    "imm-trans-a": "imm-trans-a = 0: the A tile is K-major, as wgmma reads it without a transpose",
    "imm-trans-b": "imm-trans-b = 0: B is stored N×K, K-major, no transpose",
    "scale-d": "scale-d is a predicate (p), set in the asm block from your scale_d argument: 0 overwrites D, 1 adds",
    "desc-a": "a 64-bit descriptor (\"l\")", "desc-b": "a 64-bit descriptor (\"l\")",
    "accumulators d": "32 fp32 registers, \"+f\"(d[0]) … \"+f\"(d[31]) in order",
}


def check_wgmma_asm(source: str) -> None:
    """``my_wgmma_m64n64k16(d, desc_a, desc_b, scale_d)``. Where it can run, a self-test kernel issues it and the
    header's hopper::wgmma_m64n64k16_bf16 on the same tiles: bit-identical accumulators are the grade. A probe
    kernel's PTX explains a difference: the two instructions must match (normalised), every operand traced to what
    the probe passed."""
    with grading.check("Lab 3 · your wgmma.mma_async m64n64k16") as c:
        k = C.compile_student(HEADER + source + PROBE_WGMMA, "probe_wgmma", what="my_wgmma_m64n64k16")
        c.ok("compiles for sm_90a")
        ex = C.Explanation(c)
        with ex:
            _wgmma_form(c, k.ptx)
        if not ex.runnable(k, checked="your wgmma instruction against the header's, operand by operand"):
            return
        with ex.run():
            _run_wgmma_selftest(c, source)
        ex.settle()


def _wgmma_form(c: grading.Check, ptx: str) -> None:
    """The student's wgmma beside the header's in the probe's PTX: the same instruction, operand by operand."""
    mmas = C.find_instrs(ptx, "wgmma.mma_async", "probe_wgmma")
    held = "; ".join(i.opcode for i in C.inline_asm(ptx, "probe_wgmma")) or "nothing"
    c.true("your function issues one wgmma.mma_async (beside the header's)", len(mmas) == 2,
           detail=f"    the inline asm held: {held}",
           hint="my_wgmma_m64n64k16 is one asm volatile holding the wgmma.mma_async instruction (Lesson 03)")
    mine, ref = mmas
    c.equal("the full form", mine.opcode, ref.opcode,
            hint="wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16: shape m64n64k16, fp32 accumulators, "
                 "bf16 A and B")
    (_, got), (_, exp) = _normalised(mine), _normalised(ref)
    c.true("eight operands: d, desc-a, desc-b, scale-d, imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b",
           len(got) == len(exp), detail=f"    got: {mine.line}")
    for name, g, e in zip(WGMMA_OPERANDS, got, exp, strict=True):
        c.true(f"{name}: {e} as in the header", g == e, detail=f"    yours: {g}; the header's: {e}",
               hint=WGMMA_WHY[name])
    ops = C.split_operands(mine.operands)
    origin = {C.resolve(ptx, ops[1]), C.resolve(ptx, ops[2])}
    da, db = C.resolve(ptx, ops[1]), C.resolve(ptx, ops[2])
    c.true("desc-a is the A descriptor the probe passed, desc-b the B one", da.endswith("param_0") and
           db.endswith("param_1"), detail=f"    desc-a came from {da}, desc-b from {db}",
           hint="the A descriptor comes first: %32 = desc_a, %33 = desc_b" if origin ==
           {"probe_wgmma_param_0", "probe_wgmma_param_1"} else "pass desc_a and desc_b with \"l\" constraints")
    _check_accumulator_order(c, ptx, mine)
    _check_scale_d(c, ptx, mine)


def _check_accumulator_order(c: grading.Check, ptx: str, mine: C.Instr) -> None:
    """Register j of the accumulator vector must be d[j]: the probe loads d[j] from out[j]."""
    from helpers.course.checks._ptxflow import Flow

    flow = Flow(ptx, "probe_wgmma")
    regs = [r.strip() for r in C.split_operands(mine.operands)[0].strip("{}").split(",")]
    order = []
    for r in regs:
        sites = flow.def_sites.get(r, set())
        loads = [flow.ins[i] for i in sites if flow.ins[i].opcode.startswith("ld.global")]
        off = None
        if loads:
            m = re.search(r"\+(\d+)\]", loads[0].operands)
            off = int(m.group(1)) // 4 if m else 0
        order.append(off)
    if None in order:
        c.ok("(the order of the accumulators could not be read from the PTX; the run checks it)")
        return
    c.true("the accumulator registers are d[0] … d[31], in order", order == list(range(32)),
           detail=f"    your vector holds d{order[:8]}…", hint="list \"+f\"(d[0]), \"+f\"(d[1]), … \"+f\"(d[31]) in "
           "this order: register j of the wgmma's D is the thread's accumulator j (the fragment layout)")


def _check_scale_d(c: grading.Check, ptx: str, mine: C.Instr) -> None:
    """scale-d: a predicate set inside the asm block from the probe's scale argument (probe_scale)."""
    pred = C.split_operands(mine.operands)[3]
    body = C.inline_asm(ptx, "probe_wgmma")
    at = next(i for i, ins in enumerate(body) if ins.line == mine.line)
    setp = [ins for ins in body[:at] if ins.opcode.startswith("setp") and C.split_operands(ins.operands)[0] == pred]
    src = C.resolve(ptx, C.split_operands(setp[-1].operands)[1]) if setp else ""
    c.true("scale-d is set from your scale_d argument", bool(setp) and src.endswith("param_2"),
           detail=f"    scale-d is {pred}" + (f", set from {src}" if setp else ", not set in your asm block"),
           hint="declare .reg .pred p; set it with setp.ne.b32 p, %34, 0 from scale_d, and pass p as scale-d")
    truth = _setp_truth(setp[-1])
    if truth is not None:
        c.true("scale-d is true for scale_d = 1 (add to D) and false for 0 (overwrite D)", truth == (False, True),
               detail=f"    your predicate for scale_d = 0, 1: {truth}", hint="p = (scale_d != 0): setp.ne with 0")


def _setp_truth(setp: C.Instr) -> tuple[bool, bool] | None:
    """(p for scale_d = 0, p for scale_d = 1) of ``setp.CMP.TYPE p, scale, imm``; None when it is not that."""
    import operator

    cmp = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
           "ge": operator.ge, "lo": operator.lt, "ls": operator.le, "hi": operator.gt, "hs": operator.ge}
    ops = C.split_operands(setp.operands)
    parts = setp.parts
    if len(parts) < 2 or parts[1] not in cmp or len(ops) != 3 or not re.fullmatch(r"-?\d+", ops[2]):
        return None
    return tuple(bool(cmp[parts[1]](v, int(ops[2]))) for v in (0, 1))  # type: ignore[return-value]


def _run_wgmma_selftest(c: grading.Check, source: str) -> None:
    from helpers.hopper import wgmma

    kk = C.compile_student(HEADER + source + SELFTEST_WGMMA, "selftest_wgmma", what="the wgmma self-test kernel")
    rng = grading.fresh_rng()
    a, b = make_operands(rng, 64, 64, 64)
    img = stage_image(a, b, 0, 0, 0)
    a_img, b_img = img[:TILE_BYTES].view(np.uint16).copy(), img[TILE_BYTES:].view(np.uint16).copy()
    for scale in (0, 1):
        acc = rng.standard_normal((128, 32)).astype(np.float32)
        out = np.full(2 * 4096, np.nan, np.float32)
        (_, _, _, got) = C.run(kk, 1, 128, 0, a_img, b_img, acc.reshape(-1), out, np.int32(scale),
                               what="the wgmma self-test")
        expected = acc if scale else np.zeros_like(acc)
        for s in range(4):
            expected = wgmma.mma_async(img, reference_kslice_descriptor(0, s),
                                       reference_kslice_descriptor(TILE_BYTES, s), 64, expected)
        c.array(f"{C.where()}: scale_d = {scale}, your 4 wgmmas against the header's 4 on the same tiles and "
                "accumulators, bit for bit", got[:4096], got[4096:],
                hint="same instruction, same inputs: any difference is in the operands you pass")
        c.array(f"{C.where()}: scale_d = {scale}, your 4 wgmmas against helpers.hopper.wgmma's m64n64k16 (the H100's "
                "rounding), bit for bit", got[:4096], np.asarray(expected, np.float32).reshape(-1))


# ------------------------------------------------------------------------------------------- 8 · the kernel
def _diagnose_kernel(got: np.ndarray, expected: np.ndarray) -> str:
    """Name the mistake behind a wrong C where the pattern tells."""
    got = np.asarray(got, np.float64)
    with np.errstate(invalid="ignore"):
        if np.isnan(got).any():
            return ("some elements were never written (C was poisoned with NaN): every thread stores its 32 "
                    "registers, at rows m0 + …, columns n0 + …")
        if np.allclose(got, C.tiles_transposed(expected), rtol=1e-3, atol=1e-3):
            return ("every 64×64 tile is transposed, which two mistakes give alike: the A and B descriptors swapped "
                    "in the wgmma, or the store's row and column swapped (the row comes from warp and lane/4, the "
                    "column from lane%4 and j)")
    return ("wrong values all over: check the descriptor bits (LBO 16, SBO 1024, bit 62 for 128B) and the 32-byte "
            "step per K slice, as in your kslice_desc above, and the store map")


def kernel_protocol(c: grading.Check, ptx: str, compiled: str, kernel: str | None) -> None:
    """Lab 2's load-loop rules, and the wgmma's own: fence before the first wgmma, commit then wait before the
    stage is released, wait_group 0."""
    from helpers.course.checks import lab2

    proto = lab2.protocol_checks(c, ptx, compiled, kernel)
    bad = proto.mma_before_fence()
    if bad is not None:
        c.fail("a wgmma can run before any wgmma.fence", detail=f"    at {proto.where(bad)}",
               hint="wgmma_fence() before the first wgmma: the accumulators were written by ordinary instructions")
    c.ok("wgmma.fence before the first wgmma")
    bad = proto.wait_before_commit()
    if bad is not None:
        c.fail("a wgmma.wait_group follows wgmmas that were never committed", detail=f"    at {proto.where(bad)}",
               hint="wgmma_commit() closes the group of the step's 4 wgmmas; the wait then waits for that group")
    bad = proto.release_before_retire()
    if bad is not None:
        c.fail("the stage is released while the step's wgmmas may still read it", detail=f"    at {proto.where(bad)}",
               hint="the wgmma reads shared memory asynchronously: commit, wait for the group (wgmma_wait<0>()), "
                    "then arrive on empty[s]")
    waits = [proto.flow.value(i.ops()[0]) for i in proto.flow.ins if i.opcode.startswith("wgmma.wait_group")]
    c.true("wgmma.wait_group 0 (every wgmma of the step retired before the release)", bool(waits) and
           all(w == 0 for w in waits), detail=f"    wait_group operands: {waits}",
           hint="with one group in flight allowed (wait_group 1) the step's own wgmmas may still read the stage you "
                "release next; Lab 4 keeps one in flight and releases the previous stage instead")
    c.ok("commit, then wait, then release: the stage goes back only after the tensor cores are done with it")
    mmas = [i for i in proto.flow.ins if i.opcode.startswith("wgmma.mma_async")]
    c.true("4 wgmma m64n64k16 per K step (the K loop's body)", len(mmas) >= 4 and all(
        "m64n64k16" in i.opcode for i in mmas), detail=f"    found {len(mmas)}",
           hint="BK = 64 is four k16 slices: four wgmmas per step, with #pragma unroll so d stays in registers")


def check_gemm_kernel(source: str, kernel: str | None = None, *, benchmark: bool = True, size: int = 4096) -> None:
    """The lab's kernel ``lab3_gemm``. Where it can run, random non-square GEMMs against fp64 are the grade (and on
    the H100 it is then timed at size³ beside cuBLAS in the same run). The compile report (registers, spills, wgmma
    kept asynchronous) and the protocol read from every path of the PTX explain a wrong C, fail a run that passed by
    luck, and are the grade where nothing can run."""
    rng = grading.fresh_rng()
    with grading.check("Lab 3 · the tensor-core GEMM kernel", seed=rng.seed) as c:
        full_source = HEADER + source
        kern = C.compile_student(full_source, KERNEL_NAME, what="your kernel")
        report = kern.report
        c.ok(f"compiles: {report.summary()}")
        ex = C.Explanation(c)
        with ex:
            c.true("the kernel issues wgmma (ptxas kept it)", report.uses_wgmma,
                   hint="the K step issues your my_wgmma_m64n64k16 four times")
            kernel_protocol(c, kern.ptx, full_source, kernel)
            notes = "\n".join(f"    {line.strip()}" for line in report.log.splitlines() if "serialized" in line)
            c.true("the compiler kept wgmma asynchronous (not serialized)", not report.wgmma_serialized,
                   detail=notes, hint="ptxas serializes wgmma when it cannot prove the accumulators are left alone "
                   "while a wgmma is in flight: fence before the first wgmma, commit and wait after, no accumulator "
                   "access between")
            C.check_no_accumulator_spills(c, report,
                                          hint="the accumulators must stay in registers: index d[] only with "
                                               "compile-time constants")
        if not ex.runnable(kern, checked="the load loop's and the wgmma's protocol on every path of the PTX; the "
                                        "descriptors and the store are graded on the emulator above"):
            return
        with ex.run():
            C.check_gemm_runs(c, full_source, KERNEL_NAME, rng, _diagnose_kernel, timed=benchmark)
        ex.settle()
        if benchmark and C.on_h100():
            bench = C.run(C.gemm_benchmark, full_source, KERNEL_NAME, size, what=f"the {size}³ benchmark",
                          timeout=300)
            c.ok(f"timed {C.where().removeprefix('ran ')} at {size}³ beside cuBLAS in the same run: "
                 f"{bench.summary()}")
            from ._ladder import timed

            timed(KERNEL_NAME)[size] = (bench, None)


# ------------------------------------------------------------------------------------------- the ladder
def ladder_rows(size: int = 4096) -> list[dict[str, Any]]:
    """The ladder at size³: the course's Lab 3 kernel as measured on an H100, then your own Lab 3 kernel as the kernel
    check timed it in this session (on an H100)."""
    from ._ladder import lab_ladder_rows

    return lab_ladder_rows(size, "Lab 3", {"lab3": "Lab 3 · the course's kernel"}, KERNEL_NAME)


def show_ladder(size: int = 4096) -> None:
    """The ladder at size³ as a table: TFLOP/s beside cuBLAS in the same run, and the ratio."""
    from ._ladder import show_rows

    show_rows(ladder_rows(size), size)
