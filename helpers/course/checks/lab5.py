"""Graders of Lab 5 (the TMA-store epilogue): bf16 rounding, the swizzled sub-tile layout, the shared image of a
sub-tile, the order of writes, fences, barriers, stores and waits (on the epilogue model), and the CUDA kernel
(compiled and read everywhere; run on random non-square shapes wherever kernels run: on the H100, or on the course's
PTX executor with small shapes; timed beside cuBLAS on the H100 only). ``hint`` / ``answer`` give the tiered hints.

Conventions: C is M×N bf16 row-major; each consumer warpgroup owns 64 rows × 256 columns of the 128×256 tile,
stored as four 64×64 sub-tiles through two 8 KiB shared buffers, 128B-swizzled, each handed to one TMA store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from helpers.course import carry, grading
from helpers.course.hints import answer, hint
from helpers.hopper import epilogue, wgmma

from ._common import GemmLaunch, Opening, compile_student, on_h100
from ._kernel import check_epilogue_ptx as _check_epilogue_ptx
from ._kernel import epilogue_ops_from_ptx
from ._kernel import report_checks as _report_checks
from ._ladder import TIMED, lab_ladder_rows, shape_words, show_rows, timed
from ._record import Protocol, Ring

__all__ = [
    "KERNEL_NAME",
    "LAUNCH",
    "check_to_bf16",
    "check_smem_offset",
    "check_stage_subtile",
    "check_epilogue_ops",
    "check_epilogue_kernel",
    "check_fused_element",
    "fused_source_with",
    "fused_cases",
    "FusedCase",
    "rounding_cases",
    "epilogue_ops_from_ptx",
    "opening",
    "previous",
    "carry_wrappers",
    "MEASURED",
    "ladder_rows",
    "lab_ladder_rows",
    "show_rows",
    "shape_words",
    "timed",
    "TIMED",
    "show_ladder",
    "hint",
    "answer",
]

KERNEL_NAME = "lab5_gemm"
SMEM_BYTES = 4 * 48 * 1024 + 32 * 1024 + 1024  # 4 stages + 4 C buffers + alignment slack
#: how the lab's kernel is launched (the same as bench/ladder.py's make_lab5)
LAUNCH = GemmLaunch(KERNEL_NAME, 384, SMEM_BYTES, (128, 64), (256, 64), (64, 64), out_bf16=True, cta_tile=(128, 256))


#: the include every graded Lab 5 kernel starts with (the carried wrappers use the header, and come before the kernel)
HEADER = '#include "hopper.cuh"\n'


def _course_lab4() -> str:
    """The course's Lab 4 kernel (step 8's solution), as the course's data holds it."""
    from ._common import course_kernel

    return course_kernel("lab4")


def carry_wrappers(*, checked: bool = True) -> str:
    """Your wrappers from Labs 1 and 2 (my_tma_load_2d, the mbarrier wrappers and the wait loop), carried as Lab 4
    carries them, from your saved notebooks beside this one; ``checked``: each line says whether it still passes its
    lab's check (otherwise read quietly)."""
    from . import lab3

    return lab3.carry_wrappers(checked=checked)


def _lab4_check(wrappers: str) -> Callable[[str], None]:
    """Lab 4's check of step 8's kernel, quick: the compile report and the protocol from the PTX, then one small run
    on the course's PTX executor in hazard mode (on any machine; no timing)."""
    from . import lab4
    from ._common import emulated

    def check(kernel: str) -> None:
        with emulated():
            lab4.check_ws_kernel(wrappers + kernel, kernel=kernel, benchmark=False)

    return check


def previous(wrappers: str) -> carry.Previous:
    """What Lab 5 builds on: your Lab 4 kernel (step 8's ``LAB4_KERNEL`` of lab4_pipeline.ipynb with your step 7
    kernel, ``PC_KERNEL`` of the same notebook, carried into it), checked with Lab 4's check on ``wrappers``; the
    course's Lab 4 kernel stands in where yours does not pass."""
    from . import lab4

    return carry.Previous("Lab 4", "lab4_pipeline.ipynb", "LAB4_KERNEL", _course_lab4, _lab4_check(wrappers), wrappers,
                          whole=lab4.saved_step8_kernel)


def _carried(source: str, wrappers: str | None, here: Any, quiet: bool) -> tuple[carry.Carried, str]:
    """(the merge, the whole source to compile): your Lab 4 kernel (or the course's), this lab's change and your
    regions, after your wrappers."""
    if wrappers is None:
        wrappers = carry_wrappers(checked=False)
    made = carry.carried(previous(wrappers), source, here=here, quiet=quiet)
    return made, HEADER + wrappers + made.kernel


def opening(source: str, *, wrappers: str | None = None, here: Any = None) -> Opening:
    """The kernel this lab grades, as a diff from your Lab 4 kernel (read from lab4_pipeline.ipynb beside this
    notebook and checked with Lab 4's check; the course's stands in where yours is missing or does not pass): your
    Lab 4 code, this lab's change and your two regions as the cell holds them. The first line says whose Lab 4
    kernel it is; then any lines of yours this lab rewrote; then the course's Lab 4 kernel's measured speed."""
    from helpers.course.widgets.roofline import ladder

    from ._common import source_diff

    if wrappers is None:
        wrappers = carry_wrappers(checked=True)
    made, _ = _carried(source, wrappers, here, quiet=True)
    lines = [made.previous.line] + [f"⚠ {line}" for line in made.merge.report()]
    mine = made.previous.yours
    for size in (4096, 8192):
        row = next((m for key, _, m in ladder(size) if key == "lab4b"), None)
        lines.append(f"the course's Lab 4 kernel at {size}³: {row or 'not measured yet'}")
    old = "your Lab 4 kernel" if mine else "the course's Lab 4 kernel"
    diff = source_diff(made.previous.text, made.kernel, f"{old} (Lab 4)",
                       "Lab 5: the kernel graded (" + ("your Lab 4 kernel" if mine else "the course's Lab 4 kernel")
                       + " + this lab's change + your regions)")
    return Opening(f"What Lab 5 changes in {old}", lines, diff)


def _call(c: grading.Check, what: str, fn: Callable[..., Any], *args: Any, hint: str = "") -> Any:
    try:
        return grading.call_student(fn, *args, what=what.split("(")[0])
    except (grading.CheckFailed, NotImplementedError):
        raise
    except Exception as exc:  # noqa: BLE001 - reported to the student
        c.fail(f"{what}: your function raised {type(exc).__name__}: {exc}", hint=hint)


