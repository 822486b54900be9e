"""Graders of Lab 1 (TMA): tensor-map arguments, tile coordinates, the swizzled shared-memory image, the rules a
map must obey, the wide box (a rank-3 map: 64 rows × 128 columns in one load), the TMA loads in inline PTX, and
the lab's kernel: one tile per block through one mbarrier, read back with the XOR rule.

Every Python grader takes a ``seed``: it first runs a fixed set of cases that tells apart every mistake the tests
name (each rule, each dimension, both ends of every range, inputs breaking several rules at once), then random
cases drawn from the seed. The CUDA exercises are graded by running them wherever a kernel can run (the H100, or
the course's PTX executor without one): into outputs poisoned first, compared bit for bit. Their PTX (the full form
of each instruction, each operand traced to what a probe kernel passed, the barrier protocol on every path) explains
a failed run, catches what a run's timing hides, and is the grade where nothing can run (``HELPERS_EXECUTOR=off``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from helpers.course import grading
from helpers.course.checks import _common as C
from helpers.course.checks._protocol import read as read_protocol
from helpers.course.checks._ptxflow import Slot, form_problem
from helpers.course.hints import answer, hint

__all__ = [
    "check_map_args",
    "check_tile_coords",
    "check_smem_image",
    "check_max_box",
    "check_diagnose",
    "check_wide_box",
    "check_rank3",
    "check_tma_load",
    "check_copy_kernel",
    "kernel_changes",
    "hint",
    "answer",
    "RULES",
    "PLAIN_COPY",
]

HEADER = "#include <hopper.cuh>\n"
#: The data types the exercises draw from: tensormap.DataType name -> element size.
DTYPES = {"BFLOAT16": 2, "FLOAT16": 2, "FLOAT32": 4, "UINT8": 1}
SWIZZLES = ("NONE", "B32", "B64", "B128")
SPAN = {"NONE": 0, "B32": 32, "B64": 64, "B128": 128}
#: The rules a student's diagnose() names: the emulator's TensorMapError.rule ids, in the order it checks them.
RULES = ("address-alignment", "stride-alignment", "box-range", "box-inner-multiple-of-16", "box-inner-exceeds-swizzle")


def _dt(name: str) -> Any:
    from helpers.hopper import tensormap

    return tensormap.DataType[name]


def _random_matrix(rng: np.random.Generator, rows: int, cols: int, dtype: str) -> np.ndarray:
    """Random bytes viewed as ``dtype`` (every byte pattern, so a misplaced chunk shows; NaNs compare as bytes)."""
    from helpers.hopper import tensormap

    raw = rng.integers(0, 256, size=(rows, cols * DTYPES[dtype]), dtype=np.uint8)
    return raw.view(tensormap.numpy_dtype(_dt(dtype))).reshape(rows, cols)


def _as_tuple(x: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(v) for v in x)
    except (TypeError, ValueError):
        return None


def _encode(args: dict[str, Any], dtype: str, swizzle: str, address: int = 0x7F00_0000_0000) -> Any:
    from helpers.hopper import tensormap

    gd = tuple(int(x) for x in args["global_dim"])
    return tensormap.encode_tiled(
        _dt(dtype), len(gd), address, gd, tuple(args["global_strides"]), tuple(args["box_dim"]),
        tuple(args.get("element_strides", (1,) * len(gd))), tensormap.Interleave.NONE, tensormap.Swizzle[swizzle])


def kernel_changes() -> Any:
    """The diff this lab makes: from a copy kernel with ordinary loads to the lab's TMA copy kernel."""
    return C.lab_diff("lab0", "lab1", prev_source=PLAIN_COPY, prev_label="a copy through shared memory, no TMA",
                      note="every thread of the plain copy loads its share with ordinary loads; this lab hands the "
                           "whole tile to the TMA, one instruction, and waits on an mbarrier")


PLAIN_COPY = r"""
constexpr int BM = 64, BK = 64;  // a tile: 64 rows x 64 bf16 = 128 bytes per row, 8 KiB

extern "C" __global__ void __launch_bounds__(128) lab1_copy(const unsigned short* src, unsigned short* out,
                                                          int cols) {
  __shared__ alignas(1024) unsigned short tile[BM * BK];
  const int col0 = blockIdx.x * BK, row0 = blockIdx.y * BM;
  for (int i = threadIdx.x; i < BM * BK; i += blockDim.x)  // every thread loads its share, 2 bytes at a time
    tile[i] = src[(size_t)(row0 + i / BK) * cols + col0 + i % BK];
  __syncthreads();
  for (int i = threadIdx.x; i < BM * BK; i += blockDim.x) {
    const int r = i / BK, c = i % BK;
    const unsigned short v = tile[r * BK + c];
    out[(size_t)(row0 + r) * cols + col0 + c] = v;
  }
}
"""


# ---------------------------------------------------------------------------------------------------------
# Exercise 1: the arguments of cuTensorMapEncodeTiled for a row-major matrix
# ---------------------------------------------------------------------------------------------------------
#: (dtype, rows, cols, padding in elements, box rows, box cols): rows ≠ cols, box rows ≠ box cols, padded views
#: (row pitch ≠ cols × size), 1-byte and 4-byte types, a box as large as the whole matrix.
MAP_CASES = [("BFLOAT16", 128, 192, 32, 32, 64), ("FLOAT32", 64, 96, 0, 16, 32), ("UINT8", 40, 256, 16, 8, 128),
             ("FLOAT16", 256, 64, 8, 64, 16), ("FLOAT32", 8, 8, 4, 8, 8)]


