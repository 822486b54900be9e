"""Graders of Lab 6 (persistent blocks and a tile scheduler): the grouped raster order of tiles, the persistent
loop, a wave's L2 footprint, and the CUDA kernel (compiled and read everywhere; run on random non-square shapes
wherever kernels run: on the H100 on every co-resident block, on the course's PTX executor on two blocks that each
take several tiles; timed beside cuBLAS on the H100 only). ``hint`` / ``answer`` give the tiered hints.

Units: a *tile* is the 128×256 block of C one block computes at a time; tiles are numbered in the raster order,
and block ``b`` of ``blocks`` takes tiles ``b, b + blocks, …``.

The kernel graded is the student's own: their Lab 5 kernel (read from lab5_epilogue.ipynb beside this notebook, put
together with their Lab 4 kernel as Lab 5 graded it, and checked quickly with Lab 5's check; the course's Lab 5
kernel stands in where theirs is missing or does not pass) merged with this lab's change and their Lab 6 regions
(:mod:`helpers.course.carry`), after their wrappers of Labs 1 and 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from helpers.course import carry, grading
from helpers.course.hints import answer, hint
from helpers.hopper import parts as _parts
from helpers.hopper import scheduler

from . import lab5
from ._common import GemmLaunch, Opening, compile_student, find_instrs, resolve, stream
from ._kernel import check_epilogue_ptx, report_checks
from .lab5 import HEADER, SMEM_BYTES, _gpu_check

#: the H100 SXM's SMs, the worker count of the cases named after it
_SMS = _parts.PROFILES["h100-sxm"].sms

__all__ = [
    "KERNEL_NAME",
    "LAUNCH",
    "TILE",
    "check_tile_coords",
    "check_block_tiles",
    "check_wave_footprint",
    "check_persistent_kernel",
    "opening",
    "previous",
    "MEASURED",
    "ladder_rows",
    "show_ladder",
    "hint",
    "answer",
]

KERNEL_NAME = "lab6_gemm"
TILE = (128, 256)  # a block's tile of C: rows, columns
#: how the lab's kernel is launched (the same as bench/ladder.py's make_lab6): every co-resident block, one per SM
LAUNCH = GemmLaunch(KERNEL_NAME, 384, SMEM_BYTES, (128, 64), (256, 64), (64, 64), out_bf16=True,
                    persistent_unit=TILE)


def _course_lab5() -> str:
    """The course's Lab 5 kernel cell (its solution), as the course's data holds it."""
    from ._common import course_kernel

    return course_kernel("lab5")


def _lab5_check(wrappers: str) -> Callable[[str], None]:
    """Lab 5's check of its whole kernel, quick: the compile report, the epilogue read from the PTX, then a run on the
    course's PTX executor in hazard mode (on any machine; no timing)."""
    from ._common import emulated

    def check(kernel: str) -> None:
        with emulated():
            lab5.check_epilogue_kernel(HEADER + wrappers + kernel, benchmark=False, carried=False)

    return check


def previous(wrappers: str) -> carry.Previous:
    """What Lab 6 builds on: your Lab 5 kernel (``LAB5_SRC`` of lab5_epilogue.ipynb, put together with your Lab 4
    kernel as Lab 5 graded it), checked with Lab 5's check on ``wrappers``; the course's Lab 5 kernel stands in where
    yours does not pass."""

    def whole(text: str, here: Any) -> str:
        return lab5._carried(text, wrappers, here, quiet=True)[0].kernel

    return carry.Previous("Lab 5", "lab5_epilogue.ipynb", "LAB5_SRC", _course_lab5, _lab5_check(wrappers), wrappers,
                          whole=whole)


def _carried(source: str, wrappers: str | None, here: Any, quiet: bool) -> tuple[carry.Carried, str]:
    """(the merge, the whole source to compile): your Lab 5 kernel (or the course's), this lab's change and your
    regions, after your wrappers."""
    if wrappers is None:
        wrappers = lab5.carry_wrappers(checked=False)
    made = carry.carried(previous(wrappers), source, here=here, quiet=quiet)
    return made, HEADER + wrappers + made.kernel