# ------------------------------------------------------------------------------------------- 1 · rounding
def rounding_cases(rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[str, np.ndarray]]]:
    """fp32 inputs for the bf16 check: the named edge cases (each as bit patterns), then random ones."""
    named = [
        ("values bf16 holds exactly", [0x3F800000, 0xC0200000, 0x00000000, 0x80000000, 0x7F7F0000]),
        ("halfway, even neighbour below (stay)", [0x3F808000, 0xBF808000, 0x40000000 | 0x8000]),
        ("halfway, odd neighbour below (round up)", [0x3F818000, 0xBF818000, 0x3FFF8000]),
        ("just above halfway", [0x3F808001, 0xBF808001]),
        ("just below halfway", [0x3F817FFF, 0xBF817FFF]),
        ("carry into the exponent", [0x3F7FFFFF, 0x3FFFC000, 0xBF7FFFFF]),
        ("overflow to infinity", [0x7F7FFFFF, 0x7F7F8000, 0xFF7F8000]),
        ("largest that stays finite", [0x7F7F7FFF, 0xFF7F7FFF]),
        ("infinities", [0x7F800000, 0xFF800000]),
        ("subnormals", [0x00008000, 0x00018000, 0x00008001, 0x807FFFFF, 0x00000001]),
    ]
    groups = [(name, np.array(bits, np.uint32).view(np.float32)) for name, bits in named]
    normal = (rng.standard_normal(512) * 10.0 ** rng.integers(-6, 7, 512)).astype(np.float32)
    raw = rng.integers(0, 2**32, 512, dtype=np.uint64).astype(np.uint32)
    raw = raw[(raw & 0x7F800000) != 0x7F800000].view(np.float32)  # finite bit patterns
    groups += [("random normal values", normal), ("random finite bit patterns", raw)]
    return np.concatenate([g for _, g in groups]), groups


def _rounding_hint(x: np.ndarray, got: np.ndarray) -> str:
    bits = x.view(np.uint32).astype(np.uint64)
    if np.array_equal(got, epilogue.truncate_bf16_bits(x)):
        return ("these are the top 16 bits unchanged (rounding toward zero); the kernel rounds to the nearest bf16: "
                "add half of the dropped part before shifting, ties to the even neighbour")
    if np.array_equal(got, ((bits + 0x8000) >> 16).astype(np.uint16)):
        return ("halfway cases went up (away from zero): a tie goes to the neighbour whose last bit is 0 — add 0x7FFF "
                "plus the lowest kept bit, then shift")
    if np.array_equal(got, ((bits + 0x7FFF) >> 16).astype(np.uint16)):
        return "halfway cases went down: a tie goes to the even neighbour — add 0x7FFF plus the lowest kept bit"
    return "round to nearest, ties to even: (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 on the uint32 bit pattern"


def check_to_bf16(to_bf16: Callable[[np.ndarray], np.ndarray]) -> None:
    """Grade ``to_bf16(x) -> uint16 bits``: round to nearest even, on every named edge case and random values."""
    rng = grading.fresh_rng()
    with grading.check("Lab 5 · rounding fp32 to bf16", seed=rng.seed) as c:
        x, groups = rounding_cases(rng)
        got_raw = _call(c, "to_bf16(x)", to_bf16, x.copy())
        got = np.asarray(got_raw)
        if got.shape != x.shape:
            c.fail("to_bf16(x) (shape)", x.shape, got.shape, hint="return one 16-bit pattern per input value")
        if got.dtype.kind not in "ui":
            c.fail("to_bf16(x) returns bit patterns", "an unsigned integer array (uint16)", f"dtype {got.dtype}",
                   hint="return the 16-bit patterns, e.g. as np.uint16, not the rounded values")
        got = got.astype(np.int64)
        if got.min() < 0 or got.max() > 0xFFFF:
            c.fail("to_bf16(x) returns 16-bit patterns", "values 0 … 65535", f"values {got.min()} … {got.max()}")
        want = epilogue.to_bf16_bits(x).astype(np.int64)
        start = 0
        for name, g in groups:
            part = slice(start, start + g.size)
            start += g.size
            if not np.array_equal(got[part], want[part]):
                i = int(np.flatnonzero(got[part] != want[part])[0])
                xi = g[i]
                c.fail(f"{name}: to_bf16 of {xi!r} (bits {int(g.view(np.uint32)[i]):#010x})",
                       f"{int(want[part][i]):#06x}", f"{int(got[part][i]):#06x}",
                       hint=_rounding_hint(x, got.astype(np.uint16)))
            c.ok(f"{name}: {g.size} value(s), every bit right")


