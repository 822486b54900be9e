"""Graders of Lab 1 (TMA): tensor-map arguments, tile coordinates, the swizzled shared-memory image, the
rules a map must obey, the TMA load wrapper in inline PTX, and a kernel that copies tiles through shared memory.

The Python exercises are graded against the emulator (``helpers.tensormap``, ``helpers.tma``) on fresh random
inputs. The CUDA exercises compile without a GPU (a stub's ``#error`` fails with its hint) and the PTX of a probe
kernel is read back: opcode, state spaces, and the operands traced to the distinctive values the probe passed.
With an H100 the kernels also run (``gpu.run_isolated``) into poisoned outputs, compared bit for bit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from helpers import grading
from helpers.checks import _common as C

__all__ = [
    "check_map_args",
    "check_tile_coords",
    "check_smem_image",
    "check_max_box",
    "check_diagnose",
    "check_tma_wrapper",
    "check_copy_kernel",
    "RULES",
]

HEADER = "#include <hopper.cuh>\n"
#: The data types the exercises draw from: tensormap.DataType name -> element size.
DTYPES = {"BFLOAT16": 2, "FLOAT16": 2, "FLOAT32": 4, "UINT8": 1}
SWIZZLES = ("NONE", "B32", "B64", "B128")
#: The rules a student's diagnose() names: the emulator's TensorMapError.rule ids.
RULES = ("address-alignment", "stride-alignment", "box-range", "box-inner-multiple-of-16", "box-inner-exceeds-swizzle")


def _dt(name: str) -> Any:
    from helpers import tensormap

    return tensormap.DataType[name]


def _random_matrix(rng: np.random.Generator, rows: int, cols: int, dtype: str) -> np.ndarray:
    """Random bytes viewed as ``dtype`` (every byte pattern, so a misplaced chunk shows; NaNs compare as bytes)."""
    from helpers import tensormap

    raw = rng.integers(0, 256, size=(rows, cols * DTYPES[dtype]), dtype=np.uint8)
    return raw.view(tensormap.numpy_dtype(_dt(dtype))).reshape(rows, cols)


def _encode(args: dict[str, Any], dtype: str, swizzle: str, address: int = 0x7F00_0000_0000) -> Any:
    from helpers import tensormap

    gd = tuple(int(x) for x in args["global_dim"])
    return tensormap.encode_tiled(
        _dt(dtype), len(gd), address, gd, tuple(args["global_strides"]), tuple(args["box_dim"]),
        tuple(args.get("element_strides", (1,) * len(gd))), tensormap.Interleave.NONE,
        tensormap.Swizzle[swizzle])


# ---------------------------------------------------------------------------------------------------------
# Exercise 1: the arguments of cuTensorMapEncodeTiled for a row-major matrix
# ---------------------------------------------------------------------------------------------------------
def _random_view(rng: np.random.Generator) -> tuple[np.ndarray, str, np.ndarray]:
    """A row-major matrix that is sometimes a column slice of a wider one (its row pitch is not cols × size)."""
    dtype = str(rng.choice(list(DTYPES)))
    item = DTYPES[dtype]
    rows = int(rng.integers(2, 40)) * 8
    cols = int(rng.integers(1, 24)) * 64 // item
    pad = int(rng.choice([0, 0, 1, 3])) * 16 // item
    big = _random_matrix(rng, rows, cols + pad, dtype)
    return big[:, :cols], dtype, big


def _map_args_expected(a: np.ndarray, box_rows: int, box_cols: int) -> dict[str, tuple[int, ...]]:
    return {"global_dim": (a.shape[1], a.shape[0]), "global_strides": (a.strides[0],),
            "box_dim": (box_cols, box_rows), "element_strides": (1, 1)}


def _as_tuple(x: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(v) for v in x)
    except (TypeError, ValueError):
        return None


def check_map_args(student: Callable[[np.ndarray, int, int], dict]) -> None:
    """``tensor_map_args(a, box_rows, box_cols)`` -> the dims/strides/box of a 2-D tiled tensor map."""
    rng = grading.fresh_rng()
    with grading.check("Lab 1 · tensor-map arguments", seed=rng.seed) as c:
        for trial in range(6):
            a, dtype, memory = _random_view(rng)
            item = DTYPES[dtype]
            box_rows = int(rng.choice([b for b in (8, 16, 32, 64) if b <= a.shape[0]]))
            box_cols = int(rng.choice([b for b in (16, 32, 64, 128) if b <= a.shape[1] * item])) // item
            got = grading.call_student(student, a, box_rows, box_cols, what="tensor_map_args")
            exp = _map_args_expected(a, box_rows, box_cols)
            name = f"{a.shape[0]}×{a.shape[1]} {dtype} (row pitch {a.strides[0]} B), box {box_rows}×{box_cols}"
            if not isinstance(got, dict):
                c.fail(f"{name}: a dict", "a dict with global_dim, global_strides, box_dim, element_strides",
                       type(got).__name__, hint="return {'global_dim': (...), 'global_strides': (...), ...}")
            for key in exp:
                g = _as_tuple(got.get(key)) if key in got else None
                if g is None:
                    c.fail(f"{name}: {key}", exp[key], got.get(key), hint=f"the dict needs a '{key}' entry of ints")
                e = exp[key]
                if g == e:
                    continue
                hint = ""
                if key in ("global_dim", "box_dim") and g == e[::-1]:
                    hint = "the driver lists dimensions innermost first: (columns, rows) for a row-major matrix"
                elif key == "global_strides" and len(g) == 2 and g[1:] == e:
                    hint = ("leave out the innermost stride: it is always the element size, so the driver takes "
                            "only the rank-1 strides of dimensions 1.. (the famous gmem_prob_stride + 1)")
                elif key == "global_strides" and g == (e[0] // item,):
                    hint = "strides are in bytes, not elements"
                elif key == "global_strides" and g == (a.shape[1] * item,):
                    hint = ("this matrix is a slice of a wider one: its rows are a.strides[0] bytes apart, not "
                            "columns × element size")
                c.fail(f"{name}: {key}", e, g, hint=hint)
            c.ok(f"{name}: {exp}")
            if trial == 0:
                _confirm_on_emulator(c, rng, a, memory, dtype, got, box_rows, box_cols)


def _confirm_on_emulator(c: grading.Check, rng: np.random.Generator, a: np.ndarray, memory: np.ndarray,
                         dtype: str, args: dict[str, Any], box_rows: int, box_cols: int) -> None:
    """Encode the student's arguments with the emulator and load one box from the matrix's memory: it must be
    the numpy slice, byte for byte."""
    from helpers import tma

    tmap = _encode(args, dtype, "NONE")
    r0 = int(rng.integers(0, a.shape[0] // box_rows)) * box_rows
    c0 = int(rng.integers(0, max(1, a.shape[1] // box_cols))) * box_cols
    got = np.asarray(tma.load_tile(tmap, memory, (c0, r0))).reshape(-1)
    exp = np.ascontiguousarray(a[r0:r0 + box_rows, c0:c0 + box_cols]).view(np.uint8).reshape(-1)
    c.array(f"your arguments, encoded by the emulator: the box at row {r0}, column {c0}", got, exp)


# ---------------------------------------------------------------------------------------------------------
# Exercise 2: which coordinates name a tile
# ---------------------------------------------------------------------------------------------------------
def check_tile_coords(student: Callable[[int, int, int, int], tuple[int, int]]) -> None:
    """``tile_coords(tile_row, tile_col, box_rows, box_cols)`` -> the (c0, c1) a TMA load takes."""
    rng = grading.fresh_rng()
    with grading.check("Lab 1 · tile coordinates", seed=rng.seed) as c:
        for _ in range(8):
            # rows ≠ cols and tile row ≠ tile column, so that each plausible mistake gives a different answer
            box_rows, box_cols = (int(x) for x in rng.choice([8, 16, 32, 64, 128], size=2, replace=False))
            tr, tc = (int(x) for x in rng.choice(np.arange(1, 60), size=2, replace=False))
            got = grading.call_student(student, tr, tc, box_rows, box_cols, what="tile_coords")
            exp = (tc * box_cols, tr * box_rows)
            g = _as_tuple(got)
            hint = ""
            if g == exp[::-1]:
                hint = "coordinates go innermost first, like the dims: (column, row)"
            elif g in ((tc, tr), (tr, tc)):
                hint = "coordinates are element indices, not tile indices: multiply by the box size"
            elif g == (tc * box_rows, tr * box_cols):
                hint = "the column coordinate steps by the box's width (box_cols), the row by its height"
            c.equal(f"tile ({tr}, {tc}) of {box_rows}×{box_cols} boxes", g, exp, hint=hint)
        _coords_on_emulator(c, rng, student)


def _coords_on_emulator(c: grading.Check, rng: np.random.Generator, student: Callable) -> None:
    from helpers import tensormap, tma

    rows, cols, br, bc = 256, 512, 64, 64
    a = _random_matrix(rng, rows, cols, "BFLOAT16")
    tmap = tensormap.for_matrix((rows, cols), tensormap.DataType.BFLOAT16, br, bc)
    tr, tc = int(rng.integers(0, rows // br)), int(rng.integers(0, cols // bc))
    coords = _as_tuple(grading.call_student(student, tr, tc, br, bc, what="tile_coords"))
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
    span = {"NONE": 0, "B32": 32, "B64": 64, "B128": 128}[swizzle]
    if not span:
        return raw.copy()
    o = np.arange(raw.size)
    dest = o ^ (((o >> 7) & (span // 16 - 1)) << 4)
    out = np.empty_like(raw)
    out[dest] = raw
    return out


def _emulated_image(box: np.ndarray, dtype: str, swizzle: str) -> np.ndarray:
    """What the emulator's TMA writes to shared memory when it loads the whole of ``box``."""
    from helpers import tensormap, tma

    rows, cols = box.shape
    tmap = tensormap.for_matrix((rows, cols), _dt(dtype), rows, cols, swizzle=tensormap.Swizzle[swizzle])
    return np.asarray(tma.load_tile(tmap, box, (0, 0))).view(np.uint8).reshape(-1)


