"""Graders of Lab 3 (WGMMA): descriptors, the K-step addressing, the accumulator fragment map, one emulated
m64n64k16, the fragment store, a whole GEMM on the emulator, and the CUDA kernel (compiled everywhere, run and
timed beside cuBLAS on an H100).

Conventions of the lab: A is M×K bf16 row-major, B is N×K bf16 row-major (K-major, the layout wgmma reads
without transposing), C = A·Bᵀ is M×N fp32 row-major. Shared-memory tiles are 64×64 bf16, 128B-swizzled by TMA,
1024-byte aligned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from helpers import grading

__all__ = [
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


def _call(c: grading.Check, what: str, fn: Callable[..., Any], *args: Any, hint: str = "") -> Any:
    """Call the student's function; an exception other than NotImplementedError fails the check in words."""
    try:
        return grading.call_student(fn, *args)
    except grading.CheckFailed:
        raise
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported to the student
        c.fail(f"{what}: your function raised {type(exc).__name__}: {exc}", hint=hint)


# ------------------------------------------------------------------------------------------- 1 · descriptor
def _descriptor_hint(got: int, start: int, lbo: int, sbo: int, swizzle: int) -> str:
    if got == reference_descriptor(start, sbo, lbo, swizzle):
        return "LBO and SBO are swapped: the leading byte offset goes in bits 16-29, the stride byte offset in 32-45"
    if got == (start | lbo << 16 | sbo << 32 | _MODE[swizzle] << 62) & (2**64 - 1):
        return "every offset is stored in units of 16 bytes: shift start, LBO and SBO right by 4"
    for wrong_mode in range(4):
        if wrong_mode != _MODE[swizzle] and got == (reference_descriptor(start, lbo, sbo, 0) | wrong_mode << 62):
            want = _MODE[swizzle]
            return (f"swizzle {swizzle} B is mode {want} in bits 62-63 (128B → 1, 64B → 2, 32B → 3, none → 0); "
                    f"you wrote mode {wrong_mode}")
    return "start >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, swizzle mode in 62-63"


def check_descriptor(encode_desc: Callable[[int, int, int, int], int]) -> None:
    """Grade ``encode_desc(start, lbo, sbo, swizzle)`` bit for bit on random fields and every swizzle mode."""
    rng = grading.fresh_rng()
    with grading.check("Lab 3 · shared-memory matrix descriptor", seed=rng.seed) as c:
        cases = [(int(16 * rng.integers(0, 2**14)), int(16 * rng.integers(1, 2**14)),
                  int(16 * rng.integers(1, 2**14)), sw) for sw in (128, 64, 32, 0) for _ in range(6)]
        tile = int(1024 * rng.integers(0, 200))
        cases.append((tile, 16, 1024, 128))  # the tile descriptor the H100 ran
        for n, (start, lbo, sbo, sw) in enumerate(cases):
            what = f"encode_desc(start={start:#x}, lbo={lbo}, sbo={sbo}, swizzle={sw})"
            got_raw = _call(c, what, encode_desc, start, lbo, sbo, sw)
            got = _as_int(got_raw)
            expected = reference_descriptor(start, lbo, sbo, sw)
            if got is None:
                c.fail(what, f"an int, e.g. {expected:#018x}", got_raw, hint="return the descriptor as a Python int")
            if got != expected:
                c.fail(what, f"{expected:#018x}", f"{got:#018x}" if 0 <= got < 2**64 else got,
                       detail=_field_diff(got & (2**64 - 1), expected),
                       hint=_descriptor_hint(got, start, lbo, sbo, sw))
            if n % 6 == 5:
                label = f"{sw}B swizzle" if sw else "no swizzle"
                c.ok(f"6 random descriptors with {label}: bit-identical")
        c.ok(f"the 128B K-major tile at {tile:#x}: {reference_descriptor(tile, 16, 1024, 128):#018x}")