def opening(source: str, *, wrappers: str | None = None, here: Any = None) -> Opening:
    """The kernel this lab grades, as a diff from your Lab 5 kernel (read from lab5_epilogue.ipynb beside this
    notebook, with your Lab 4 kernel under it, and checked with Lab 5's check; the course's stands in where yours is
    missing or does not pass): your Lab 5 code, this lab's change and your regions as the cell holds them. The first
    line says whose Lab 5 kernel it is; then any lines of yours this lab rewrote; then the course's Lab 5 kernel's
    measured speed. Lines that only moved in (the tile loop indents them) show as unchanged."""
    from helpers.course.widgets.roofline import ladder

    from ._common import source_diff

    if wrappers is None:
        wrappers = lab5.carry_wrappers(checked=True)
    made, _ = _carried(source, wrappers, here, quiet=True)
    lines = [made.previous.line] + [f"⚠ {line}" for line in made.merge.report()]
    mine = made.previous.yours
    for size in (4096, 8192):
        row = next((m for key, _, m in ladder(size) if key == "lab5"), None)
        lines.append(f"the course's Lab 5 kernel at {size}³: {row or 'not measured yet'}")
    old = "your Lab 5 kernel" if mine else "the course's Lab 5 kernel"
    diff = source_diff(made.previous.text, made.kernel, f"{old} (Lab 5)",
                       f"Lab 6: the kernel graded ({old} + this lab's change + your regions)", indent=False)
    return Opening(f"What Lab 6 changes in {old}", lines, diff)


def _call(c: grading.Check, what: str, fn: Callable[..., Any], *args: Any, hint: str = "") -> Any:
    try:
        return grading.call_student(fn, *args, what=what.split("(")[0])
    except (grading.CheckFailed, NotImplementedError):
        raise
    except Exception as exc:  # noqa: BLE001 - reported to the student
        c.fail(f"{what}: your function raised {type(exc).__name__}: {exc}", hint=hint)


# ------------------------------------------------------------------------------------------- 1 · raster order
_GRIDS = [(1, 1, 8), (5, 3, 8), (16, 4, 8), (17, 5, 8), (23, 7, 4), (6, 9, 1), (8, 1, 8), (3, 12, 2)]