def check_smem_image(student: Callable[[np.ndarray, str], np.ndarray]) -> None:
    """``smem_image(box, swizzle)`` -> the uint8 shared-memory image a TMA load of ``box`` writes."""
    rng = grading.fresh_rng()
    with grading.check("Lab 1 · swizzled shared-memory image", seed=rng.seed) as c:
        cases = [(s, str(rng.choice(list(DTYPES)))) for s in ("B128", "B64", "B32", "NONE", "B128", "B64")]
        for swizzle, dtype in cases:
            item = DTYPES[dtype]
            span = {"NONE": 64, "B32": 32, "B64": 64, "B128": 128}[swizzle]
            rows = int(rng.choice([8, 16, 24, 32, 64]))
            box = _random_matrix(rng, rows, span // item, dtype)
            exp = _emulated_image(box, dtype, swizzle)
            got = grading.call_student(student, box.copy(), swizzle, what="smem_image")
            got = np.asarray(got)
            if got.dtype != np.uint8:
                c.fail(f"{swizzle}, {rows}×{box.shape[1]} {dtype}: dtype", "uint8", str(got.dtype),
                       hint="return the bytes: arr.view(np.uint8)")
            got = got.reshape(-1)
            hint = "" if np.array_equal(got, exp) else _image_hint(got, box, swizzle)
            c.array(f"{swizzle}: {rows}×{box.shape[1]} {dtype} box ({box.nbytes} bytes)", got, exp, hint=hint)


def _image_hint(got: np.ndarray, box: np.ndarray, swizzle: str) -> str:
    raw = np.ascontiguousarray(box).view(np.uint8).reshape(-1)
    if got.size != raw.size:
        return "the image has exactly as many bytes as the box"
    if swizzle != "NONE" and np.array_equal(got, raw):
        return "this is the box unswizzled: the 16-byte chunks of each row move"
    if swizzle == "NONE":
        return "without swizzle the image is the box's bytes, row after row"
    span = {"B32": 32, "B64": 64, "B128": 128}[swizzle]
    chunks = span // 16
    per_row = raw.reshape(-1, span // 16, 16)
    rows = np.arange(per_row.shape[0])
    for guess, words in (
        (rows % 8, "XOR-ing the chunk with row % 8 is the 128B pattern"),
        (rows, "XOR-ing with the row index itself lets rows ≥ 8 wrap wrongly"),
        (rows % chunks, "XOR-ing with row % (chunks per row) is not the hardware's pattern"),
    ):
        idx = np.arange(chunks)[None, :] ^ guess[:, None]
        if (idx < chunks).all():
            alt = np.empty_like(per_row)
            alt[rows[:, None], idx] = per_row
            if np.array_equal(got, alt.reshape(-1)):
                return (f"{words}; the hardware XORs the chunk index with address bits 7.. of the byte offset: "
                        f"for {swizzle} that is " + {"B128": "row % 8", "B64": "(row // 2) % 4",
                                                     "B32": "(row // 4) % 2"}[swizzle])
    return ("chunk c of a row lands at chunk c XOR ((byte offset of the row >> 7) & (chunks per row - 1)); "
            "the bytes inside a chunk keep their order")


# ---------------------------------------------------------------------------------------------------------
# Exercise 4: the rules of a tensor map (the widest box, and why a map was refused)
# ---------------------------------------------------------------------------------------------------------
def check_max_box(student: Callable[[str, str], int]) -> None:
    """``max_box_cols(dtype, swizzle)`` -> the widest box (elements along dim 0) the driver accepts."""
    from helpers import tensormap

    with grading.check("Lab 1 · the widest box") as c:
        for dtype in ("BFLOAT16", "FLOAT32", "UINT8", "FLOAT64"):
            item = tensormap.element_size(tensormap.DataType[dtype])
            for swizzle in SWIZZLES:
                got = grading.call_student(student, dtype, swizzle, what="max_box_cols")
                widest = 0
                for n in range(1, 257):
                    try:
                        tensormap.encode_tiled(_dt(dtype), 2, 0, (4096, 64), (4096 * item,), (n, 8), (1, 1),
                                               tensormap.Interleave.NONE, tensormap.Swizzle[swizzle])
                        widest = n
                    except tensormap.TensorMapError:
                        pass
                hint = ""
                if isinstance(got, int | np.integer) and got == tensormap.swizzle_span(tensormap.Swizzle[swizzle]):
                    hint = "the swizzle span is in bytes; the box is counted in elements"
                elif swizzle == "NONE":
                    hint = "without swizzle only the box limit (256 elements per dimension) applies"
                else:
                    hint = f"a box row may be at most as wide as the swizzle span ({swizzle[1:]} bytes)"
                c.equal(f"{dtype} ({item} B) with swizzle {swizzle}", got, widest, hint=hint)


def _random_spec(rng: np.random.Generator, broken: str | None) -> dict[str, Any]:
    """A tensor-map spec that breaks exactly the rule ``broken`` (or none).

    ``broken="legal-16-bytes-not-16-elements"`` gives a legal map whose inner box row is 16 bytes but fewer than 16
    elements, which tells apart a 16-byte rule checked in bytes from one checked in elements.
    """
    if broken == "legal-16-bytes-not-16-elements":
        spec = _random_spec(rng, None)
        spec["dtype"] = str(rng.choice([d for d, size in DTYPES.items() if size >= 2]))
        item = DTYPES[spec["dtype"]]
        spec["global_strides"] = (spec["global_dim"][0] * item,)
        spec["box_dim"] = (16 // item, spec["box_dim"][1])
        return spec
    dtype = str(rng.choice(list(DTYPES)))
    item = DTYPES[dtype]
    swizzle = str(rng.choice(SWIZZLES[1:]))
    span = {"B32": 32, "B64": 64, "B128": 128}[swizzle]
    rows, cols = int(rng.integers(1, 64)) * 16, int(rng.integers(1, 64)) * 64
    inner = 16 * int(rng.integers(1, span // 16 + 1))  # bytes: a multiple of 16, at most the span
    spec = {"dtype": dtype, "global_address": int(rng.integers(1, 1 << 20)) * 256,
            "global_dim": (cols, rows), "global_strides": (cols * item,),
            "box_dim": (inner // item, int(rng.choice([8, 16, 64, 128, 256]))), "swizzle": swizzle}
    if broken == "address-alignment":
        spec["global_address"] += int(rng.choice([2, 4, 8, 12]))
    elif broken == "stride-alignment":
        spec["global_strides"] = (cols * item + int(rng.choice([2, 4, 8])),)
    elif broken == "box-range":
        spec["box_dim"] = (spec["box_dim"][0], int(rng.integers(257, 400)))
    elif broken == "box-inner-multiple-of-16":
        spec["swizzle"] = "NONE"
        spec["box_dim"] = ((16 * int(rng.integers(1, 8)) + 8) // item, spec["box_dim"][1])
    elif broken == "box-inner-exceeds-swizzle":
        spec["box_dim"] = (2 * span // item, spec["box_dim"][1])
    return spec


def _emulator_rule(spec: dict[str, Any]) -> str | None:
    from helpers import tensormap

    try:
        tensormap.encode_tiled(_dt(spec["dtype"]), 2, spec["global_address"], spec["global_dim"],
                               spec["global_strides"], spec["box_dim"], (1, 1), tensormap.Interleave.NONE,
                               tensormap.Swizzle[spec["swizzle"]])
    except tensormap.TensorMapError as exc:
        return exc.rule
    return None


def check_diagnose(student: Callable[[dict], str | None]) -> None:
    """``diagnose(spec)`` -> the rule the driver would refuse the map for (one of RULES), or None."""
    from helpers import tensormap

    rng = grading.fresh_rng()
    with grading.check("Lab 1 · why was the map refused?", seed=rng.seed) as c:
        targets: list[str | None] = [*RULES, *RULES, None, None, None, "legal-16-bytes-not-16-elements"]
        rng.shuffle(targets)  # type: ignore[arg-type]
        for target in targets:
            spec = _random_spec(rng, target)
            exp = _emulator_rule(spec)
            real = tensormap.encode_tiled

            def refuse(*_a: Any, **_k: Any) -> None:
                raise RuntimeError("diagnose() must reason from the rules, not call tensormap.encode_tiled")

            tensormap.encode_tiled = refuse
            try:
                got = grading.call_student(student, dict(spec), what="diagnose")
            except RuntimeError as exc:
                c.fail("diagnose() called the encoder", hint=str(exc))
            finally:
                tensormap.encode_tiled = real
            shown = ", ".join(f"{k}={v}" for k, v in spec.items() if k != "dtype") + f" ({spec['dtype']})"
            c.equal(f"{shown}", got, exp, hint=_rule_hint(exp))


def _rule_hint(rule: str | None) -> str:
    return {
        None: "every rule holds for this map: return None",
        "address-alignment": "the tensor's global address must be a multiple of 16 bytes",
        "stride-alignment": "every byte stride (global_strides) must be a multiple of 16",
        "box-range": "every box dimension holds 1 to 256 elements",
        "box-inner-multiple-of-16": "the box's inner row (box_dim[0] × element size) must be a multiple of 16 "
                                    "bytes; check it in bytes, not elements",
        "box-inner-exceeds-swizzle": "with a swizzle, the box's inner row (box_dim[0] × element size) may be at "
                                     "most the swizzle span (32, 64 or 128 bytes)",
    }.get(rule, "")


# ---------------------------------------------------------------------------------------------------------
# Exercise 5: the TMA load wrapper in inline PTX
# ---------------------------------------------------------------------------------------------------------
PROBE_TMA = r"""
extern "C" __global__ void probe_tma(const __grid_constant__ CUtensorMap probe_map, int* out) {
  __shared__ alignas(1024) unsigned char probe_tile[8192];
  __shared__ alignas(8) unsigned long long probe_bar;
  my_tma_load_2d(probe_tile, &probe_map, &probe_bar, 4660, 22136);
  out[0] = probe_tile[threadIdx.x];
}
"""
C0, C1 = 4660, 22136  # 0x1234, 0x5678: the probe's coordinates, easy to trace in the PTX

SELFTEST_TMA = r"""
// One block loads the 64x64 bf16 tile at (c0, c1) with my_tma_load_2d (no swizzle) and copies it out.
extern "C" __global__ void __launch_bounds__(128) selftest_tma(const __grid_constant__ CUtensorMap map,
                                                              const unsigned short* src, unsigned short* out,
                                                              int c0, int c1) {
  __shared__ alignas(128) unsigned short tile[64 * 64];
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


def _tma_operands(c: grading.Check, ptx: str, ins: C.Instr) -> None:
    m = re.fullmatch(r"\[\s*(%\w+)\s*\]\s*,\s*\[\s*(%\w+)\s*,\s*\{\s*(%\w+)\s*,\s*(%\w+)\s*\}\s*\]\s*,"
                     r"\s*\[\s*(%\w+)\s*\]\s*", ins.operands)
    c.true("operands: [dst], [tensorMap, {c0, c1}], [mbar]", m is not None, detail=f"    got: {ins.line}",
           hint="the operand list is [%0], [%1, {%2, %3}], [%4]: destination, then the map with the two "
                "coordinates in braces, then the barrier")
    dst, tmap, x, y, bar = m.groups()
    where = {"probe_tile": "the destination tile", "probe_bar": "the barrier", "probe_tma_param_0": "the tensor map",
             str(C0): "c0", str(C1): "c1"}

    def name(op: str) -> str:
        origin = C.resolve(ptx, op)
        return next((v for k, v in where.items() if origin.endswith(k) or origin == k), origin)

    got = {"[dst]": name(dst), "tensorMap": name(tmap), "{c0, …}": name(x), "{…, c1}": name(y), "[mbar]": name(bar)}
    exp = {"[dst]": "the destination tile", "tensorMap": "the tensor map", "{c0, …}": "c0", "{…, c1}": "c1",
           "[mbar]": "the barrier"}
    hint = "check the order of your %0 … %4 operands against the constraint list"
    if got["{c0, …}"] == "c1" and got["{…, c1}"] == "c0":
        hint = "the coordinates go innermost first: {c0, c1} = {column, row}"
    elif got["[dst]"] == "the barrier":
        hint = "the destination comes first and the barrier last"
    c.equal("each operand traced back to what the probe passed", got, exp, hint=hint)
    for op, what in ((dst, "destination"), (bar, "barrier")):
        if C.shared_address_of(ptx, op) is None:
            c.fail(f"the {what} is a generic pointer", detail=f"    got: {ins.line}",
                   hint="pass 32-bit shared-memory addresses: static_cast<unsigned>(__cvta_generic_to_shared(p)) "
                        "with an \"r\" constraint")
    c.ok("destination and barrier are shared-memory addresses; the map is a 64-bit address")


def check_tma_wrapper(source: str) -> None:
    """``my_tma_load_2d(dst, tmap, bar, c0, c1)`` in inline PTX."""
    from helpers import gpu

    with grading.check("Lab 1 · TMA load wrapper") as c:
        k = C.compile_student(HEADER + source + PROBE_TMA, "probe_tma", what="my_tma_load_2d")
        c.ok("compiles for sm_90a")
        found = C.find_instrs(k.ptx, "cp.async.bulk", "probe_tma")
        c.true("an inline-asm cp.async.bulk instruction", bool(found),
               hint="my_tma_load_2d needs asm volatile(\"cp.async.bulk.tensor.2d.shared::cluster.global.tile"
                    ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\" ...)",
               detail="    the inline asm held: " + ("; ".join(i.opcode for i in C.inline_asm(k.ptx, "probe_tma"))
                                                     or "nothing"))
        ins = found[0]
        parts = ins.parts
        c.true("a tensor copy (.tensor), two-dimensional (.2d)", "tensor" in parts and "2d" in parts,
               hint="cp.async.bulk.tensor.2d: the tensor form reads through the map, with 2 coordinates",
               detail=f"    got: {ins.opcode}")
        c.true("global → shared (.shared::cluster.global)",
               parts.index("shared::cluster") < parts.index("global") if
               {"shared::cluster", "global"} <= set(parts) else False,
               hint="the destination state space comes first: .shared::cluster.global (a TMA store is "
                    ".global.shared::cta)", detail=f"    got: {ins.opcode}")
        c.true("completes on an mbarrier (.mbarrier::complete_tx::bytes)", "mbarrier::complete_tx::bytes" in parts,
               hint="the load reports its bytes to the barrier: .mbarrier::complete_tx::bytes",
               detail=f"    got: {ins.opcode}")
        _tma_operands(c, k.ptx, ins)
        if gpu.skip_without_hopper(k, checked="the PTX of my_tma_load_2d"):
            return
        kk = C.compile_student(HEADER + source + SELFTEST_TMA, "selftest_tma", what="the self-test kernel")
        rng = grading.fresh_rng()
        a = rng.integers(0, 1 << 16, size=(256, 320), dtype=np.uint16)
        r0, c0 = int(rng.integers(0, 4)) * 64, int(rng.integers(0, 5)) * 64
        out = np.full(64 * 64, 0xFFFF, dtype=np.uint16)
        (_, got) = C.run_on_gpu(kk, 1, 128, 0, gpu.TensorMapArg(a, (64, 64), swizzle=0), a, out, np.int32(c0),
                                np.int32(r0), what="my_tma_load_2d")
        c.array(f"the 64×64 tile at row {r0}, column {c0}, loaded on the GPU", got,
                a[r0:r0 + 64, c0:c0 + 64].reshape(-1))


# ---------------------------------------------------------------------------------------------------------
# Exercise 6: a kernel that copies tiles through shared memory (128B swizzle)
# ---------------------------------------------------------------------------------------------------------
def check_copy_kernel(source: str) -> None:
    """The ``copy_tiles`` kernel: every 64×64 bf16 tile through swizzled shared memory into ``out``."""
    from helpers import gpu

    with grading.check("Lab 1 · copy tiles through shared memory") as c:
        k = C.compile_student(HEADER + source, "copy_tiles", what="copy_tiles (with your my_tma_load_2d)")
        c.ok("compiles for sm_90a")
        body = C.inline_asm(k.ptx, "copy_tiles")
        ops = [i.opcode for i in body]
        c.true("issues a TMA load (cp.async.bulk.tensor)", any(o.startswith("cp.async.bulk.tensor") for o in ops),
               hint="thread 0 calls my_tma_load_2d(tile, &src_map, &full, col0, row0)")
        c.true("announces the bytes (mbarrier.arrive.expect_tx)", any("expect_tx" in o for o in ops),
               hint="thread 0 calls hopper::mbar_arrive_expect_tx(&full, bytes of one tile) before the load")
        c.true("waits on the barrier (mbarrier.try_wait)", any(o.startswith("mbarrier.try_wait") for o in ops),
               hint="every thread waits with HOPPER_WAIT1(full, 0) before reading the tile")
        if gpu.skip_without_hopper(k, checked="it compiles and issues the TMA load, the expect-tx and the wait"):
            return
        rng = grading.fresh_rng()
        rows, cols = int(rng.integers(1, 5)) * 64, int(rng.integers(1, 7)) * 64
        a = rng.integers(0, 1 << 16, size=(rows, cols), dtype=np.uint16)
        out = np.full((rows, cols), 0xFFFF, dtype=np.uint16)
        (_, got) = C.run_on_gpu(k, (cols // 64, rows // 64), 128, 0, gpu.TensorMapArg(a, (64, 64), swizzle=128), a,
                                out, np.int32(cols), what="copy_tiles")
        unswizzled = np.empty_like(a)
        for t in range(0, rows, 64):
            for u in range(0, cols, 64):
                img = swizzle_reference(a[t:t + 64, u:u + 64], "B128").view(np.uint16).reshape(64, 64)
                unswizzled[t:t + 64, u:u + 64] = img
        hint = ""
        if np.array_equal(got, unswizzled):
            hint = ("out holds the tiles as they sit in shared memory, still swizzled: read element (r, c) from "
                    "chunk (c / 8) ^ (r % 8) of row r")
        c.array(f"a {rows}×{cols} bf16 matrix copied tile by tile on the GPU (bit for bit)", got, a, hint=hint)