# ------------------------------------------------------------------------------------------- 2 · K slices
def _kslice_hint(got: int, tile: int, k: int) -> str:
    if got == reference_descriptor(tile + 16 * k, 16, 1024, 128):
        return ("the start moved 16 bytes per slice: one slice is 16 bf16 values = 32 bytes along the row "
                "(&sA[16*k] in C++ counts elements, not bytes)")
    if got == reference_descriptor(tile + 16 * k * 128, 16, 1024, 128) or got == reference_descriptor(
            tile + 2048 * k, 16, 1024, 128):
        return "the slice moves along K, inside each 128-byte row, not down the rows of the tile"
    if got == reference_descriptor(tile + 32 * k, 1024, 16, 128):
        return "LBO and SBO are swapped: LBO = 16 bytes (bits 16-29), SBO = 1024 bytes (bits 32-45)"
    if got == reference_descriptor(tile, 16, 1024, 128) and k:
        return "every slice got the descriptor of slice 0: add 32·k bytes to the start address"
    if (got & ~(3 << 62)) == (reference_kslice_descriptor(tile, k) & ~(3 << 62)):
        return "128B swizzle is mode 1 in bits 62-63 (bit 62 set, bit 63 clear)"
    return ("the start field follows the tile_addr you are given, plus the slice's offset along the row; LBO, SBO "
            "and swizzle are those of the 128B K-major tile")