def _order_variants(tm: int, tn: int, g: int) -> list[tuple[np.ndarray, str]]:
    t = np.arange(tm * tn)
    per = g * tn
    first = (t // per) * g
    in_group = t % per
    return [
        (np.stack([first + in_group // tn, in_group % tn], 1),
         "inside a group you walk along the row first (row-major order): walk down a column of the group first "
         "(tm changes fastest), then go column by column"),
        (scheduler.row_major(tm, tn), "this is row-major order (along N first): walk each group of rows column by "
                                      "column, down a column first"),
        (scheduler.column_major(tm, tn), "this is column-major order over the whole grid: cut the rows into groups "
                                         "of `group` first"),
        (np.stack([first + in_group % g, in_group // g], 1),
         "the last group can hold fewer than `group` rows: rows = min(tiles_m - first, group)"),
    ]


def check_tile_coords(tile_coords: Callable[[int, int, int, int], tuple[int, int]]) -> None:
    """Grade ``tile_coords(t, tiles_m, tiles_n, group) -> (tm, tn)`` on named grids (partial last group, a group
    taller than the grid, one column, group 1) and random ones: every tile exactly once, in the grouped order."""
    rng = grading.fresh_rng()
    with grading.check("Lab 6 · the grouped raster order", seed=rng.seed) as c:
        grids = list(_GRIDS)
        while len(grids) < len(_GRIDS) + 4:
            tm, tn, g = int(rng.integers(1, 40)), int(rng.integers(1, 20)), int(rng.choice([2, 4, 8, 16]))
            if tm % g:
                grids.append((tm, tn, g))
        for tm, tn, g in grids:
            what = f"tile_coords(t, tiles_m={tm}, tiles_n={tn}, group={g}) for t = 0 … {tm * tn - 1}"
            got = []
            for t in range(tm * tn):
                r = _call(c, f"tile_coords({t}, {tm}, {tn}, {g})", tile_coords, t, tm, tn, g)
                try:
                    a, b = r
                    got.append((int(a), int(b)))
                except (TypeError, ValueError):
                    c.fail(f"tile_coords({t}, {tm}, {tn}, {g})", scheduler.grouped_coords(t, tm, tn, g), r,
                           hint="return a pair (tm, tn)")
            got_a = np.array(got, np.int64).reshape(-1, 2)
            problems = scheduler.permutation_problems(got_a, tm, tn)
            if problems:
                hint = next((why for order, why in _order_variants(tm, tn, g) if np.array_equal(got_a, order)),
                            "every t from 0 to tiles_m·tiles_n - 1 must give a different tile inside the grid")
                c.fail(f"{what}: the order is not a permutation of the tiles", detail="    " + "; ".join(problems),
                       hint=hint)
            want = scheduler.grouped(tm, tn, g)
            if not np.array_equal(got_a, want):
                i = int(np.flatnonzero((got_a != want).any(1))[0])
                hint = next((why for order, why in _order_variants(tm, tn, g) if np.array_equal(got_a, order)),
                            "groups of `group` tile-rows, each walked column by column, top to bottom")
                c.fail(f"{what}: tile {i}", tuple(int(v) for v in want[i]), tuple(int(v) for v in got_a[i]), hint=hint)
            c.ok(f"{tm}×{tn} tiles, group {g}: every tile once, in the grouped order")


# ------------------------------------------------------------------------------------------- 2 · persistent loop
def check_block_tiles(block_tiles: Callable[[int, int, int], list[int]]) -> None:
    """Grade ``block_tiles(block, blocks, tiles) -> [t, …]``: the tiles a persistent block takes, in order; over
    all blocks every tile exactly once (fewer tiles than blocks, a partial last wave included)."""
    rng = grading.fresh_rng()
    with grading.check("Lab 6 · the persistent loop", seed=rng.seed) as c:
        sxm, pcie, h20 = (_parts.PROFILES[k].sms for k in ("h100-sxm", "h100-pcie", "h20"))
        cases = [(sxm, 512), (sxm, 2048), (sxm, 16), (sxm, sxm), (sxm, 600), (pcie, 512), (h20, 600), (3, 1), (1, 7),
                 (5, 0)]
        cases += [(int(rng.integers(2, 140)), int(rng.integers(1, 1200))) for _ in range(4)]
        for blocks, tiles in cases:
            what = f"{blocks} blocks, {tiles} tiles"
            taken: list[list[int]] = []
            for b in range(blocks):
                got = _call(c, f"block_tiles({b}, {blocks}, {tiles})", block_tiles, b, blocks, tiles)
                try:
                    taken.append([int(t) for t in got])
                except (TypeError, ValueError):
                    c.fail(f"block_tiles({b}, {blocks}, {tiles})", "a list of tile numbers", got)
            flat = np.array([t for x in taken for t in x], np.int64)
            counts = np.bincount(flat[(flat >= 0) & (flat < tiles)], minlength=tiles) if tiles else np.zeros(0)
            if flat.size and (flat.min() < 0 or flat.max() >= tiles):
                c.fail(f"{what}: a tile outside 0 … {tiles - 1}", hint="stop at t < tiles")
            if (counts > 1).any():
                t = int(np.flatnonzero(counts > 1)[0])
                stepped_by_one = all(x == list(range(b, tiles)) for b, x in enumerate(taken))
                hint = ("every block steps by 1 from its own number, so block b also takes the tiles of blocks b + 1, "
                        "b + 2, …: step by the number of blocks (gridDim.x in the kernel)" if stepped_by_one else
                        "block b starts at t = b and steps by the number of blocks")
                c.fail(f"{what}: tile {t} is taken {int(counts[t])} times (a tile computed more than once)", hint=hint)
            if (counts == 0).any():
                t = int(np.flatnonzero(counts == 0)[0])
                full_waves = tiles // blocks * blocks
                hint = ("block b starts at t = b (not b + 1) and steps by `blocks` while t < tiles"
                        if t < full_waves else
                        f"the last wave is partial ({tiles - full_waves} tiles for {blocks} blocks): a block keeps "
                        "going while t < tiles, not only over the full waves")
                c.fail(f"{what}: tile {t} is never taken (a tile of C left unwritten)", hint=hint)
            for b, x in enumerate(taken):
                want = list(range(b, tiles, blocks))
                if x != want:
                    chunk = -(-tiles // blocks)
                    hint = ("every tile once, but in contiguous chunks: the kernel strides (t = b, b + blocks, …) so "
                            "the blocks running at the same time take consecutive tiles of the raster order, which "
                            "share rows of A and columns of B in L2"
                            if x == list(range(b * chunk, min(tiles, (b + 1) * chunk)))
                            else "t = block, block + blocks, … while t < tiles")
                    c.fail(f"{what}: the tiles of block {b}", want[:8], x[:8], hint=hint)
            w = scheduler.waves(tiles, blocks)
            c.ok(f"{what}: every tile once, block b takes b, b + {blocks}, … ({w.count} wave(s), the last with "
                 f"{w.last})")


# ------------------------------------------------------------------------------------------- 3 · L2 footprint
#: (visits, blocks, wave, K) on every run: waves that end exactly where a new row of tiles starts, the last, partial
#: wave, and a wave that ends exactly at the last tile
BOUNDARY_WAVES = [(scheduler.row_major(6, 8), 8, 2, 1024), (scheduler.row_major(6, 8), 8, 0, 512),
                  (scheduler.column_major(7, 5), 7, 1, 768), (scheduler.row_major(5, 7), 4, 8, 640),
                  (scheduler.grouped(4, 6, 2), 8, 2, 512), (scheduler.grouped(18, 9, 8), _SMS, 1, 2048)]


def _panel_bytes(tm_count: int, tn_count: int, K: int) -> tuple[int, int]:
    return tm_count * TILE[0] * K * 2, tn_count * TILE[1] * K * 2


def _off_by_one(visits: np.ndarray, blocks: int, wave: int, K: int) -> set[tuple[int, int]]:
    """The footprints of a wave one tile too long or too short at either end, or a last wave filled up with the
    first tiles again."""
    lo, hi = wave * blocks, (wave + 1) * blocks
    chunks = [visits[max(a, 0):max(b, 0)] for a, b in ((lo, hi + 1), (lo, hi - 1), (lo - 1, hi), (lo + 1, hi),
                                                       (lo + 1, hi + 1), (lo - 1, hi - 1))]
    if len(visits):
        chunks.append(visits[[(lo + i) % len(visits) for i in range(blocks)]])
    return {_panel_bytes(len({int(v) for v in x[:, 0]}), len({int(v) for v in x[:, 1]}), K) for x in chunks if len(x)}


def check_wave_footprint(wave_footprint: Callable[[np.ndarray, int, int, int], tuple[int, int]]) -> None:
    """Grade ``wave_footprint(visits, blocks, wave, K) -> (bytes of A, bytes of B)`` that the tiles of one wave read
    (each 128-row panel of A and 256-row panel of B once), on grouped, row-major and Hilbert orders."""
    rng = grading.fresh_rng()
    with grading.check("Lab 6 · the L2 footprint of a wave", seed=rng.seed) as c:
        cases = [(scheduler.grouped(64, 32, 8), _SMS, 0, 8192), (scheduler.row_major(32, 16), _SMS, 0, 4096),
                 (scheduler.grouped(32, 16, 8), _SMS, 3, 4096), (scheduler.hilbert(12, 20), 30, 2, 2048),
                 (scheduler.grouped(10, 3, 8), _SMS, 0, 512)]
        cases += BOUNDARY_WAVES
        for _ in range(3):
            tm, tn = int(rng.integers(2, 40)), int(rng.integers(2, 40))
            g = int(rng.choice([1, 2, 4, 8, 16]))
            blocks = int(rng.integers(4, 133))
            visits = scheduler.grouped(tm, tn, g)
            wave = int(rng.integers(0, -(-tm * tn // blocks)))
            cases.append((visits, blocks, wave, 64 * int(rng.integers(1, 200))))
        for visits, blocks, wave, K in cases:
            what = f"wave {wave} of {len(visits)} tiles on {blocks} blocks, K={K}"
            got = _call(c, f"wave_footprint(visits, {blocks}, {wave}, {K})", wave_footprint, visits.copy(),
                        blocks, wave, K)
            want = scheduler.wave_footprint(visits, blocks, wave, TILE[0], TILE[1], K)
            try:
                a, b = (int(v) for v in got)
            except (TypeError, ValueError):
                c.fail(what, (want.bytes_a, want.bytes_b), got, hint="return (bytes of A, bytes of B)")
            if (a, b) != (want.bytes_a, want.bytes_b):
                chunk = visits[wave * blocks:(wave + 1) * blocks]
                hint = ("count each 128-row panel of A (a tile-row) and each 256-row panel of B (a tile-column) "
                        "once: 128·K·2 and 256·K·2 bytes")
                if (a, b) == _panel_bytes(len(chunk), len(chunk), K):
                    hint = "every tile counted its own panels: tiles of the same row share their A panel, " \
                           "of the same column their B panel — count distinct ones"
                elif (a, b) == (want.a_panels * TILE[0] * K, want.b_panels * TILE[1] * K):
                    hint = "a bf16 element is 2 bytes"
                elif (a, b) in _off_by_one(visits, blocks, wave, K):
                    hint = (f"wave {wave} is tiles {wave * blocks} … {min((wave + 1) * blocks, len(visits)) - 1} "
                            "of the visit order: no more (the next wave's first tile is not in it), no fewer (the "
                            "last wave may be partial)")
                elif (a, b) == _panel_bytes(want.b_panels, want.a_panels, K):
                    hint = "A panels follow the tile's row (tm), B panels its column (tn)"
                elif (a, b) in ((want.a_panels * TILE[1] * K * 2, want.bytes_b),
                                (want.bytes_a, want.b_panels * TILE[0] * K * 2),
                                (want.a_panels * TILE[1] * K * 2, want.b_panels * TILE[0] * K * 2)):
                    hint = "an A panel is 128 rows (the tile's height), a B panel 256 rows of B (the tile's width)"
                c.fail(what, (want.bytes_a, want.bytes_b), (a, b), hint=hint)
            c.ok(f"{what}: {want.a_panels} A panels + {want.b_panels} B panels = {want.bytes / 2**20:.1f} MiB")


# ------------------------------------------------------------------------------------------- 4 · the kernel
def _scale_d_operands(ptx: str, entry: str) -> list[str]:
    """Where the scale-d operand of each wgmma comes from: the hopper.cuh wrappers set the predicate with
    ``setp.ne.b32 p, accumulate, 0`` right before the wgmma."""
    out = []
    for ins in find_instrs(ptx, "setp.ne.b32", entry):
        ops = [o.strip() for o in ins.operands.split(",")]
        if len(ops) == 3 and ops[0] == "p" and ops[2] == "0":
            out.append(resolve(ptx, ops[1]))
    return out


def _zeroes_accumulators(ptx: str, entry: str) -> bool:
    """Whether the kernel writes 0.0 into at least 128 float registers (the accumulators zeroed by hand): NVRTC
    makes one register 0 and copies it into the others."""
    movs = [[o.strip() for o in ln.instr.operands.split(",")] for ln in stream(ptx, entry)
            if ln.instr and ln.instr.opcode == "mov.f32"]
    zeros = {ops[0] for ops in movs if len(ops) == 2 and ops[1] == "0f00000000"}
    copies = {ops[0] for ops in movs if len(ops) == 2 and ops[1] in zeros}
    return len(zeros | copies) >= 128


def check_persistent_kernel(source: str, *, benchmark: bool = True, sizes: tuple[Any, ...] = (4096, 8192),
                            wrappers: str | None = None, here: Any = None, carried: bool = True) -> None:
    """Grade the Lab 6 kernel: your Lab 5 kernel (the course's where yours does not pass Lab 5's check) with this
    lab's change and your regions from ``source`` (the LAB6_SRC cell), after your wrappers (``wrappers``; by default
    carried from your Lab 1 and 2 notebooks beside this one). ``carried=False``: ``source`` is a whole kernel, graded
    as it is (the course's bench/kernels/lab6_persistent.cu).

    Compile it (report); read from its PTX: no cluster, the tile loop stepping by the grid size,
    scale-d = 0 on a tile's first wgmma (or the accumulators zeroed), and the persistent epilogue on the epilogue
    model (three tiles in a row: a buffer is written only after the store that read it, even the previous tile's).
    Wherever kernels run: random non-square shapes, C poisoned, against fp64, then the work (every tile stored once,
    by the block the schedule gives it); on the H100 on every co-resident block, on the course's PTX executor on two
    blocks that each take several tiles; on the H100 then timing beside cuBLAS (bf16 C)."""
    from ._common import can_run

    made = None
    if carried:
        made, source = _carried(source, wrappers, here, quiet=True)
    rng = grading.fresh_rng()
    with grading.check("Lab 6 · the persistent kernel", seed=rng.seed) as c:
        if made is not None:
            c.ok(f"graded: {made.whose('Lab 6')}")
            for line in made.merge.report():
                print(f"   ⚠ {line}")
        kernel = compile_student(source, KERNEL_NAME, what="your kernel")
        ptx = kernel.ptx
        report_checks(c, kernel.report, spills_allowed=True)
        c.true("the kernel runs without clusters (one block per SM, each on its own)",
               ".reqnctapercluster" not in ptx and ".explicitcluster" not in ptx,
               hint="this lab's kernel has no __cluster_dims__: clusters come in Lab 7")
        c.true("the tile loop steps by the grid size (%nctaid.x)", "%nctaid.x" in ptx,
               hint="block b takes tiles b, b + gridDim.x, b + 2·gridDim.x, …: step by gridDim.x (stepping by 1, "
                    "every block would compute the tiles of the blocks after it too)")
        scale = _scale_d_operands(ptx, KERNEL_NAME)
        if scale and all(s == "1" for s in scale) and not _zeroes_accumulators(ptx, KERNEL_NAME):
            c.fail("every wgmma accumulates (scale-d = 1), and the accumulators are never zeroed",
                   hint="the registers still hold the previous tile's sums, so a block's second tile adds them: pass "
                        "scale-d = 0 (accumulate = false) on the tile's first wgmma, k == 0 and kk == 0")
        c.ok("a tile's first wgmma starts from zero (scale-d = 0)" if any(s != "1" for s in scale)
             else "the accumulators are zeroed before each tile")
        check_epilogue_ptx(c, ptx, KERNEL_NAME, tiles=3, final_required=True)
        if not can_run(kernel, checked="the tile loop and scale-d (from the PTX), the epilogue's order across tiles "
                                       "(on the epilogue model)"):
            return
        _gpu_check(c, source, LAUNCH, rng, what="your kernel", benchmark=benchmark, sizes=sizes)


# ------------------------------------------------------------------------------------------- the ladder
#: your Lab 6 kernel's timings of this session (size -> (yours, the course's in the same run))
MEASURED = lab5.timed(KERNEL_NAME)


def ladder_rows(size: int = 4096) -> list[dict[str, Any]]:
    """The ladder at size³: the course's Lab 5 and Lab 6 kernels as measured on an H100, then your own Lab 6 kernel
    as the check timed it in this session, beside the course's Lab 6 kernel timed in the same run."""
    steps = {"lab5": "Lab 5 · the course's kernel", "lab6": "Lab 6 · the course's kernel"}
    return lab5.lab_ladder_rows(size, "Lab 6", steps, KERNEL_NAME)


def show_ladder(size: int = 4096) -> None:
    """The ladder at size³ as a table (Markdown in a notebook, text elsewhere): TFLOP/s beside cuBLAS in the same
    run, and the ratio."""
    lab5.show_rows(ladder_rows(size), size)