def _view(rng: np.random.Generator, dtype: str, rows: int, cols: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    big = _random_matrix(rng, rows, cols + pad, dtype)
    return big[:, :cols], big


def _random_map_case(rng: np.random.Generator) -> tuple[str, int, int, int, int, int]:
    dtype = str(rng.choice(list(DTYPES)))
    item = DTYPES[dtype]
    rows = int(rng.integers(2, 40)) * 8
    cols = int(rng.integers(1, 24)) * 64 // item
    pad = int(rng.choice([0, 1, 3])) * 16 // item
    box_rows = int(rng.choice([b for b in (8, 16, 32, 64) if b <= rows]))
    box_cols = int(rng.choice([b for b in (16, 32, 64, 128) if b <= cols * item])) // item
    return dtype, rows, cols, pad, box_rows, box_cols


def _map_args_expected(a: np.ndarray, box_rows: int, box_cols: int) -> dict[str, tuple[int, ...]]:
    return {"global_dim": (a.shape[1], a.shape[0]), "global_strides": (a.strides[0],),
            "box_dim": (box_cols, box_rows), "element_strides": (1, 1)}


def _map_args_hint(key: str, got: tuple[int, ...], exp: tuple[int, ...], a: np.ndarray) -> str:
    item = a.itemsize
    if key in ("global_dim", "box_dim") and got == exp[::-1]:
        return "the driver lists dimensions innermost first: (columns, rows) for a row-major matrix"
    if key == "global_strides" and len(got) == 2 and got[1:] == exp:
        return ("leave out the innermost stride: it is always the element size, so the driver takes only the "
                "strides of dimensions 1.. (the famous gmem_prob_stride + 1)")
    if key == "global_strides" and item > 1 and got == (exp[0] // item,):
        return "strides are in bytes, not elements"
    if key == "global_strides" and got == (a.shape[1] * item,):
        return ("this matrix is a slice of a wider one: its rows are a.strides[0] bytes apart, not columns × "
                "element size")
    if key == "element_strides":
        return "element_strides is the step inside the box along each dimension: 1 for every element, (1, 1)"
    return ""


def check_map_args(student: Callable[[np.ndarray, int, int], dict], seed: int | None = None) -> None:
    """``tensor_map_args(a, box_rows, box_cols)`` -> the dims/strides/box of a 2-D tiled tensor map."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 1 · tensor-map arguments", seed=rng.seed) as c:
        cases = MAP_CASES + [_random_map_case(rng) for _ in range(3)]
        for n, (dtype, rows, cols, pad, box_rows, box_cols) in enumerate(cases):
            a, memory = _view(rng, dtype, rows, cols, pad)
            name = f"{rows}×{cols} {dtype} (row pitch {a.strides[0]} B), box {box_rows}×{box_cols}"
            got = C.call(c, f"tensor_map_args on a {name}", student, a, box_rows, box_cols)
            exp = _map_args_expected(a, box_rows, box_cols)
            if not isinstance(got, dict):
                c.fail(f"{name}: a dict", "a dict with global_dim, global_strides, box_dim, element_strides",
                       type(got).__name__, hint="return {'global_dim': (...), 'global_strides': (...), ...}")
            for key in exp:
                g = _as_tuple(got.get(key)) if key in got else None
                if g is None:
                    c.fail(f"{name}: {key}", exp[key], got.get(key), hint=f"the dict needs a '{key}' entry of ints")
                if g != exp[key]:
                    c.fail(f"{name}: {key}", exp[key], g, hint=_map_args_hint(key, g, exp[key], a))
            c.ok(f"{name}: {exp}")
            if n == 0:
                _confirm_on_emulator(c, rng, a, memory, dtype, got, box_rows, box_cols)


def _confirm_on_emulator(c: grading.Check, rng: np.random.Generator, a: np.ndarray, memory: np.ndarray,
                         dtype: str, args: dict[str, Any], box_rows: int, box_cols: int) -> None:
    """Encode the student's arguments with the emulator and load one box from the matrix's memory: it must be
    the numpy slice, byte for byte."""
    from helpers.hopper import tma

    tmap = _encode(args, dtype, "NONE")
    r0 = int(rng.integers(0, a.shape[0] // box_rows)) * box_rows
    c0 = int(rng.integers(0, max(1, a.shape[1] // box_cols))) * box_cols
    got = np.asarray(tma.load_tile(tmap, memory, (c0, r0))).reshape(-1)
    exp = np.ascontiguousarray(a[r0:r0 + box_rows, c0:c0 + box_cols]).view(np.uint8).reshape(-1)
    c.array(f"your arguments, encoded by the emulator: the box at row {r0}, column {c0}", got, exp)


# ---------------------------------------------------------------------------------------------------------
# Exercise 2: which coordinates name a tile
# ---------------------------------------------------------------------------------------------------------
#: tile row ≠ tile column, box rows ≠ box columns, both ≥ 1 (a tile index then differs from an element index)
COORD_CASES = [(2, 5, 16, 64), (1, 3, 64, 32), (3, 1, 8, 128), (7, 2, 128, 16), (1, 2, 64, 128)]


def _coords_hint(g: tuple[int, ...] | None, tr: int, tc: int, br: int, bc: int) -> str:
    exp = (tc * bc, tr * br)
    if g == exp[::-1]:
        return "coordinates go innermost first, like the dims: (column, row)"
    if g in ((tc, tr), (tr, tc)):
        return "coordinates are element indices, not tile indices: multiply by the box size"
    if g in ((tc * bc, tr), (tc, tr * br)):
        return ("one coordinate is an element index and the other a tile index: with a plain row-major map both "
                "are element indices (the tile's first column and first row)")
    if g == (tc * br, tr * bc):
        return "the column coordinate steps by the box's width (box_cols), the row by its height (box_rows)"
    return "(column of the tile's first element, row of the tile's first element)"


def check_tile_coords(student: Callable[[int, int, int, int], tuple[int, int]], seed: int | None = None) -> None:
    """``tile_coords(tile_row, tile_col, box_rows, box_cols)`` -> the (c0, c1) a TMA load takes."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 1 · tile coordinates", seed=rng.seed) as c:
        cases = list(COORD_CASES)
        for _ in range(3):
            br, bc = (int(x) for x in rng.choice([8, 16, 32, 64, 128], size=2, replace=False))
            tr, tc = (int(x) for x in rng.choice(np.arange(1, 60), size=2, replace=False))
            cases.append((tr, tc, br, bc))
        cases.append((0, 0, 64, 64))  # the first tile: (0, 0) whatever the convention
        for tr, tc, br, bc in cases:
            got = C.call(c, f"tile_coords({tr}, {tc}, {br}, {bc})", student, tr, tc, br, bc)
            g = _as_tuple(got)
            c.equal(f"tile ({tr}, {tc}) of {br}×{bc} boxes", g, (tc * bc, tr * br),
                    hint=_coords_hint(g, tr, tc, br, bc))
        _coords_on_emulator(c, rng, student)


def _coords_on_emulator(c: grading.Check, rng: np.random.Generator, student: Callable) -> None:
    from helpers.hopper import tensormap, tma

    rows, cols, br, bc = 256, 512, 64, 64
    a = _random_matrix(rng, rows, cols, "BFLOAT16")
    tmap = tensormap.for_matrix((rows, cols), tensormap.DataType.BFLOAT16, br, bc)
    tr, tc = int(rng.integers(1, rows // br)), int(rng.integers(1, cols // bc))
    coords = _as_tuple(C.call(c, f"tile_coords({tr}, {tc}, {br}, {bc})", student, tr, tc, br, bc))
    got = np.asarray(tma.load_tile(tmap, a, coords)).reshape(-1)
    exp = np.ascontiguousarray(a[tr * br:(tr + 1) * br, tc * bc:(tc + 1) * bc]).view(np.uint8).reshape(-1)
    c.array(f"emulated TMA load of tile ({tr}, {tc}) of a {rows}×{cols} bf16 matrix", got, exp)


# ---------------------------------------------------------------------------------------------------------
# Exercise 3: the swizzled shared-memory image of a box
# ---------------------------------------------------------------------------------------------------------
def swizzle_reference(box: np.ndarray, swizzle: str) -> np.ndarray:
    """The shared-memory bytes of a box after a TMA load with this swizzle (destination 1024-byte aligned).

    Byte ``o`` of the dense box lands at ``o ^ (((o >> 7) & m) << 4)`` with ``m = span/16 - 1``: the 16-byte
    chunk index is XOR-ed with address bits 7.. (the row for 128B, row/2 for 64B, row/4 for 32B).
    """
    raw = np.ascontiguousarray(box).view(np.uint8).reshape(-1)
    span = SPAN[swizzle]
    if not span:
        return raw.copy()
    o = np.arange(raw.size)
    dest = o ^ (((o >> 7) & (span // 16 - 1)) << 4)
    out = np.empty_like(raw)
    out[dest] = raw
    return out


def _emulated_image(box: np.ndarray, dtype: str, swizzle: str) -> np.ndarray:
    """What the emulator's TMA writes to shared memory when it loads the whole of ``box``."""
    from helpers.hopper import tensormap, tma

    rows, cols = box.shape
    tmap = tensormap.for_matrix((rows, cols), _dt(dtype), rows, cols, swizzle=tensormap.Swizzle[swizzle])
    return np.asarray(tma.load_tile(tmap, box, (0, 0))).view(np.uint8).reshape(-1)


#: (swizzle, dtype, rows): every mode, rows past 8 (so row % 8 differs from the row), every element size
IMAGE_CASES = [("B128", "BFLOAT16", 16), ("B64", "BFLOAT16", 16), ("B32", "FLOAT32", 16), ("NONE", "UINT8", 8),
               ("B128", "FLOAT32", 24), ("B64", "UINT8", 32), ("B32", "BFLOAT16", 64)]


def check_smem_image(student: Callable[[np.ndarray, str], np.ndarray], seed: int | None = None) -> None:
    """``smem_image(box, swizzle)`` -> the uint8 shared-memory image a TMA load of ``box`` writes."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 1 · swizzled shared-memory image", seed=rng.seed) as c:
        cases = IMAGE_CASES + [(str(rng.choice(SWIZZLES)), str(rng.choice(list(DTYPES))),
                                int(rng.choice([8, 16, 24, 32, 64]))) for _ in range(3)]
        for swizzle, dtype, rows in cases:
            item = DTYPES[dtype]
            box = _random_matrix(rng, rows, (SPAN[swizzle] or 64) // item, dtype)
            exp = _emulated_image(box, dtype, swizzle)
            what = f"smem_image of a {rows}×{box.shape[1]} {dtype} box, {swizzle}"
            got = np.asarray(C.call(c, what, student, box.copy(), swizzle))
            if got.dtype != np.uint8:
                c.fail(f"{what}: dtype", "uint8", str(got.dtype), hint="return the bytes: arr.view(np.uint8)")
            got = got.reshape(-1)
            hint_text = "" if np.array_equal(got, exp) else _image_hint(got, box, swizzle)
            c.array(f"{swizzle}: {rows}×{box.shape[1]} {dtype} box ({box.nbytes} bytes)", got, exp, hint=hint_text)


def _image_hint(got: np.ndarray, box: np.ndarray, swizzle: str) -> str:
    raw = np.ascontiguousarray(box).view(np.uint8).reshape(-1)
    if got.size != raw.size:
        return "the image has exactly as many bytes as the box"
    if swizzle != "NONE" and np.array_equal(got, raw):
        return "this is the box unswizzled: the 16-byte chunks of each row move"
    if swizzle == "NONE":
        return "without swizzle the image is the box's bytes, row after row"
    span = SPAN[swizzle]
    chunks = span // 16
    per_row = raw.reshape(-1, chunks, 16)
    rows = np.arange(per_row.shape[0])
    rule = {"B128": "row % 8", "B64": "(row // 2) % 4", "B32": "(row // 4) % 2"}[swizzle]
    for guess, words in ((rows % 8, "XOR-ing the chunk with row % 8 is the 128B pattern"),
                         (rows % chunks, "XOR-ing with row % (chunks per row) is not the hardware's pattern"),
                         (rows, "XOR-ing with the row index itself lets rows ≥ 8 wrap wrongly")):
        idx = (np.arange(chunks)[None, :] ^ guess[:, None]) % chunks
        alt = np.empty_like(per_row)
        alt[rows[:, None], idx] = per_row
        if np.array_equal(got, alt.reshape(-1)):
            return (f"{words}; the hardware XORs the chunk index with address bits 7.. of the byte offset: for "
                    f"{swizzle} that is {rule}")
    return (f"chunk c of a row lands at chunk c XOR ({rule}) for {swizzle}; the bytes inside a chunk keep their "
            "order")


# ---------------------------------------------------------------------------------------------------------
# Exercise 4: the rules of a tensor map (the widest box, and why a map was refused)
# ---------------------------------------------------------------------------------------------------------
def check_max_box(student: Callable[[str, str], int], seed: int | None = None) -> None:
    """``max_box_cols(dtype, swizzle)`` -> the widest box (elements along dim 0) the driver accepts. Every
    combination is checked (no randomness)."""
    from helpers.hopper import tensormap

    with grading.check("Lab 1 · the widest box") as c:
        for dtype in ("BFLOAT16", "FLOAT32", "UINT8", "FLOAT64"):
            item = tensormap.element_size(tensormap.DataType[dtype])
            for swizzle in SWIZZLES:
                got = C.call(c, f"max_box_cols({dtype!r}, {swizzle!r})", student, dtype, swizzle)
                widest = 0
                for n in range(1, 257):
                    try:
                        tensormap.encode_tiled(_dt(dtype), 2, 0, (4096, 64), (4096 * item,), (n, 8), (1, 1),
                                               tensormap.Interleave.NONE, tensormap.Swizzle[swizzle])
                        widest = n
                    except tensormap.TensorMapError:
                        pass
                hint_text = ""
                if isinstance(got, int | np.integer) and got == SPAN[swizzle] and swizzle != "NONE" and item > 1:
                    hint_text = "the swizzle span is in bytes; the box is counted in elements"
                elif swizzle == "NONE":
                    hint_text = "without swizzle only the box limit (256 elements per dimension) applies"
                else:
                    hint_text = (f"a box row may be at most as wide as the swizzle span ({SPAN[swizzle]} bytes): "
                                 f"{SPAN[swizzle]} // {item} elements of {dtype}")
                c.equal(f"{dtype} ({item} B) with swizzle {swizzle}", got, widest, hint=hint_text)


def _spec(dtype: str = "BFLOAT16", address: int = 0x7F00_0000_0000, rows: int = 512, cols: int = 1024,
          pitch: int | None = None, box: tuple[int, int] = (64, 64), swizzle: str = "B128") -> dict[str, Any]:
    item = DTYPES[dtype]
    return {"dtype": dtype, "global_address": address, "global_dim": (cols, rows),
            "global_strides": (cols * item if pitch is None else pitch,), "box_dim": box, "swizzle": swizzle}


#: Maps that break no rule or exactly the rules named, at the exact boundaries; the expected answer is what the
#: emulator says (it checks the rules in the order of RULES).
DIAGNOSE_CASES: list[dict[str, Any]] = [
    _spec(),                                                    # the course's A map: fine
    _spec(box=(64, 256)),                                       # 256 rows: the largest legal box dimension
    _spec(box=(64, 1)),                                         # 1 row: the smallest
    _spec(dtype="FLOAT32", box=(32, 64)),                       # 32 × 4 = 128 bytes: exactly the span
    _spec(dtype="UINT8", box=(16, 8), swizzle="B32"),           # 16 bytes: legal, though 16 bytes is not 16 elements
    _spec(dtype="FLOAT32", box=(4, 8), swizzle="NONE"),         # 16 bytes of fp32: 4 elements, still a multiple of 16
    _spec(address=0x7F00_0000_0008),                            # 8 off a multiple of 16
    _spec(pitch=1024 * 2 + 8),                                  # row pitch 8 off
    _spec(box=(64, 257)),                                       # one past the box limit
    _spec(box=(64, 0)),                                         # an empty box
    _spec(dtype="BFLOAT16", box=(12, 64), swizzle="NONE"),      # 24 bytes: not a multiple of 16
    _spec(dtype="FLOAT32", box=(36, 64)),                       # 144 bytes: one chunk past the 128B span
    _spec(dtype="UINT8", box=(64, 64), swizzle="B32"),          # 64 bytes with a 32B span
    _spec(address=0x7F00_0000_0004, pitch=1024 * 2 + 4),        # address and stride: the address is checked first
    _spec(pitch=1024 * 2 + 8, box=(64, 300)),                   # stride and box range: the stride first
    _spec(dtype="BFLOAT16", box=(300, 64), swizzle="NONE"),     # box range and 600 B (not a multiple of 16): range
    _spec(dtype="BFLOAT16", box=(100, 64), swizzle="B64"),      # 200 B: not a multiple of 16 and past the span
    _spec(address=0x7F00_0000_0002, box=(64, 0)),               # address and an empty box
]


def _random_spec(rng: np.random.Generator, broken: str | None) -> dict[str, Any]:
    """A random map that breaks exactly the rule ``broken`` (or none)."""
    dtype = str(rng.choice(list(DTYPES)))
    item = DTYPES[dtype]
    swizzle = str(rng.choice(SWIZZLES[1:]))
    span = SPAN[swizzle]
    rows, cols = int(rng.integers(1, 64)) * 16, int(rng.integers(1, 64)) * 64
    inner = 16 * int(rng.integers(1, span // 16 + 1))  # bytes: a multiple of 16, at most the span
    spec = _spec(dtype, int(rng.integers(1, 1 << 20)) * 256, rows, cols, None,
                 (inner // item, int(rng.choice([8, 16, 64, 128, 256]))), swizzle)
    if broken == "address-alignment":
        spec["global_address"] += int(rng.choice([2, 4, 8, 12]))
    elif broken == "stride-alignment":
        spec["global_strides"] = (cols * item + int(rng.choice([2, 4, 8])),)
    elif broken == "box-range":
        spec["box_dim"] = (spec["box_dim"][0], int(rng.integers(257, 400)))
    elif broken == "box-inner-multiple-of-16":
        spec["swizzle"] = "NONE"
        spec["box_dim"] = (((16 * int(rng.integers(1, 8)) + 8) // item) or 1, spec["box_dim"][1])
    elif broken == "box-inner-exceeds-swizzle":
        spec["box_dim"] = (2 * span // item, spec["box_dim"][1])
    return spec


def _emulator_rule(spec: dict[str, Any]) -> str | None:
    from helpers.hopper import tensormap

    try:
        tensormap.encode_tiled(_dt(spec["dtype"]), 2, spec["global_address"], spec["global_dim"],
                               spec["global_strides"], spec["box_dim"], (1, 1), tensormap.Interleave.NONE,
                               tensormap.Swizzle[spec["swizzle"]])
    except tensormap.TensorMapError as exc:
        return exc.rule
    return None


def _rule_hint(rule: str | None, got: Any, spec: dict[str, Any]) -> str:
    broken = _broken_rules(spec)
    if rule is not None and got in broken and got != rule:
        return (f"this map breaks {' and '.join(broken)}: name the first in the order of the table ({rule}), as "
                "the emulator does")
    if isinstance(got, str) and got in RULES and got not in broken:
        return _kept_hint(got, spec)
    return {
        None: "every rule holds for this map: return None",
        "address-alignment": "the tensor's global address must be a multiple of 16 bytes",
        "stride-alignment": "every byte stride (global_strides) must be a multiple of 16",
        "box-range": "every box dimension holds 1 to 256 elements (both ends included)",
        "box-inner-multiple-of-16": "the box's inner row (box_dim[0] × element size) must be a multiple of 16 "
                                    "bytes; check it in bytes, not elements",
        "box-inner-exceeds-swizzle": "with a swizzle, the box's inner row (box_dim[0] × element size) may be at "
                                     "most the swizzle span (32, 64 or 128 bytes); exactly the span is fine",
    }.get(rule, "")


def _kept_hint(rule: str, spec: dict[str, Any]) -> str:
    """Why this map keeps the rule the student named."""
    inner = spec["box_dim"][0] * DTYPES[spec["dtype"]]
    span = SPAN[spec["swizzle"]]
    return {
        "address-alignment": f"the address {spec['global_address']:#x} is a multiple of 16 bytes",
        "stride-alignment": f"the stride {spec['global_strides'][0]} bytes is a multiple of 16",
        "box-range": f"every box dimension of {spec['box_dim']} is between 1 and 256, both ends included",
        "box-inner-multiple-of-16": f"the inner row is {spec['box_dim'][0]} × {DTYPES[spec['dtype']]} = {inner} "
                                    "bytes, a multiple of 16: count bytes, not elements",
        "box-inner-exceeds-swizzle": (f"the inner row is {inner} bytes and the {spec['swizzle']} span {span}: "
                                      "exactly the span is fine" if span else "without a swizzle there is no span"),
    }[rule]


def _broken_rules(spec: dict[str, Any]) -> list[str]:
    """Every rule of RULES the map breaks (not only the first)."""
    item = DTYPES[spec["dtype"]]
    inner = spec["box_dim"][0] * item
    out = []
    if spec["global_address"] % 16:
        out.append("address-alignment")
    if any(s % 16 for s in spec["global_strides"]):
        out.append("stride-alignment")
    if any(not 1 <= b <= 256 for b in spec["box_dim"]):
        out.append("box-range")
    if inner % 16:
        out.append("box-inner-multiple-of-16")
    if SPAN[spec["swizzle"]] and inner > SPAN[spec["swizzle"]]:
        out.append("box-inner-exceeds-swizzle")
    return out


def check_diagnose(student: Callable[[dict], str | None], seed: int | None = None) -> None:
    """``diagnose(spec)`` -> the rule the driver would refuse the map for (one of RULES), or None."""
    from helpers.hopper import tensormap

    rng = grading.fresh_rng(seed)
    with grading.check("Lab 1 · why was the map refused?", seed=rng.seed) as c:
        targets: list[str | None] = [*RULES, None, None]
        rng.shuffle(targets)  # type: ignore[arg-type]
        specs = DIAGNOSE_CASES + [_random_spec(rng, t) for t in targets]
        real = tensormap.encode_tiled

        def refuse(*_a: Any, **_k: Any) -> None:
            raise RuntimeError("diagnose() must reason from the rules, not call tensormap.encode_tiled")

        for spec in specs:
            exp = _emulator_rule(spec)
            shown = ", ".join(f"{k}={v}" for k, v in spec.items() if k != "dtype") + f" ({spec['dtype']})"
            tensormap.encode_tiled = refuse
            try:
                got = C.call(c, f"diagnose({shown})", student, dict(spec),
                             hint="diagnose() must reason from the rules, not call tensormap.encode_tiled")
            finally:
                tensormap.encode_tiled = real
            c.equal(shown, got, exp, hint=_rule_hint(exp, got, spec))


# ---------------------------------------------------------------------------------------------------------
# Exercise 5: the wide box, a rank-3 map (64 rows × 128 columns of bf16 under the 128B swizzle in one load)
# ---------------------------------------------------------------------------------------------------------
#: (rows, cols, padding in columns, box rows, box cols, row0, col0): 2, 3 and 4 strips of 64 columns, padded
#: views, boxes not at the origin.
WIDE_CASES = [(128, 256, 64, 64, 128, 64, 128), (64, 192, 0, 64, 192, 0, 0), (256, 512, 32, 8, 256, 200, 256),
              (192, 384, 0, 64, 128, 128, 64)]


def _wide_expected(a: np.ndarray, box_rows: int, box_cols: int) -> dict[str, tuple[int, ...]]:
    return {"global_dim": (64, a.shape[0], a.shape[1] // 64), "global_strides": (a.strides[0], 128),
            "box_dim": (64, box_rows, box_cols // 64), "element_strides": (1, 1, 1)}


def _wide_hint(key: str, got: tuple[int, ...] | None, exp: tuple[int, ...], a: np.ndarray) -> str:
    if got is None:
        return f"'{key}' must be ints, innermost first"
    if key == "global_strides":
        if got == exp[::-1]:
            return "dimension 1 (the next row) is a row pitch away; dimension 2 (the next strip) 128 bytes"
        if got[0] == a.shape[1] * a.itemsize and got[0] != exp[0]:
            return "this matrix is a slice of a wider one: its rows are a.strides[0] bytes apart"
        if got[1] == 64:
            return "strides are in bytes: the next strip of 64 bf16 starts 128 bytes further"
        return "(bytes from one row to the next, bytes from one 64-column strip to the next)"
    if got == exp[::-1]:
        return "innermost first: (64 columns of a strip, rows, strips)"
    if key == "global_dim" and got[0] != 64:
        return "dimension 0 is the 64 columns of one strip (128 bytes, the 128B swizzle span), not the whole row"
    if key == "global_dim" and got[2] == a.shape[1]:
        return "dimension 2 counts strips of 64 columns: cols // 64"
    if key == "box_dim" and got[2] == exp[2] * 64:
        return "the box's dimension 2 counts strips: box_cols // 64"
    return ""


def _wide_image(a: np.ndarray, r0: int, c0: int, box_rows: int, box_cols: int) -> np.ndarray:
    """The shared-memory image of the wide box: one 128B-swizzled sub-tile per 64-column strip, back to back."""
    parts = [_emulated_image(np.ascontiguousarray(a[r0:r0 + box_rows, c0 + 64 * i:c0 + 64 * i + 64]), "BFLOAT16",
                             "B128") for i in range(box_cols // 64)]
    return np.concatenate(parts)


def check_wide_box(map_args: Callable[[np.ndarray, int, int], dict], coords: Callable[[int, int], tuple],
                   seed: int | None = None) -> None:
    """``wide_map_args(a, box_rows, box_cols)`` and ``wide_coords(row0, col0)``: a rank-3 map of a bf16 matrix
    that loads box_rows × box_cols (a multiple of 64 columns) in one instruction under the 128B swizzle."""
    from helpers.hopper import tma

    rng = grading.fresh_rng(seed)
    with grading.check("Lab 1 · the wide box: a rank-3 tensor map", seed=rng.seed) as c:
        cases = list(WIDE_CASES)
        for _ in range(2):
            strips = int(rng.integers(1, 5))
            rows, cols = int(rng.integers(1, 9)) * 64, int(rng.integers(strips, 9)) * 64
            br = int(rng.choice([8, 16, 32, 64]))
            cases.append((rows, cols, int(rng.choice([0, 8, 64])), br, 64 * strips,
                          int(rng.integers(0, rows // br)) * br, int(rng.integers(0, cols // 64 - strips + 1)) * 64))
        for rows, cols, pad, br, bc, r0, c0 in cases:
            a, memory = _view(rng, "BFLOAT16", rows, cols, pad)
            name = f"{rows}×{cols} bf16 (row pitch {a.strides[0]} B), box {br}×{bc}"
            got = C.call(c, f"wide_map_args on a {name}", map_args, a, br, bc)
            if not isinstance(got, dict):
                c.fail(f"{name}: a dict", "a dict with global_dim, global_strides, box_dim, element_strides",
                       type(got).__name__)
            exp = _wide_expected(a, br, bc)
            for key in exp:
                g = _as_tuple(got.get(key)) if key in got else None
                if g != exp[key]:
                    c.fail(f"{name}: {key}", exp[key], g if g is not None else got.get(key),
                           hint=_wide_hint(key, g, exp[key], a))
            cc = _as_tuple(C.call(c, f"wide_coords({r0}, {c0})", coords, r0, c0))
            if cc != (0, r0, c0 // 64):
                hint_text = ("three coordinates, innermost first: the column inside the strip (0: the box starts a "
                             "strip), the row, the strip (col0 // 64)")
                if cc == (0, r0, c0):
                    hint_text = "coordinate 2 counts strips of 64 columns: col0 // 64"
                elif cc is not None and cc[::-1] == (0, r0, c0 // 64):
                    hint_text = "coordinates go innermost first, like the dims"
                c.fail(f"wide_coords({r0}, {c0})", (0, r0, c0 // 64), cc, hint=hint_text)
            tmap = _encode(got, "BFLOAT16", "B128")
            img = np.asarray(tma.load_tile(tmap, memory, cc)).reshape(-1)
            c.array(f"{name} at row {r0}, column {c0}: one emulated load = {bc // 64} swizzled 64×64 images back to "
                    "back", img, _wide_image(a, r0, c0, br, bc))


RANK3_CHOICES = {
    "a": "nothing in the instruction: it needs a rank-3 map, (64, rows, cols/64) with strides (row bytes, 128); then "
         "{0, row, col/64} names column 0 of strip col/64 at that row",
    "b": "the driver pads a rank-2 map to rank 3 with a dimension of size 1, so the third coordinate is ignored",
    "c": "the coordinates are tile indices, so col/64 picks the column of 64-wide tiles",
    "d": "the 128B swizzle reads the third coordinate as a chunk offset inside the row",
}


def check_rank3(choice: Callable[[], str], seed: int | None = None) -> None:
    """The multiple choice: what makes a ``.3d`` load with ``{0, row, col/64}`` valid."""
    with grading.check("Lab 1 · the .3d load of a common write-up") as c:
        got = str(C.call(c, "rank3_fix()", choice)).strip().lower()
        if got not in RANK3_CHOICES:
            c.fail("an answer among a, b, c, d", "one of 'a', 'b', 'c', 'd'", got)
        why = {
            "b": "a tensor map's rank is fixed when it is encoded; the instruction's .3d must match it, nothing pads "
                 "it",
            "c": "TMA coordinates are element indices along each dimension of the map; a rank-2 map has no third one",
            "d": "the swizzle moves 16-byte chunks inside shared memory; it does not read coordinates",
        }
        c.equal("the explanation", got, "a", hint=why.get(got, ""))


# ---------------------------------------------------------------------------------------------------------
# Exercises 6-7: the TMA loads in inline PTX (rank 2 and rank 3)
# ---------------------------------------------------------------------------------------------------------
PROBE_COORDS = (4660, 22136, 13398)  # 0x1234, 0x5678, 0x3456: easy to trace in the PTX


def _probe(rank: int) -> str:
    coords = ", ".join(str(x) for x in PROBE_COORDS[:rank])
    return f"""
extern "C" __global__ void probe_tma(const __grid_constant__ CUtensorMap probe_map, int* out) {{
  __shared__ alignas(1024) unsigned char probe_tile[16384];
  __shared__ alignas(8) unsigned long long probe_bar;
  my_tma_load_{rank}d(probe_tile, &probe_map, &probe_bar, {coords});
  out[0] = probe_tile[threadIdx.x];
}}
"""


SELFTEST_TMA2 = r"""
// One block loads the 64x64 tile at (c0, c1) with my_tma_load_2d (no swizzle) and copies it out.
extern "C" __global__ void __launch_bounds__(128) selftest_tma(const __grid_constant__ CUtensorMap map,
                                                              const unsigned short* src, unsigned short* out,
                                                              int c0, int c1) {
  __shared__ alignas(1024) unsigned short tile[64 * 64];
  __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x == 0) {
    hopper::mbar_init(&bar, 1);
    hopper::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbar_arrive_expect_tx(&bar, sizeof(tile));
    my_tma_load_2d(tile, &map, &bar, c0, c1);
  }
  HOPPER_WAIT1(bar, 0);
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) out[i] = tile[i];
}
"""

SELFTEST_TMA3 = r"""
// One block loads a 64 x 128 box of a rank-3 map (128B swizzle) with my_tma_load_3d and copies the image out.
extern "C" __global__ void __launch_bounds__(128) selftest_tma3(const __grid_constant__ CUtensorMap map,
                                                               unsigned short* out, int row0, int strip0) {
  __shared__ alignas(1024) unsigned short tile[64 * 128];
  __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x == 0) {
    hopper::mbar_init(&bar, 1);
    hopper::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbar_arrive_expect_tx(&bar, sizeof(tile));
    my_tma_load_3d(tile, &map, &bar, 0, row0, strip0);
  }
  HOPPER_WAIT1(bar, 0);
  for (int i = threadIdx.x; i < 64 * 128; i += blockDim.x) out[i] = tile[i];
}
"""


def tma_slots(rank: int) -> list[Slot]:
    """The form of a TMA tensor load into shared memory, completing on an mbarrier (PTX ISA 8.0; .shared::cta
    as the destination from 8.6)."""
    return [Slot("dimension", (f"{rank}d",), f"the map and the load are rank {rank}"),
            Slot("destination state space", ("shared::cluster", "shared::cta"),
                 "the destination comes first: a load is .shared::cluster.global"),
            Slot("source state space", ("global",)),
            Slot("load mode", ("tile", None), "a tiled map is loaded in .tile mode"),
            Slot("completion mechanism", ("mbarrier::complete_tx::bytes",),
                 "the load reports its bytes to the mbarrier")]


def _tma_operands(c: grading.Check, ptx: str, ins: C.Instr, rank: int) -> None:
    m = re.fullmatch(r"\[\s*(%\w+)\s*\]\s*,\s*\[\s*(%\w+)\s*,\s*\{([^}]*)\}\s*\]\s*,\s*\[\s*(%\w+)\s*\]\s*",
                     ins.operands)
    c.true("operands: [dst], [tensorMap, {coordinates}], [mbar]", m is not None, detail=f"    got: {ins.line}",
           hint="the operand list is [%0], [%1, {%2, …}], [%N]: destination, then the map with the coordinates in "
                "braces, then the barrier")
    dst, tmap, coord_text, bar = m.groups()
    coords = [x.strip() for x in coord_text.split(",")]
    c.true(f"{rank} coordinates in the braces", len(coords) == rank, detail=f"    got: {ins.line}",
           hint=f"a .{rank}d load takes {rank} coordinates, innermost first")
    names = {"probe_tile": "the destination tile", "probe_bar": "the barrier", "probe_tma_param_0": "the tensor map"}
    names.update({str(v): f"c{i}" for i, v in enumerate(PROBE_COORDS[:rank])})

    def name(op: str) -> str:
        origin = C.resolve(ptx, op)
        return next((v for k, v in names.items() if origin.endswith(k) or origin == k), origin)

    got = {"[dst]": name(dst), "tensorMap": name(tmap)}
    got.update({f"coordinate {i}": name(x) for i, x in enumerate(coords)})
    got["[mbar]"] = name(bar)
    exp = {"[dst]": "the destination tile", "tensorMap": "the tensor map"}
    exp.update({f"coordinate {i}": f"c{i}" for i in range(rank)})
    exp["[mbar]"] = "the barrier"
    hint_text = "check the order of your %0 … operands against the constraint list"
    if [got[f"coordinate {i}"] for i in range(rank)] == [f"c{i}" for i in reversed(range(rank))]:
        hint_text = "the coordinates go innermost first: {c0, c1, …} = {column, row, …}"
    elif got["[dst]"] == "the barrier":
        hint_text = "the destination comes first and the barrier last"
    c.equal("each operand traced back to what the probe passed", got, exp, hint=hint_text)
    for op, what in ((dst, "destination"), (bar, "barrier")):
        if C.shared_address_of(ptx, op) is None:
            c.fail(f"the {what} is a generic pointer", detail=f"    got: {ins.line}",
                   hint="pass shared-memory addresses: static_cast<unsigned>(__cvta_generic_to_shared(p)) with an "
                        "\"r\" constraint")
    c.true("the tensor map's address is 64-bit", bool(re.fullmatch(r"%rd\d+", tmap)), detail=f"    got: {ins.line}",
           hint="the map is passed by its 64-bit generic address: an \"l\" constraint")
    c.ok("destination and barrier are shared-memory addresses; the map a 64-bit address")


def check_tma_load(source: str, rank: int = 2) -> None:
    """``my_tma_load_2d(dst, tmap, bar, c0, c1)`` or ``my_tma_load_3d(dst, tmap, bar, c0, c1, c2)`` in inline
    PTX. Where it can run, a self-test kernel loads a tile with it and the tile is the grade; the instruction's full
    form and its operands, read from a probe kernel's PTX, explain a wrong tile (and are the grade where it cannot
    run)."""
    with grading.check(f"Lab 1 · the TMA load, rank {rank}") as c:
        k = C.compile_student(HEADER + source + _probe(rank), "probe_tma", what=f"my_tma_load_{rank}d")
        c.ok("compiles for sm_90a")
        ex = C.Explanation(c)
        with ex:
            found = C.find_instrs(k.ptx, "cp.async.bulk", "probe_tma")
            held = "; ".join(i.opcode for i in C.inline_asm(k.ptx, "probe_tma")) or "nothing"
            c.true("one inline-asm cp.async.bulk instruction", len(found) == 1,
                   hint=f"my_tma_load_{rank}d issues exactly one cp.async.bulk.tensor.{rank}d … instruction (asm "
                        "volatile)", detail=f"    the inline asm held: {held}")
            ins = found[0]
            problem = form_problem(ins.opcode, "cp.async.bulk.tensor", tma_slots(rank))
            c.true(f"the full form: cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile"
                   ".mbarrier::complete_tx::bytes", problem is None, detail=f"    got: {ins.opcode}",
                   hint=problem or "")
            _tma_operands(c, k.ptx, ins, rank)
        if not ex.runnable(k, checked=f"the form and operands of my_tma_load_{rank}d in the PTX"):
            return
        with ex.run():
            _run_tma_selftest(c, source, rank)
        ex.settle()


def _run_tma_selftest(c: grading.Check, source: str, rank: int) -> None:
    """Rank 2: one 64×64 tile of a 256×320 matrix, unswizzled, at a random tile position off the origin and off the
    diagonal (so swapped or missing coordinates show). Rank 3: one 64×128 wide box of a 192×320 matrix under the 128B
    swizzle, off the origin. Bit for bit."""
    rng = grading.fresh_rng()
    if rank == 2:
        from helpers import gpu

        kk = C.compile_student(HEADER + source + SELFTEST_TMA2, "selftest_tma", what="the self-test kernel")
        a = rng.integers(0, 1 << 16, size=(256, 320), dtype=np.uint16)
        r0, c0 = (64 * int(x) for x in rng.choice(np.arange(1, 4), size=2, replace=False))  # swapped ones differ
        out = np.full(64 * 64, 0xFFFF, dtype=np.uint16)
        (_, got) = C.run(kk, 1, 128, 0, gpu.TensorMapArg(a, (64, 64), swizzle=0), a, out, np.int32(c0),
                         np.int32(r0), what="my_tma_load_2d")
        c.array(f"{C.where()}: your load of the 64×64 tile at row {r0}, column {c0} of a 256×320 matrix, bit for bit",
                got, a[r0:r0 + 64, c0:c0 + 64].reshape(-1),
                hint="the tile is not where the coordinates point, or not all of it landed: see the operands above")
        return
    a = rng.integers(0, 1 << 16, size=(192, 320), dtype=np.uint16)
    r0, s0 = int(rng.integers(1, 3)) * 64, int(rng.integers(1, 4))  # not at the origin: a coordinate left out shows
    got = C.run(wide_selftest, HEADER + source + SELFTEST_TMA3, a, r0, s0, what="my_tma_load_3d")
    import ml_dtypes

    exp = _wide_image(a.view(ml_dtypes.bfloat16), r0, 64 * s0, 64, 128).view(np.uint16)
    c.array(f"{C.where()}: your load of the 64×128 wide box at row {r0}, strip {s0} of a 192×320 matrix (rank-3 map, "
            "128B swizzle), its shared-memory image bit for bit", got, exp,
            hint="the box is not where the coordinates point, or not all of it landed: see the operands above")


def wide_selftest(source: str, a: np.ndarray, row0: int, strip0: int) -> np.ndarray:
    """(Runs in the isolated child.) Load a 64×128 box of a rank-3 map of ``a`` with the student's
    my_tma_load_3d; return the shared-memory image as uint16."""
    import ml_dtypes

    from helpers import gpu

    kernel = gpu.compile(source, "selftest_tma3")
    d = gpu.to_device(np.ascontiguousarray(a).view(ml_dtypes.bfloat16))
    rows, cols = a.shape
    tmap = gpu.encode_tiled(ml_dtypes.bfloat16, d.ptr, (64, rows, cols // 64), (cols * 2, 128), (64, 64, 2),
                            swizzle=128)
    out = gpu.to_device(np.full(64 * 128, 0xFFFF, np.uint16))
    gpu.launch(kernel, 1, 128, 0, tmap, out, np.int32(row0), np.int32(strip0))
    return out.to_host()


# ---------------------------------------------------------------------------------------------------------
# Exercise 8: the lab's kernel: copy a matrix tile by tile through swizzled shared memory
# ---------------------------------------------------------------------------------------------------------
KERNEL_NAME = "lab1_copy"


def check_copy_kernel(source: str, kernel: str | None = None) -> None:
    """The ``lab1_copy`` kernel: each block loads one 64×64 bf16 tile with the student's TMA load, waits on one
    mbarrier, and writes the tile to ``out`` unswizzled. Where it can run, a copy of a random matrix is the grade
    (the XOR of the read shows only there); the protocol read from its PTX explains a wrong copy. ``source`` is the
    whole compiled text; ``kernel`` the kernel's own part (for line numbers in messages)."""
    with grading.check("Lab 1 · copy tiles through shared memory") as c:
        full_source = HEADER + source
        k = C.compile_student(full_source, KERNEL_NAME, what=f"{KERNEL_NAME} (with your my_tma_load_2d)")
        c.ok("compiles for sm_90a")
        ex = C.Explanation(c)
        with ex:
            _copy_protocol(c, read_protocol(k.ptx, KERNEL_NAME, full_source, kernel))
        if not ex.runnable(k, checked="the bytes announced and the wait before the reads (the XOR of the read is "
                                     "checked when the kernel runs)"):
            return
        with ex.run():
            _run_copy(c, k)
        ex.settle()


def _copy_protocol(c: grading.Check, proto: Any) -> None:
    """The copy kernel's barrier protocol, read from every path of its PTX."""
    c.true("issues a TMA load of the tile", bool(proto.loads),
           hint="thread 0 calls my_tma_load_2d(tile, &src_map, &full, col0, row0)")
    announced = proto.bytes_announced()
    c.true("announces the tile's bytes on the barrier (expect_tx)", announced is None or announced > 0,
           hint="before the data can land, the barrier must know how many bytes to wait for: "
                "hopper::mbar_arrive_expect_tx(&full, bytes of one tile)")
    if announced is not None:
        c.equal("bytes the barrier expects per phase (read from the PTX)", announced, 8192,
                hint="one 64×64 bf16 tile is 64 × 64 × 2 = 8192 bytes: expect exactly what the TMA delivers")
    early = proto.arrive_before_bytes()
    if early is not None:
        c.fail("an arrival on the barrier before its bytes are announced", detail=f"    at {proto.where(early)}",
               hint="with count 1 that arrival completes the phase before the tile lands: announce the bytes "
                    "first, or in the same instruction (arrive.expect_tx)")
    read = proto.read_before_wait()
    if read is not None:
        c.fail("a thread can read the tile before waiting for it", detail=f"    the read at {proto.where(read)}",
               hint="every thread waits for phase 0 of the barrier (HOPPER_WAIT1(full, 0)) before its first read")
    c.ok("every read of the tile comes after the wait on the barrier")


def _run_copy(c: grading.Check, k: Any) -> None:
    """Copy a random matrix of 2-4 × 2-6 tiles through the kernel; out (poisoned first) must be it, bit for bit."""
    from helpers import gpu

    rng = grading.fresh_rng()
    rows, cols = int(rng.integers(2, 5)) * 64, int(rng.integers(2, 7)) * 64
    a = rng.integers(0, 1 << 16, size=(rows, cols), dtype=np.uint16)
    out = np.full((rows, cols), 0xFFFF, dtype=np.uint16)
    (_, got) = C.run(k, (cols // 64, rows // 64), 128, 0, gpu.TensorMapArg(a, (64, 64), swizzle=128), a, out,
                     np.int32(cols), what=KERNEL_NAME)
    still_swizzled = np.empty_like(a)
    for t in range(0, rows, 64):
        for u in range(0, cols, 64):
            img = swizzle_reference(a[t:t + 64, u:u + 64], "B128").view(np.uint16).reshape(64, 64)
            still_swizzled[t:t + 64, u:u + 64] = img
    hint_text = ""
    if np.array_equal(got, still_swizzled):
        hint_text = ("out holds the tiles as they sit in shared memory, still swizzled: element (r, c) is in chunk "
                     "(c / 8) ^ (r % 8) of row r")
    c.array(f"{C.where()}: a {rows}×{cols} bf16 matrix ({rows // 64}×{cols // 64} tiles) copied tile by tile into an "
            "output filled with 0xFFFF first, bit for bit", got, a, hint=hint_text)