# ------------------------------------------------------------------------------------------- 2 · layout
def _offset_hint(fn_table: np.ndarray) -> str:
    r, col = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    if np.array_equal(fn_table, r * 128 + col * 2):
        return ("this is the plain row-major layout: the TMA store reads the buffer 128B-swizzled, so 16-byte chunk "
                "col/8 of row r sits at chunk (col/8) XOR (r mod 8)")
    if np.array_equal(fn_table, r * 128 + (((col // 8) ^ (r // 8) % 8) * 16) + (col % 8) * 2):
        return "the XOR uses the row modulo 8 (row bits 0-2, address bits 7-9), not row / 8"
    if np.array_equal(fn_table, r * 128 + ((col ^ (r % 8)) * 2)):
        return "the swizzle moves whole 16-byte chunks (8 bf16 columns): XOR the chunk index col/8, not the column"
    if np.array_equal(fn_table, r * 64 + (((col // 8) ^ (r % 8)) * 8) + col % 8):
        return "that is an element index; the function returns a byte offset (2 bytes per bf16)"
    if np.array_equal(fn_table, col * 128 + (((r // 8) ^ (col % 8)) * 16) + (r % 8) * 2):
        return "row and column are swapped: C is row-major, so a row of the sub-tile is 128 contiguous bytes"
    return "row·128 bytes, then 16-byte chunk (col/8) XOR (row mod 8), then 2·(col mod 8) inside the chunk"


def check_smem_offset(smem_offset: Callable[[int, int], int]) -> None:
    """Grade ``smem_offset(row, col)`` on all 64 × 64 elements of a sub-tile."""
    with grading.check("Lab 5 · where each C element sits in the swizzled sub-tile") as c:
        table = np.full((64, 64), -1, np.int64)
        for row in range(64):
            for col in range(64):
                got = _call(c, f"smem_offset({row}, {col})", smem_offset, row, col)
                if isinstance(got, bool) or not isinstance(got, int | np.integer):
                    c.fail(f"smem_offset({row}, {col})", "an int (a byte offset)", got)
                table[row, col] = int(got)
        r, col = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
        want = epilogue.subtile_offset(r, col)
        c.array("the byte offset of every (row, col)", table, want, hint=_offset_hint(table))
        c.true("the 4096 elements fill the 8192-byte buffer, 2 bytes each, no overlap",
               np.unique(table).size == 4096 and table.max() == 8190)


# ------------------------------------------------------------------------------------------- 3 · the image
def _image_hint(frags: np.ndarray, got: np.ndarray) -> str:
    variants = [
        (epilogue.stage_subtile(frags, swizzle=False),
         "the bytes are in plain row-major order: place each value at smem_offset(row, col), the swizzled offset"),
        (epilogue.stage_subtile(frags, rounding="truncate"),
         "the values were truncated (low 16 bits dropped): round with your to_bf16"),
        (epilogue.stage_subtile(frags, swizzle=False, rounding="truncate"),
         "plain row-major and truncated: use smem_offset and to_bf16"),
    ]
    for img, why in variants:
        if np.array_equal(got, img):
            return why
    want = epilogue.stage_subtile(frags)
    swapped = want.reshape(-1, 2)[:, ::-1].reshape(-1)
    if np.array_equal(got, swapped):
        return "each bf16 is stored high byte first: the GPU is little-endian, the low byte goes to the lower address"
    tile = epilogue.subtile_from_image(want)
    transposed = np.zeros(epilogue.SUB_BYTES, np.uint8)
    rr, cc = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    off = epilogue.subtile_offset(rr, cc)
    transposed[off] = (tile.T & 0xFF).astype(np.uint8)
    transposed[off + 1] = (tile.T >> 8).astype(np.uint8)
    if np.array_equal(got, transposed):
        return "the sub-tile is transposed: register (t, j) holds row element_of(t, j, 64)[0], column [1]"
    return ("for every thread t and register j: (row, col) = wgmma.element_of(t, j, 64), bits = to_bf16(value), "
            "low byte at smem_offset(row, col), high byte after it")


def check_stage_subtile(stage_subtile: Callable[[np.ndarray], np.ndarray]) -> None:
    """Grade ``stage_subtile(frags) -> 8192 bytes``: the shared image of one sub-tile, byte for byte, and what an
    emulated TMA store makes of it."""
    from ml_dtypes import bfloat16

    rng = grading.fresh_rng()
    with grading.check("Lab 5 · the shared image of a sub-tile", seed=rng.seed) as c:
        for case in range(3):
            frags = (rng.standard_normal((128, 32)) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
            if case == 1:  # halfway values: rounding and truncation part ways on every one
                bits = (rng.integers(0x3F00, 0x4100, (128, 32)).astype(np.uint32) << 16) | 0x8000
                frags = bits.view(np.float32)
            what = f"stage_subtile(frags) (case {case + 1} of 3)"
            got_raw = _call(c, what, stage_subtile, frags.copy())
            got = np.asarray(got_raw)
            if got.size != epilogue.SUB_BYTES or got.dtype != np.uint8:
                c.fail(what, "8192 bytes (np.uint8)", f"{got.size} values of dtype {got.dtype}",
                       hint="return the buffer as np.zeros(8192, np.uint8) filled byte by byte")
            got = got.reshape(-1)
            want = epilogue.stage_subtile(frags)
            if not np.array_equal(got, want):
                c.fail(what, detail=f"    {int((got != want).sum())} of 8192 bytes differ, the first at byte "
                       f"{int(np.flatnonzero(got != want)[0])}", hint=_image_hint(frags, got))
            c.ok(f"{what}: all 8192 bytes as the kernel writes them")
        m, n = (8 * int(x) for x in rng.integers(9, 24, 2))
        C = np.full((m, n), np.nan, bfloat16)
        epilogue.store_subtile(got, C, m - 64, n - 64)
        tile = epilogue.bf16_bits_to_f32(epilogue.to_bf16_bits(wgmma.fragments_to_tile(frags, 64)))
        c.array(f"an emulated TMA store of your last image into a {m}×{n} bf16 C: its 64×64 corner",
                C[m - 64:, n - 64:].astype(np.float32), tile)


# ------------------------------------------------------------------------------------------- 4 · the order
_RULE_HINTS = {
    "unfenced-store": "after the writes, every thread executes fence.proxy.async (('fence',)) before the barrier",
    "fence-after-barrier": "order: ('write', buf), ('fence',), ('bar',), ('store', buf)",
    "unsynced-store": "the warpgroup meets at the barrier (('bar',)) after the fence, before thread 0 stores",
    "overwrite-in-flight": ("before writing a buffer again: ('wait_read', buffers - 1) by thread 0, then ('bar',) so "
                            "every thread knows; and ('commit',) after each store, or no wait covers it"),
    "store-unwritten": "store the buffer this sub-tile was written to: sub-tile s uses buffer s % buffers",
    "exit-in-flight": "commit every store: ('commit',) after ('store', buf)",
    "bad-op": "each operation is a tuple: ('write', buf), ('fence',), ('bar',), ('store', buf), ('commit',), "
              "('wait_read', n)",
}

_CONFIGS = ((4, 2), (8, 2), (6, 3), (5, 1))


def check_epilogue_ops(epilogue_ops: Callable[[int, int], list]) -> None:
    """Grade ``epilogue_ops(sub, buffers)``: run on the epilogue model for 4 and 8 sub-tiles with 2 buffers, 6 with
    3 and 5 with 1 (a TMA engine that reads as late as allowed): no rule broken, every store as early as allowed,
    C right."""
    rng = grading.fresh_rng()
    with grading.check("Lab 5 · writes, fences, barriers, stores and waits", seed=rng.seed) as c:
        for subtiles, buffers in _CONFIGS:
            data = [rng.integers(0, 256, epilogue.SUB_BYTES).astype(np.uint8) for _ in range(subtiles)]
            what = f"{subtiles} sub-tiles through {buffers} buffer(s)"
            ops = []
            for sub in range(subtiles):
                got = _call(c, f"epilogue_ops({sub}, {buffers})", epilogue_ops, sub, buffers)
                if not isinstance(got, list | tuple):
                    c.fail(f"epilogue_ops({sub}, {buffers})", "a list of operations", got,
                           hint=_RULE_HINTS["bad-op"])
                ops.append(list(got))
            try:
                result = epilogue.run(ops, subtiles, buffers, data=data)
            except epilogue.EpilogueError as exc:
                c.fail(f"{what}: {exc.rule}", detail=f"    {str(exc).split('] ', 1)[-1]}", hint=_RULE_HINTS[exc.rule])
            stored = sorted(s.sub for s in result.stores)
            c.true(f"{what}: every sub-tile stored exactly once", stored == list(range(subtiles)),
                   hint=f"one ('store', buf) per sub-tile; stores were issued for sub-tiles {stored}")
            ideal = [min(i + 1, buffers) for i in range(subtiles)]
            if result.in_flight_after_store != ideal:
                c.fail(f"{what}: stores in flight after each store", ideal, result.in_flight_after_store,
                       hint=f"correct, but it waits for more than it must: with {buffers} buffer(s), "
                       f"{buffers - 1} earlier store(s) may still be reading when a buffer is reused "
                       f"(('wait_read', buffers - 1)), and the first {buffers} sub-tiles need no wait")
            expected = np.concatenate([epilogue.subtile_from_image(d) for d in data], axis=1)
            c.array(f"{what}: no rule broken, stores overlap as far as allowed, C as written", result.C, expected)


# ------------------------------------------------------------------------------------------- 5 · the kernel
def _gpu_shapes(rng: np.random.Generator, multiple: int = 8) -> list[tuple[int, int, int]]:
    """Non-square shapes with partial tiles (M, N, K multiples of 8, M ≠ N ≠ K): one with fewer 256×256 pairs than a
    persistent grid's 66 clusters (a partial wave), one with more (clusters take several tiles: the ring and the
    stores run on across tiles), then random ones."""
    shapes = [(3 * 256 + 8, 5 * 256 + 8, 7 * 64 + 8), (8 * 257, 8 * 321, 8 * 41)]
    while len(shapes) < 4:
        m, n, k = (multiple * int(x) for x in rng.integers(8, 160, size=3))
        if len({m, n, k}) == 3 and k >= 128:
            shapes.append((m, n, k))
    return shapes


def _emulator_shapes(rng: np.random.Generator, spec: GemmLaunch) -> list[tuple[int, int, int]]:
    """Smaller non-square shapes for the PTX executor (a CPU runs every thread), still with partial tiles and several
    K steps (the last one partial): Lab 5's grid has several blocks; the persistent grids of Labs 6 and 7 (two blocks,
    or two clusters, there) have at least two tiles per block, so each block takes several tiles in turn; Lab 6's
    second shape has two raster groups."""
    if spec.persistent_unit and spec.cluster == 1:
        # a shape of 3 × 3 tiles, the last row and column partial: 5 and 4 tiles on two blocks (a partial last
        # wave), 4 K steps each (the ring of 4 stages wraps from tile to tile); then 10 × 1 tiles, 2 K steps: more
        # rows of tiles than a raster group holds (8), so the second group, clipped to 2 rows, is walked too
        while True:
            m, n, k = 8 * int(rng.integers(33, 48)), 8 * int(rng.integers(65, 96)), 8 * int(rng.integers(25, 33))
            if len({m, n, k}) == 3:
                break
        tall = 8 * int(rng.integers(145, 160)), 8 * int(rng.integers(17, 32)), 8 * int(rng.integers(9, 16))
        return [(m, n, k), tall]
    shapes, low = [(392, 520, 200)], (33 if spec.persistent_unit else 17)  # 2 × 2 pairs at least
    while len(shapes) < 2:
        m, n, k = (8 * int(x) for x in rng.integers(low, 66, size=3))
        if len({m, n, k}) == 3 and k >= 136:
            shapes.append((m, n, k))
    return shapes


def _grid_words(spec: GemmLaunch, m: int, n: int, hardware: bool) -> str:
    """How the launch covered an M×N C, in words: the grid of blocks, or the pairs and clusters of a persistent grid."""
    from ._common import EMULATED_CLUSTERS

    if not spec.persistent_unit:
        rows, cols = -(-m // spec.cta_tile[0]), -(-n // spec.cta_tile[1])
        return f"{rows * cols} blocks of {spec.cta_tile[0]}×{spec.cta_tile[1]}"
    pairs = -(-m // spec.persistent_unit[0]) * -(-n // spec.persistent_unit[1])
    unit, who = ("pairs", f"clusters of {spec.cluster} CTAs") if spec.cluster > 1 else ("tiles", "blocks")
    if hardware:
        return f"{pairs} {unit}, a persistent grid of every co-resident " + (
            f"cluster of {spec.cluster}" if spec.cluster > 1 else "block")
    clusters = min(pairs, EMULATED_CLUSTERS)
    few, most = pairs // clusters, -(-pairs // clusters)
    each = f"{most}" if few == most else f"{few} or {most}"
    return f"{pairs} {unit} on {clusters} {who}, {each} {unit} each in turn"


def _rows_hold_next_half(got: np.ndarray, ref: np.ndarray, tol: np.ndarray) -> bool:
    """Whether rows r with r % 16 < 8 hold what rows r + 8 should (almost everywhere): the 8-row half dropped."""
    first = np.arange(ref.shape[0] - 8)
    first = first[first % 16 < 8]
    if not first.size:
        return False
    return float(np.mean(np.abs(got[first] - ref[first + 8]) <= tol[first + 8])) > 0.9


def _result_hint(got: np.ndarray, ref: np.ndarray, tol: np.ndarray, spec: GemmLaunch) -> str:
    """What the wrong elements of a run's C point at, by 64×64 sub-tile: never written (NaN), all wrong, or some."""
    bad = np.isnan(got) | (np.abs(got - ref) > tol)
    if not bad.any():
        return ""
    m, n = ref.shape
    rows, cols = -(-m // 64), -(-n // 64)

    def per_subtile(x: np.ndarray, fill: bool) -> np.ndarray:
        padded = np.pad(x, ((0, rows * 64 - m), (0, cols * 64 - n)), constant_values=fill)
        return padded.reshape(rows, 64, cols, 64).transpose(0, 2, 1, 3).reshape(rows, cols, -1)

    row = np.arange(m) % 64  # the row inside its sub-tile
    bad_rows, nan_rows = bad.any(axis=1), np.isnan(got).any(axis=1)
    if not bad_rows[row % 8 == 0].any() and bad_rows[row % 8 != 0].all():
        return ("in every sub-tile exactly the rows r with r % 8 == 0 are right: the 16-byte chunks were not swizzled "
                "(chunk (col / 8) XOR (r % 8), as your smem_offset): the TMA store reads the buffer 128B-swizzled")
    if nan_rows[row % 16 >= 8].all() and not nan_rows[row % 16 < 8].any():
        return ("rows 8–15 of every 16 were never written (NaN): a register's row also depends on its 8-row half, "
                "8 · ((j / 2) % 2), as in the fragment map")
    if _rows_hold_next_half(got, ref, tol) and bad_rows[row % 16 >= 8].all():
        return ("rows 0–7 of every 16 hold the values of rows 8–15, and rows 8–15 were never written by this tile "
                "(stale shared memory went out): a register's row also depends on its 8-row half, 8 · ((j / 2) % 2), "
                "as in the fragment map")
    never = per_subtile(np.isnan(got), True).all(axis=2)
    wrong = per_subtile(bad, False).any(axis=2)
    r, col = (int(v) for v in np.argwhere(never if never.any() else wrong)[0])
    where = f"the first at rows {64 * r}…, columns {64 * col}…"
    if never.any():
        who = ("" if not spec.persistent_unit else "a pair no cluster took, or " if spec.cluster > 1
               else "a tile no block took, or ")
        return (f"{int(never.sum())} of {rows * cols} 64×64 sub-tiles of C were never written (still NaN), {where}: "
                f"{who}a store that went to another place (column n0 + 64·sub, row m0 + 64·c of this CTA's tile)")
    if wrong.all():
        return ("every 64×64 sub-tile of C is wrong: the mainloop's loads (which rows of A and B each CTA's stage "
                "holds) or how the registers are written out (the row, the swizzled chunk, the lane's column pair)")
    return (f"{int(wrong.sum())} of {rows * cols} 64×64 sub-tiles of C are wrong, {where}: a sub-tile's swizzle "
            "or its place, or a stage that held the wrong rows")


def _owners(spec: GemmLaunch, m: int, n: int, blocks: int) -> tuple[Any, Any, Any]:
    """The schedule of a launch, for the work check: (the unit holding an element, in words; the block that stores a
    64×64 tile of C; the block that computes a product) as functions of rows and columns."""
    from helpers.hopper import scheduler

    if not spec.persistent_unit:
        bm, bn = spec.cta_tile

        def tile_of(row: int, col: int) -> str:
            return f"block tile ({col // bn},{row // bm})"

        def grid_owner(row: int, col: int, *_: int) -> tuple[int, int]:
            return (col // bn, row // bm)

        return tile_of, grid_owner, grid_owner
    pm, pn = -(-m // spec.persistent_unit[0]), -(-n // spec.persistent_unit[1])
    order = {(int(a), int(b)): p for p, (a, b) in enumerate(scheduler.grouped(pm, pn, 8))}  # LAB6_GROUP, LAB7_GROUP
    clusters = blocks // spec.cluster
    half = spec.persistent_unit[0] // spec.cluster

    def pair_of(row: int, col: int) -> int:
        return order[(row // spec.persistent_unit[0], col // spec.persistent_unit[1])]

    def pair_words(row: int, col: int) -> str:
        p = pair_of(row, col)
        if spec.cluster == 1:
            return f"tile {p}, which the schedule gives block {p % clusters}"
        return f"pair {p}, which the schedule gives cluster {p % clusters}"

    def pair_owner(row: int, col: int, *_: int) -> tuple[int, int]:
        return (spec.cluster * (pair_of(row, col) % clusters) + (row % spec.persistent_unit[0]) // half, 0)

    return pair_words, pair_owner, pair_owner


def _turn_of(spec: GemmLaunch, m: int, n: int, blocks: int) -> Any:
    """For a persistent grid: the turn at which the schedule has a tile's owner take it (tile p of the grouped raster
    order, GROUP = 8 rows of tiles, is its owner's turn p // (blocks or clusters)); None for a grid of tiles."""
    from helpers.hopper import scheduler

    if not spec.persistent_unit:
        return None
    pm, pn = -(-m // spec.persistent_unit[0]), -(-n // spec.persistent_unit[1])
    order = {(int(a), int(b)): p for p, (a, b) in enumerate(scheduler.grouped(pm, pn, 8))}
    clusters = blocks // spec.cluster

    def turn(row: int, col: int) -> int:
        return order[(row // spec.persistent_unit[0], col // spec.persistent_unit[1])] // clusters

    return turn


_ORDER_HINT = ("the grouped raster order: tile t's group is t / (GROUP · tiles_n), its rows of tiles start at group · "
               "GROUP (the last group clipped to the rows that are left), and within the group the tiles run down a "
               "column of the group first (row = first + t % rows), then on to the next column; each block takes its "
               "tiles t = b, b + gridDim.x, … in that order")


#: how the work is handed out, for a failed work check: a grid of tiles, a persistent grid of blocks, of clusters
_WORK_HINT = {False: "block (x, y) computes and stores the 128×256 tile at rows 128·y, columns 256·x: each tile once",
              "blocks": "block b takes tiles b, b + gridDim.x, b + 2·gridDim.x, … of the raster order (step by the "
                        "grid size, while t < tiles: the last wave may be partial), and computes and stores each once",
              True: "cluster c takes pairs c, c + clusters, c + 2·clusters, … (step by the number of clusters, "
                    "gridDim.x / CLUSTER), and CTA rank r of the pair's cluster computes and stores its rows 128·r …"}


def _work_hint(spec: GemmLaunch) -> str:
    if spec.persistent_unit and spec.cluster == 1:
        return _WORK_HINT["blocks"]
    return _WORK_HINT[bool(spec.persistent_unit)]


#: what to look at when a stage is released more (or fewer) times than it was filled, by kernel: one tile per block, a
#: persistent grid of blocks, of clusters
_RELEASE_HINT = {False: "EMPTY counts one arrival per consumer warpgroup (CONSUMERS): who arrives, and how often? "
                        "A consumer releases the stage of the K step before once that step's wgmmas have retired, "
                        "and its last step's after the loop: count one consumer's releases over the K steps",
                 "blocks": "the ring's counter (it) runs on across a block's tiles: count the releases of one "
                           "tile, its first K step and the stage after its K loop included (every fill this tile "
                           "read, once; none of the tile before's)",
                 True: "a stage's EMPTY barrier takes one arrival per consumer and CTA of the cluster, and the ring's "
                       "counter (it) runs on across a cluster's pairs: count the releases of one pair, its first K "
                       "step and the stage after its K loop included (every fill this pair read, once; none of the "
                       "pair before's)"}


def _release_hint(spec: GemmLaunch) -> str:
    if spec.persistent_unit and spec.cluster == 1:
        return _RELEASE_HINT["blocks"]
    return _RELEASE_HINT[bool(spec.persistent_unit)]


def protocol_of(spec: GemmLaunch) -> Protocol:
    """The ring of Labs 5-7: both consumer warpgroups read every fill and release it once each, on every block of the
    cluster its copies land in."""
    return Protocol(ring=Ring(readers=2), cluster=spec.cluster)


def _emulated_check(c: grading.Check, source: str, spec: GemmLaunch, rng: np.random.Generator, *, what: str,
                    shapes: list[tuple[int, int, int]]) -> None:
    """The run on the course's PTX executor in hazard mode: C against fp64, then the ring's releases (every stage
    released once per fill; a ring that serves one tile per block: never more) and the work (every tile of C stored
    once, by the block the schedule gives it; no product computed twice)."""
    from ._common import run_gemm, where
    from ._record import check_protocol
    from ._work import check_releases, check_work
    from .lab3 import make_operands

    cases = [make_operands(rng, m, n, k) for m, n, k in shapes]
    got_all = run_gemm(source, spec, cases, what=what, work=True,
                       hint="a fault or a deadlock names the barrier and parity; check the stage offsets and counts")
    for (m, n, k), (a, b), got, run in zip(shapes, cases, got_all["c"], got_all["work"], strict=True):
        ref = a.astype(np.float64) @ b.astype(np.float64).T
        acc_tol = grading.gemm_tolerance(a, b.astype(np.float64).T)
        tol = acc_tol + (np.abs(ref) + acc_tol) * 2.0**-8  # fp32 accumulation, then bf16 rounding (half an ulp)
        label = f"{where()}: M={m}, N={n}, K={k} ({_grid_words(spec, m, n, False)})"
        c.array(f"{label}, C poisoned first: every element against fp64, within fp32 accumulation + bf16 rounding",
                got.astype(np.float64), ref, atol=tol, hint=_result_hint(got.astype(np.float64), ref, tol, spec))
        if run.log is None:
            continue
        check_releases(c, run, label=f"{where()}: M={m}, N={n}, K={k}", cluster=spec.cluster,
                       reused=bool(spec.persistent_unit), hint=_release_hint(spec))
        blocks = len({s.block for s in run.log.stores} | {x.block for x in run.log.mmas})
        if spec.persistent_unit:
            pairs = -(-m // spec.persistent_unit[0]) * -(-n // spec.persistent_unit[1])
            from ._common import EMULATED_CLUSTERS

            blocks = min(pairs, EMULATED_CLUSTERS) * spec.cluster
        piece, store_owner, mma_owner = _owners(spec, m, n, blocks)
        check_work(c, run, m=m, n=n, label=f"M={m}, N={n}, K={k}", tile=spec.box_c or (64, 64), piece_of=piece,
                   store_owner=store_owner, mma_owner=mma_owner, cluster=spec.cluster,
                   hint=_work_hint(spec), store_turn=_turn_of(spec, m, n, blocks), order_hint=_ORDER_HINT)
        check_protocol(c, run, protocol_of(spec), label=f"{where()}: M={m}, N={n}, K={k}",
                       ring_hint=_release_hint(spec))


#: the course's kernels, timed beside the student's in the same run (the speed floor)
REFERENCE = {"lab5_gemm": "lab5_epilogue.cu", "lab6_gemm": "lab6_persistent.cu", "lab7_gemm": "lab7_clusters.cu"}


def _gpu_check(c: grading.Check, source: str, spec: GemmLaunch, rng: np.random.Generator, *, what: str,
               benchmark: bool, sizes: tuple[Any, ...]) -> None:
    """Run on random non-square shapes (C poisoned) against fp64 and check the work, both labs. Without an H100: on
    the course's PTX executor in hazard mode (small shapes). On the H100: the large shapes there, then the first small
    shape on the executor in hazard mode too (races and the work: the same verdict as without a GPU), then timing
    beside cuBLAS and the course's kernel (the speed floor)."""
    from pathlib import Path

    from ._common import check_speed_floor, emulated, run_gemm, time_gemm, where
    from .lab3 import make_operands

    hardware = on_h100()
    small = _emulator_shapes(rng, spec)
    if not hardware:
        _emulated_check(c, source, spec, rng, what=what, shapes=small)
    else:
        shapes = _gpu_shapes(rng)
        cases = [make_operands(rng, m, n, k) for m, n, k in shapes]
        outs = run_gemm(source, spec, cases, what=what,
                        hint="a fault or a deadlock names the barrier and parity; check the stage offsets and counts")
        for (m, n, k), (a, b), got in zip(shapes, cases, outs, strict=True):
            ref = a.astype(np.float64) @ b.astype(np.float64).T
            acc_tol = grading.gemm_tolerance(a, b.astype(np.float64).T)
            tol = acc_tol + (np.abs(ref) + acc_tol) * 2.0**-8
            c.array(f"{where()}: M={m}, N={n}, K={k} ({_grid_words(spec, m, n, True)}), C poisoned first: every "
                    "element against fp64, within fp32 accumulation + bf16 rounding", got.astype(np.float64), ref,
                    atol=tol, hint=_result_hint(got.astype(np.float64), ref, tol, spec))
        with emulated():
            _emulated_check(c, source, spec, rng, what=what, shapes=small[:1])
    if not benchmark:
        return
    if not hardware:
        print("timing skipped: speed beside cuBLAS needs the H100 (the emulator checked the results above)")
        return
    reference = (Path(__file__).resolve().parents[3] / "bench" / "kernels" / REFERENCE[spec.name]).read_text()
    for size, (bench, clock, ref) in zip(sizes, time_gemm(source, spec, list(sizes), what=f"timing {what}",
                                                          reference=reference), strict=True):
        c.ok(f"timed: {bench.summary()} ({clock})")
        timed(spec.name)[size] = (bench, ref)
        check_speed_floor(c, bench, ref, shape_words(size),
                          hint="compare your mainloop and epilogue with the text (a tile computed more than once, a "
                               "stage waited for too early, a store waited for in full)")


def check_epilogue_kernel(source: str, *, benchmark: bool = True, sizes: tuple[int, ...] = (4096, 8192),
                          wrappers: str | None = None, here: Any = None, carried: bool = True) -> None:
    """Grade the Lab 5 kernel: your Lab 4 kernel (the course's where yours does not pass Lab 4's check) with this
    lab's change and your regions from ``source`` (the LAB5_SRC cell), after your wrappers (``wrappers``; by default
    carried from your Lab 1 and 2 notebooks beside this one). ``carried=False``: ``source`` is a whole kernel, graded
    as it is (the course's bench/kernels/lab5_epilogue.cu).

    Compile it (report: registers, spills, setmaxnreg, wgmma); read its epilogue from the PTX (rounding, store form,
    the order of writes/fences/barriers/stores/waits on the epilogue model). Wherever kernels run (the H100, or the
    course's PTX executor with small shapes): random non-square shapes with C poisoned against fp64; on the H100 then
    timing at each size³ beside cuBLAS (bf16 C)."""
    from ._common import can_run

    made = None
    if carried:
        made, source = _carried(source, wrappers, here, quiet=True)
    rng = grading.fresh_rng()
    with grading.check("Lab 5 · the TMA-store epilogue kernel", seed=rng.seed) as c:
        if made is not None:
            c.ok(f"graded: {made.whose('Lab 5', 'mainloop')}")
            for line in made.merge.report():
                print(f"   ⚠ {line}")
        kernel = compile_student(source, KERNEL_NAME, what="your kernel")
        _report_checks(c, kernel.report)
        _check_epilogue_ptx(c, kernel.ptx, KERNEL_NAME, tiles=1, final_required=True)
        if not can_run(kernel, checked="rounding, store form and the epilogue's order (from the PTX, on the "
                                       "epilogue model); the layout and image were graded on the emulator above"):
            return
        _gpu_check(c, source, LAUNCH, rng, what="your kernel", benchmark=benchmark, sizes=sizes)


# ------------------------------------------------------------------------------------------- the ladder
#: your Lab 5 kernel's timings of this session
MEASURED = timed(KERNEL_NAME)


def ladder_rows(size: int = 4096) -> list[dict[str, Any]]:
    """The ladder at size³: the course's Lab 4 and Lab 5 kernels as measured on an H100, then your own Lab 5 kernel
    as the check timed it in this session, beside the course's Lab 5 kernel timed in the same run."""
    steps = {"lab4b": "Lab 4 · the course's kernel", "lab5": "Lab 5 · the course's kernel"}
    return lab_ladder_rows(size, "Lab 5", steps, KERNEL_NAME)


def show_ladder(size: int = 4096) -> None:
    """The ladder at size³ as a table (Markdown in a notebook, text elsewhere): TFLOP/s beside cuBLAS in the same
    run, and the ratio."""
    show_rows(ladder_rows(size), size)


# ------------------------------------------------------------------------------------------- 6 · the fused epilogue
#: the name of the fused kernel (bench/kernels/lab5_fused.cu) that the student's element function is graded in
FUSED_KERNEL = "lab5_fused"
_ELEMENT_START = "__device__ __forceinline__ float activate(float x) {"
_ELEMENT_END = "// The bias of columns n and n + 1"
_COURSE_ELEMENT = """    float x0 = __fmul_rn(alpha, d[j]), x1 = __fmul_rn(alpha, d[j + 1]);
    if (with_c) {
      const float2 cv = __bfloat1622float2(*p);
      x0 = __fadd_rn(x0, __fmul_rn(beta, cv.x));
      x1 = __fadd_rn(x1, __fmul_rn(beta, cv.y));
    }
#if FUSED_BIAS != 0
    const float2 bv = bias_pair(bias, col0 + 8 * (j / 4) + 2 * (l % 4), N);
    x0 = __fadd_rn(x0, bv.x);
    x1 = __fadd_rn(x1, bv.y);
#endif
    *p = __floats2bfloat162_rn(activate(x0), activate(x1));
"""
_STUDENT_ELEMENT = """    const unsigned no_c = 0x7FC07FC0u;  // without C (β = 0) its values do not matter: NaN
    __nv_bfloat162 cv = *reinterpret_cast<const __nv_bfloat162*>(&no_c);
    if (with_c) cv = *p;  // C's two values, in the 4 bytes D's two values then go to
#if FUSED_BIAS != 0
    const float2 bv = bias_pair(bias, col0 + 8 * (j / 4) + 2 * (l % 4), N);
#else
    const float2 bv = make_float2(0.0f, 0.0f);
#endif
    *p = fused_pair(d[j], d[j + 1], cv, bv, alpha, beta, with_c);
"""
#: after the student's functions: one copy of them, called for every pair (a kernel this size loads fast on the
#: executor)
_PAIR = """
// Two adjacent elements of D through your fused_element (one copy of it, called for every register pair).
__device__ __noinline__ __nv_bfloat162 fused_pair(float a0, float a1, __nv_bfloat162 cv, float2 bv, float alpha,
                                                  float beta, bool with_c) {
  const bool with_bias = FUSED_BIAS != 0;
  return __halves2bfloat162(fused_element(a0, cv.x, bv.x, alpha, beta, with_c, with_bias),
                            fused_element(a1, cv.y, bv.y, alpha, beta, with_c, with_bias));
}
"""


def fused_source_with(element: str, act: str = "gelu", bias: str | None = "f32") -> str:
    """bench/kernels/lab5_fused.cu with its per-element epilogue replaced by ``element`` (the LAB5_FUSED cell: the
    device functions ``activate(x)`` and ``fused_element(acc, c, bias, alpha, beta, with_c, with_bias)``): the
    kernel's own ``activate`` gives way to yours, and ``fused_subtile`` calls your ``fused_element`` for each of a
    thread's accumulators. ``act`` and ``bias`` choose FUSED_ACT and FUSED_BIAS as :func:`gpu.gemm.fused_source`."""
    from helpers.gpu import gemm

    base = gemm.fused_source(act, bias)
    start, end = base.index(_ELEMENT_START), base.index(_ELEMENT_END)
    base = base[:start] + element.strip("\n") + "\n" + _PAIR + "\n" + base[end:]
    if _COURSE_ELEMENT not in base:  # pragma: no cover - the course kernel and this splice are kept together
        raise RuntimeError("bench/kernels/lab5_fused.cu no longer holds the per-element code the splice replaces")
    return base.replace(_COURSE_ELEMENT, _STUDENT_ELEMENT)


def _h100_accumulators(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A·Bᵀ in fp32 as the H100 (and the executor) accumulates it: k16 slices in order through the tensor core's
    numerics (wgmma.dot_h100), from zero."""
    af, bf = a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
    acc = np.zeros((a.shape[0], b.shape[0]), np.float32)
    for k0 in range(0, a.shape[1], 16):
        acc = wgmma.dot_h100(af[:, None, k0:k0 + 16], bf[None, :, k0:k0 + 16], acc.astype(np.float64))
    return acc


@dataclass
class FusedCase:
    """One launch of the fused check: its activation and bias type, α, β, the operands and the bias."""

    what: str
    act: str
    bias_kind: str | None
    alpha: float
    beta: float
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    bias: np.ndarray
    acc: np.ndarray  # A·Bᵀ as the H100 accumulates it

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.a.shape[0], self.b.shape[0], self.a.shape[1]


def fused_cases(rng: np.random.Generator) -> list[FusedCase]:
    """The launches of the fused check, one block each (M ≤ 128, N ≤ 256, small K): accumulators from tiny (GELU's
    tanh(x) = x branch) to large (past its clamp), negative ones and whole zero rows; α = 0 once, β = 0 once (C is
    NaN there, and fused_element gets NaN for it), α < 0 where zeros become −0 (with no activation, so the sign
    survives); no bias, fp32 and bf16 bias; GELU, ReLU and none."""
    from ml_dtypes import bfloat16

    def operands(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        scales = np.exp2(rng.choice([-14, -9, -6, -4, -2, 0, 1, 3, 5], size=(m, 1)).astype(np.float64))
        a = rng.standard_normal((m, k)) * scales
        a[rng.choice(m, size=max(1, m // 16), replace=False)] = 0.0  # rows whose accumulators are exactly 0
        return a.astype(bfloat16), rng.standard_normal((n, k)).astype(bfloat16)

    def shape() -> tuple[int, int, int]:
        return 8 * int(rng.integers(9, 17)), 8 * int(rng.integers(17, 33)), int(rng.choice([32, 64]))

    out = []
    plans = [("GELU, fp32 bias, α and β", "gelu", "f32", float(rng.uniform(0.5, 2.0)), float(rng.uniform(-2, -0.25))),
             ("no activation, no bias, α < 0, β = 0 (C is never read)", "none", None, float(-rng.uniform(0.5, 2.0)),
              0.0),
             ("GELU, bf16 bias, α = 0", "gelu", "bf16", 0.0, float(rng.uniform(0.25, 2.0))),
             ("ReLU, no bias, α < 0, β and C", "relu", None, float(-rng.uniform(0.5, 2.0)),
              float(rng.choice([-1, 1]) * rng.uniform(0.25, 2.0)))]
    for what, act, kind, alpha, beta in plans:
        m, n, k = shape()
        a, b = operands(m, n, k)
        alpha, beta = np.float32(alpha).item(), np.float32(beta).item()
        acc = _h100_accumulators(a, b)
        c = (rng.standard_normal((m, n)) * 4).astype(bfloat16)
        if beta == 0.0:
            c[:] = np.nan
        elif alpha != 0.0:  # a quarter of the rows: β·C cancels α·acc to bf16 precision, where a fused
            rows = rng.choice(m, size=m // 4, replace=False)  # multiply-add and two roundings part ways
            with np.errstate(all="ignore"):
                c[rows] = (-(np.float32(alpha) * acc[rows]) / np.float32(beta)).astype(bfloat16)
        bias = (rng.standard_normal(n) * 2).astype(np.float32)
        if kind == "bf16":
            bias = bias.astype(bfloat16)
        out.append(FusedCase(what, act, kind, alpha, beta, a, b, c, bias, acc))
    return out


def _fused_wrong(case: FusedCase, acc: np.ndarray, kind: str) -> np.ndarray:
    """What a named mistake makes of one launch (bf16 bits), for the hint."""
    from helpers.hopper import fused

    f32 = np.float32
    alpha, beta = f32(case.alpha), f32(case.beta)
    cf = case.c.astype(np.float32)
    bias = case.bias.astype(np.float32)[None, :] if case.bias_kind else None
    with np.errstate(all="ignore"):
        x = alpha * acc
        if kind == "fma":  # x + β·C in one rounding
            y = (x.astype(np.float64) + np.float64(beta) * cf.astype(np.float64)).astype(np.float32) if beta else x
            return epilogue.to_bf16_bits(fused.activate(_add_bias(y, bias), case.act))
        if kind == "c after rounding":
            y = fused.to_bf16(fused.activate(_add_bias(x, bias), case.act))
            return epilogue.to_bf16_bits(y + beta * cf if beta else y)
        if kind == "bias after":
            y = fused.activate(x + beta * cf if beta else x, case.act)
            return epilogue.to_bf16_bits(_add_bias(y, bias))
        if kind == "alpha on c":
            y = alpha * (acc + beta * cf) if beta else x
            return epilogue.to_bf16_bits(fused.activate(_add_bias(y, bias), case.act))
        if kind == "c always":
            y = x + beta * (cf if beta else np.float32(np.nan))
            return epilogue.to_bf16_bits(fused.activate(_add_bias(y, bias), case.act))
        if kind == "bias always":
            y = x + beta * cf if beta else x
            return epilogue.to_bf16_bits(fused.activate(y + (bias if bias is not None else f32(0)), case.act))
    raise ValueError(kind)


def _add_bias(x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    return x if bias is None else (x + bias).astype(np.float32)


_FUSED_HINTS = {
    "fma": ("β·C was added with one rounding (a fused multiply-add): the kernel rounds the product β·C, then the sum. "
            "Write __fmul_rn and __fadd_rn, which the compiler never fuses; a plain `a * b + c` becomes an fma"),
    "c after rounding": ("β·C came in after a rounding to bf16: every step is in fp32 and D is rounded once, at the "
                         "end (α·acc, + β·C, + bias, the activation, then bf16)"),
    "bias after": "the bias was added after the activation: it goes in before, act(α·acc + β·C + bias)",
    "alpha on c": "α scaled C too: D = act(α·acc + β·C + bias), α multiplies the accumulator only",
    "c always": ("with β = 0 the kernel never loads C (its buffer holds no C, and C may even be NaN): add β·C only "
                 "when with_c"),
    "bias always": ("with no bias the kernel adds nothing: adding 0 is not a no-op (−0 + 0 = +0, and α·0 is −0 for "
                    "α < 0): add the bias only when with_bias"),
}


def _fused_hint(results: list[tuple[FusedCase, np.ndarray, np.ndarray, np.ndarray]]) -> str:
    """Name the mistake from every launch's bits: a named wrong order, else the activation where only the GELU
    launches are wrong, else the general rule."""
    bad = [(case, acc, got, want) for case, acc, got, want in results if not np.array_equal(got, want)]
    for kind, words in _FUSED_HINTS.items():
        if all(np.array_equal(got, _fused_wrong(case, acc, kind)) for case, acc, got, _ in bad):
            return words
    if all(case.act == "gelu" for case, *_ in bad):
        return ("the launches without GELU are right, so the activation is off: GELU's tanh form, "
                "0.5·x·(1 + tanh(k0·(x + k1·x³))) with k0 = √(2/π) = 0x1.988454p-1f, k1 = 0.044715 = 0x1.6e4e26p-5f, "
                "the kernel's tanh_rational (not tanhf or tanh.approx: their bits are not the model's), and each "
                "multiply and add written with __fmul_rn / __fadd_rn in the order the text gives")
    if all(case.act == "relu" for case, *_ in bad):
        return "the launch with ReLU is off: ReLU is fmaxf(x, 0.0f)"
    return ("one fp32 rounding a step (__fmul_rn, __fadd_rn: never a fused multiply-add), in this order: x = α·acc; "
            "with_c: x = x + β·C (the product rounded, then the sum); with_bias: x = x + bias; x = activate(x); then "
            "__float2bfloat16_rn(x)")


def check_fused_element(element: str) -> None:
    """Grade the LAB5_FUSED cell (``activate`` and ``fused_element``) inside the course's fused kernel
    (bench/kernels/lab5_fused.cu, its per-element code replaced by yours; :func:`fused_source_with`): four launches
    on the course's PTX executor in hazard mode (on any machine; one block each, random small shapes, GELU, ReLU
    and none, fp32, bf16 and no bias, α = 0, β = 0, α < 0), every bit of D against the model
    (helpers.hopper.fused.fused_epilogue) from the accumulators the H100 computes."""
    from helpers import gpu
    from helpers.gpu import TensorMapArg, gemm
    from helpers.hopper import fused

    from ._common import emulated

    rng = grading.fresh_rng()
    with grading.check("Lab 5 · the fused epilogue, per element", seed=rng.seed) as c:
        results = []
        kernels: dict[tuple[str, str | None], Any] = {}
        for case in fused_cases(rng):
            key = (case.act, case.bias_kind)
            if key not in kernels:
                kernels[key] = compile_student(fused_source_with(element, *key), FUSED_KERNEL,
                                               what="your fused epilogue")
            m, n, k = case.shape
            d = np.full((m, n), np.nan, case.c.dtype)
            label = f"{case.what} (M={m}, N={n}, K={k}, α={case.alpha:.4g}, β={case.beta:.4g})"
            try:
                with emulated():
                    res = gpu.run_on_executor(kernels[key], (1, 1), 384, gemm.SMEM_BYTES,
                                              TensorMapArg(case.a, (128, 64)), TensorMapArg(case.b, (256, 64)),
                                              TensorMapArg(case.c, (64, 64)), TensorMapArg(d, (64, 64)),
                                              np.int32(m), np.int32(n), np.int32(k), np.float32(case.alpha),
                                              np.float32(case.beta), case.bias, check=False)
            except (gpu.KernelFault, gpu.KernelDeadlock, gpu.LaunchError) as exc:
                if "approx" in str(exc):
                    c.fail(f"{label}: your code compiles to an approximate instruction: {exc}",
                           hint="tanhf, __expf and tanh.approx give the hardware's own approximate bits, which no "
                                "model reproduces: GELU uses the kernel's tanh_rational (multiplies, adds, one "
                                "division), as the course's kernel does")
                c.fail(f"{label}: the kernel did not finish on the emulator: {exc}",
                       hint="fused_element only computes: it reads no memory and waits for nothing")
            if res.error is not None:
                c.fail(f"{label}: {res.error}", hint="fused_element only computes from its arguments")
            acc = case.acc
            want = fused.fused_epilogue(acc, alpha=case.alpha, beta=case.beta, c=case.c,
                                        bias=case.bias if case.bias_kind else None, act=case.act)
            got = np.asarray(res.arrays[3]).view(np.uint16)
            results.append((case, acc, got, want))
        for case, acc, got, want in results:
            if not np.array_equal(got, want):
                r, col = (int(v) for v in np.argwhere(got != want)[0])
                cv = float(case.c[r, col]) if case.beta else "not read"
                bv = float(case.bias[col]) if case.bias_kind else "none"
                c.fail(f"{case.what}: {int((got != want).sum())} of {got.size} elements of D differ; the first at "
                       f"({r}, {col}): acc = {float(acc[r, col])!r}, C = {cv}, bias = {bv}",
                       f"{int(want[r, col]):#06x}", f"{int(got[r, col]):#06x}", hint=_fused_hint(results))
            c.ok(f"ran on the emulator (hazard mode): {case.what}: every bit of D as the model gives it")