def check_kslice_descriptor(kslice_desc: Callable[[int, int], int]) -> None:
    """Grade ``kslice_desc(tile_addr, k)`` bit for bit for random 1024-aligned tiles and k = 0..3."""
    rng = grading.fresh_rng()
    with grading.check("Lab 3 · descriptors of the four K slices", seed=rng.seed) as c:
        tiles = [int(1024 * x) for x in rng.choice(np.arange(0, SMEM_BYTES // 1024 - 8), size=5, replace=False)]
        for tile in tiles:
            for k in range(4):
                what = f"kslice_desc(tile_addr={tile:#x}, k={k})"
                got = _as_int(_call(c, what, kslice_desc, tile, k))
                expected = reference_kslice_descriptor(tile, k)
                if got is None:
                    c.fail(what, "an int", got, hint="return the descriptor as a Python int")
                if got != expected:
                    c.fail(what, f"{expected:#018x}", f"{got:#018x}" if 0 <= got < 2**64 else got,
                           detail=_field_diff(got & (2**64 - 1), expected), hint=_kslice_hint(got, tile, k))
            c.ok(f"tile at {tile:#x}: the 4 slice descriptors step the start field by 2 (= 32 bytes)")


# ------------------------------------------------------------------------------------------- 3 · fragments
def check_fragment_coords(fragment_coords: Callable[[int, int], tuple[int, int]]) -> None:
    """Grade ``fragment_coords(t, j) -> (row, col)`` on all 128 threads × 32 registers."""
    with grading.check("Lab 3 · accumulator fragment map of m64n64k16") as c:
        rows = np.full((128, 32), -1, np.int64)
        cols = np.full((128, 32), -1, np.int64)
        for t in range(128):
            for j in range(32):
                got = _call(c, f"fragment_coords({t}, {j})", fragment_coords, t, j)
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
        c.array("column of every (thread, register)", cols, exp_c,
                hint="col = 8·(j/4) + 2·(lane % 4) + j % 2")
        flat = rows * 64 + cols
        c.true("the 4096 registers cover the 64×64 tile exactly once", np.unique(flat).size == 4096)


# ------------------------------------------------------------------------------------------- shared pieces
def make_operands(rng: np.random.Generator, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Random bf16 A (m×k) and B (n×k, K-major), normal values."""
    from ml_dtypes import bfloat16

    a = rng.standard_normal((m, k)).astype(bfloat16)
    b = rng.standard_normal((n, k)).astype(bfloat16)
    return a, b


def _tmaps(a: np.ndarray, b: np.ndarray) -> tuple[Any, Any]:
    from helpers import tensormap

    ta = tensormap.for_matrix(a.shape, tensormap.DataType.BFLOAT16, 64, 64, tensormap.Swizzle.B128)
    tb = tensormap.for_matrix(b.shape, tensormap.DataType.BFLOAT16, 64, 64, tensormap.Swizzle.B128)
    return ta, tb


def stage_image(a: np.ndarray, b: np.ndarray, m0: int, n0: int, k0: int, a_addr: int = 0,
                b_addr: int = TILE_BYTES, size: int = 2 * TILE_BYTES) -> np.ndarray:
    """The shared memory of one K step as TMA leaves it: A[m0:m0+64, k0:k0+64] at ``a_addr`` and
    B[n0:n0+64, k0:k0+64] at ``b_addr``, both 128B-swizzled (uint8 image of ``size`` bytes)."""
    from helpers import tma

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


# ------------------------------------------------------------------------------------------- 4 · one product
def check_one_product(one_product: Callable[[np.ndarray, int, int, int], np.ndarray]) -> None:
    """Grade ``one_product(smem, a_addr, b_addr, k)``: one m64n64k16 on the emulator, from a shared-memory image
    the check builds with emulated TMA at random 1024-aligned addresses."""
    rng = grading.fresh_rng()
    with grading.check("Lab 3 · one m64n64k16 on the emulator", seed=rng.seed) as c:
        for k in rng.permutation(4)[:3]:
            k = int(k)
            a, b = make_operands(rng, 64, 64, 64)
            while True:  # two non-overlapping 8 KB tiles, 1024-aligned, anywhere in a 64 KB image
                a_addr, b_addr = (1024 * int(x) for x in rng.integers(0, 64 - 8 + 1, size=2))
                if abs(a_addr - b_addr) >= TILE_BYTES:
                    break
            img = np.zeros(64 * 1024, np.uint8)
            img[a_addr:a_addr + TILE_BYTES] = _tile_bytes(a, a_addr)
            img[b_addr:b_addr + TILE_BYTES] = _tile_bytes(b, b_addr)
            what = f"one_product(smem, a_addr={a_addr:#x}, b_addr={b_addr:#x}, k={k})"
            got = _as_float_array(c, what, _call(c, what, one_product, img.copy(), a_addr, b_addr, k), (64, 64))
            sa, sb = a[:, 16 * k:16 * k + 16], b[:, 16 * k:16 * k + 16]
            expected = _f64(sa) @ _f64(sb).T
            if np.allclose(got, expected.T, rtol=1e-3, atol=1e-3) and not np.allclose(got, expected, 1e-3, 1e-3):
                c.fail(what, hint="the result is transposed: register (t, j) goes to fragment_coords(t, j) = "
                       "(row, col) of C, with rows from A and columns from B")
            c.array(what + " against A[:, 16k:16k+16] · B[:, 16k:16k+16]ᵀ in fp64", got, expected,
                    atol=grading.gemm_tolerance(sa, _f64(sb).T), hint=_diagnose_product(img, a_addr, b_addr, k, got))


def _diagnose_product(img: np.ndarray, a_addr: int, b_addr: int, k: int, got: np.ndarray) -> str:
    """Name the mistake when a wrong product equals what a plausible wrong descriptor gives."""
    from helpers import wgmma

    def product(desc: Callable[[int, int], int]) -> np.ndarray:
        return wgmma.fragments_to_tile(wgmma.mma_async(img, desc(a_addr, k), desc(b_addr, k), 64), 64)

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
    return ("descriptors from kslice_desc(a_addr, k) and kslice_desc(b_addr, k); then place register (t, j) at "
            "fragment_coords(t, j)")


def _tile_bytes(x: np.ndarray, addr: int) -> np.ndarray:
    from helpers import tensormap, tma

    tm = tensormap.for_matrix(x.shape, tensormap.DataType.BFLOAT16, 64, 64, tensormap.Swizzle.B128)
    return tma.load_tile(tm, x, (0, 0), smem_address=addr)


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


def check_store_tile(store_tile: Callable[[np.ndarray, np.ndarray, int, int], Any]) -> None:
    """Grade ``store_tile(acc, C, m0, n0)``: fragments written to C[m0:m0+64, n0:n0+64] in place, nothing else."""
    rng = grading.fresh_rng()
    with grading.check("Lab 3 · storing the accumulators to C", seed=rng.seed) as c:
        m, n, _ = _random_shape(rng, 2, 5)
        C = np.full((m, n), np.nan, np.float32)
        expected = C.copy()
        tiles = {(int(rng.integers(0, m // 64)) * 64, int(rng.integers(0, n // 64)) * 64) for _ in range(3)}
        for m0, n0 in sorted(tiles):
            acc = rng.standard_normal((128, 32)).astype(np.float32)
            what = f"store_tile(acc, C of shape {C.shape}, m0={m0}, n0={n0})"
            _call(c, what, store_tile, acc, C, m0, n0,
                  hint="write C[m0 + row, n0 + col] for (row, col) = fragment_coords(t, j)")
            expected[m0:m0 + 64, n0:n0 + 64] = fragments_to_tile(acc)
            got_tile = C[m0:m0 + 64, n0:n0 + 64]
            if np.array_equal(got_tile, fragments_to_tile(acc).T):
                c.fail(what, hint="the tile is transposed: row of C from fragment_coords(t, j)[0], column from [1]")
            c.array(f"{what}: the tile", got_tile, expected[m0:m0 + 64, n0:n0 + 64],
                    hint="register (t, j) goes to C[m0 + row, n0 + col], (row, col) = fragment_coords(t, j); C is "
                    "row-major (the notes' store is column-major: C[(n0 + col) * M + m0 + row])")
            outside = np.isnan(expected)
            c.true(f"{what}: nothing written outside the tile (C is poisoned with NaN beforehand)",
                   bool(np.isnan(C[outside]).all()),
                   hint="only the 64×64 block at (m0, n0) of the row-major C may change")


# ------------------------------------------------------------------------------------------- 6 · whole GEMM
def check_emulated_gemm(emulated_gemm: Callable[[np.ndarray, np.ndarray, np.ndarray], Any]) -> None:
    """Grade ``emulated_gemm(A, B, C)`` (TMA + wgmma on the emulator) on random non-square shapes: every element
    of the poisoned C against fp64 with the bf16 bound."""
    rng = grading.fresh_rng()
    with grading.check("Lab 3 · the whole GEMM on the emulator", seed=rng.seed) as c:
        for _ in range(2):
            m, n, k = _random_shape(rng)
            a, b = make_operands(rng, m, n, k)
            C = np.full((m, n), np.nan, np.float32)
            what = f"emulated_gemm on M={m}, N={n}, K={k}"
            _call(c, what, emulated_gemm, a, b, C)
            expected = _f64(a) @ _f64(b).T
            c.array(f"{what}: C = A·Bᵀ against fp64", C, expected, atol=grading.gemm_tolerance(a, _f64(b).T),
                    hint=_diagnose_gemm(a, b, C))


# ------------------------------------------------------------------------------------------- 7 · the kernel
def _gpu_shapes(rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """Random non-square shapes for the H100 run: multiples of 64, K ≠ N, M ≠ N."""
    shapes = []
    while len(shapes) < 3:
        m, n, k = (64 * int(x) for x in rng.integers(1, 13, size=3))
        if m != n and k != n and k >= 128:
            shapes.append((m, n, k))
    return shapes


def gpu_run(source: str, cases: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """(Runs in the isolated child.) Launch the lab's kernel on each (A, B) with C poisoned; return each C."""
    from helpers import gpu

    kernel = gpu.compile(source, KERNEL_NAME)
    out = []
    for a, b in cases:
        (m, k), n = a.shape, b.shape[0]
        da, db = gpu.to_device(a), gpu.to_device(b)
        dc = gpu.poison((m, n), np.float32)
        ta, tb = gpu.tensor_map_2d(da, 64, 64), gpu.tensor_map_2d(db, 64, 64)
        gpu.launch(kernel, (n // 64, m // 64), 128, 0, ta, tb, dc, np.int32(m), np.int32(n), np.int32(k))
        out.append(dc.to_host())
    return out


def gpu_benchmark(source: str, size: int = 4096) -> Any:
    """(Runs in the isolated child.) The lab's kernel at size³ beside cuBLAS: a gpu.GemmBenchmark."""
    from helpers import gpu

    kernel = gpu.compile(source, KERNEL_NAME)

    def make_launch(a: Any, b: Any, c: Any) -> Any:
        (m, k), n = a.shape, b.shape[0]
        ta, tb = gpu.tensor_map_2d(a, 64, 64), gpu.tensor_map_2d(b, 64, 64)
        return gpu.prepare(kernel, (n // 64, m // 64), 128, 0, ta, tb, c, np.int32(m), np.int32(n), np.int32(k))

    return gpu.gemm_benchmark(make_launch, size, size, size)


def _isolated(c: grading.Check, what: str, fn: Callable[..., Any], *args: Any, timeout: float) -> Any:
    from helpers import gpu

    try:
        return gpu.run_isolated(fn, *args, timeout=timeout)
    except gpu.GpuError as exc:
        c.fail(f"{what} failed on the GPU", detail=f"    {exc}",
               hint="a wrong descriptor or shared-memory address can fault; a barrier waited on with the wrong "
               "parity deadlocks")


def _tiles_transposed(x: np.ndarray) -> np.ndarray:
    m, n = x.shape
    return x.reshape(m // 64, 64, n // 64, 64).transpose(0, 3, 2, 1).reshape(m, n)


def _diagnose_kernel(got: np.ndarray, expected: np.ndarray) -> str:
    """Name the mistake behind a wrong C from the GPU where the pattern tells."""
    got = np.asarray(got, np.float64)
    with np.errstate(invalid="ignore"):
        if np.isnan(got).any():
            return ("some elements were never written (C was poisoned with NaN): every thread stores its 32 registers, "
                    "at rows m0 + …, columns n0 + …")
        if np.allclose(got, _tiles_transposed(expected), rtol=1e-3, atol=1e-3):
            return "every 64×64 tile is transposed: the row comes from warp and lane/4, the column from lane%4 and j"
    return ("wrong values all over: check the descriptor bits (LBO 16, SBO 1024, bit 62 for 128B) and the 32-byte step "
            "per K slice, as in your kslice_desc above, and the store map")


def check_gemm_kernel(source: str, *, benchmark: bool = True, size: int = 4096) -> None:
    """Compile the lab's kernel and show its report (registers, spills, wgmma). With an H100: run it through
    gpu.run_isolated on random non-square shapes (C poisoned, every element against fp64 with the bf16 bound),
    then time it at size³ beside cuBLAS. Without one: print the one-line notice (the emulator checks above graded
    the same pieces)."""
    from helpers import gpu

    from ._common import compile_student, find_instrs

    rng = grading.fresh_rng()
    with grading.check("Lab 3 · the tensor-core GEMM kernel", seed=rng.seed) as c:
        kernel = compile_student(source, KERNEL_NAME, what="your kernel")
        report = kernel.report
        c.ok(f"compiles: {report.summary()}")
        mmas = [i for i in find_instrs(kernel.ptx, "wgmma.mma_async") if "m64n64k16" in i.opcode]
        c.true("the kernel issues wgmma.mma_async m64n64k16", report.uses_wgmma and bool(mmas),
               hint="call hopper::wgmma_m64n64k16_bf16(d, desc_a, desc_b) for each of the 4 K slices")
        c.true("the compiler kept wgmma asynchronous (not serialized)", not report.wgmma_serialized,
               hint="see kernel.report.log: wgmma_fence() before the first wgmma, commit and wait after")
        c.true("no register spills", report.spill_bytes == 0,
               hint="the accumulators must stay in registers: index d[] only with compile-time constants")
        if gpu.skip_without_hopper(kernel, checked="descriptors, K-step addressing and the fragment store "
                                   "(graded on the emulator above)"):
            return
        shapes = _gpu_shapes(rng)
        cases = [make_operands(rng, m, n, k) for m, n, k in shapes]
        outs = _isolated(c, "your kernel", gpu_run, source, cases, timeout=120)
        for (m, n, k), (a, b), got in zip(shapes, cases, outs, strict=True):
            c.array(f"M={m}, N={n}, K={k} on the GPU: every element against fp64", got, _f64(a) @ _f64(b).T,
                    atol=grading.gemm_tolerance(a, _f64(b).T), hint=_diagnose_kernel(got, _f64(a) @ _f64(b).T))
        if not benchmark or not gpu.hopper_available():  # timings need the H100 (the emulator does not time)
            return
        bench = _isolated(c, f"the {size}³ benchmark", gpu_benchmark, source, size, timeout=300)
        c.ok(f"timed: {bench.summary()}")


def _diagnose_gemm(a: np.ndarray, b: np.ndarray, got: np.ndarray) -> str:
    """Name the mistake when a wrong C equals what a plausible wrong loop gives."""
    k = a.shape[1]
    with np.errstate(invalid="ignore"):
        if np.isnan(got).any():
            return "some elements were never written (C was poisoned with NaN): store every tile of C"
        last = _f64(a[:, k - 64:]) @ _f64(b[:, k - 64:]).T
        if np.allclose(got, last, rtol=1e-3, atol=1e-3):
            return "C holds only the last K step: keep the accumulators across K steps, zero them once per tile"
        first = _f64(a[:, :64]) @ _f64(b[:, :64]).T
        if np.allclose(got, first, rtol=1e-3, atol=1e-3):
            return "C holds only the first K step: loop k0 over 0, 64, …, K - 64"
    return ("for every 64×64 tile: zero the accumulators; for every K step stage the tiles and issue the 4 slices, "
            "each adding to the accumulators; then store_tile once")
