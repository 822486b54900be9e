"""Hopper's tensor-core types and the instructions around them on the executor: against the capture of
tools/h100/tensor_types.py (tests/data/tensor_types_h200.json + .npz, every case re-run here bit for bit), and,
until that capture is committed and beside it, against what the PTX ISA documents exactly (fragment layouts,
integer sums, data movement)."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import tensor_probes as tp

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
#: where the capture is read from: tests/data, or $TENSOR_TYPES_CAPTURE (a capture's $OUT, before committing it)
CAPTURE = Path(os.environ.get("TENSOR_TYPES_CAPTURE", DATA))
FIXTURE = CAPTURE / "tensor_types_h200.json"
ARRAYS = CAPTURE / "tensor_types_h200.npz"


# --------------------------------------------------------------------------------------------- the capture
@pytest.fixture(scope="module")
def capture() -> tuple[dict, dict]:
    if not (FIXTURE.exists() and ARRAYS.exists()):
        pytest.skip("no capture of the tensor-core types committed yet: run `bash tools/h100/run.sh tensor_types` on "
                    "a Hopper GPU and commit $OUT/tensor_types_h200.json and $OUT/tensor_types_h200.npz to tests/data/")
    doc = json.loads(FIXTURE.read_text())
    with np.load(ARRAYS) as z:
        arrays = {k: z[k] for k in z.files}
    return doc, arrays


def _run_section(capture: tuple[dict, dict], section: str) -> list[str]:
    sys.path.insert(0, str(ROOT / "tools" / "h100"))
    from tensor_types import run_case

    doc, arrays = capture
    if doc["source_sha256"].get(section) != __import__("hashlib").sha256(tp.SOURCES[section]().encode()).hexdigest():
        pytest.skip(f"the {section} probes changed since the capture: run the capture again")
    kernels = tp.kernels_of(tp.SOURCES[section]())
    bad = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rec in doc["cases"]:
            if rec["section"] != section or "error" in rec:
                continue
            if _refused(rec["kernel"]):  # a limit of the executor, said in words
                from helpers.gpu.errors import ExecutorLimit

                with pytest.raises(ExecutorLimit, match="the executor does not support"):
                    run_case(kernels, rec, arrays)
                continue
            got = run_case(kernels, rec, arrays)
            want = arrays[rec["out"]]
            if _approximate(rec["kernel"]):  # fp8 mma.sync: NaNs exact; ordinary sums within 1 ulp in 99% of results
                far = np.abs(_ordered(got, 32) - _ordered(want, 32)) > 1
                nan = np.isnan(got.view(np.float32)) | np.isnan(want.view(np.float32))
                if (nan & (got != want)).any() or (rec["kind"] != "cancel" and far.mean() > 0.01):
                    bad.append(f"{rec['kernel']} ({rec['kind']}): {int(far.sum())} of {far.size} beyond 1 ulp")
                continue
            if not np.array_equal(got, want):
                i = int(np.flatnonzero(got != want)[0])
                bad.append(f"{rec['kernel']} ({rec['kind']}): {int((got != want).sum())} of {want.size} words differ, "
                           f"first at {i}: executor {int(got[i]):#010x}, GPU {int(want[i]):#010x}")
    return bad


def _refused(kernel: str) -> bool:
    """Probes the executor refuses as its own limit: Volta's m8n8k4 .f16 mma into fp32."""
    return kernel.startswith("mma_m8n8k4_row_col_f32_f16")


def _approximate(kernel: str) -> bool:
    """Kernels whose sums the executor knows within a bound only (said once per run): mma.sync with fp8 inputs."""
    return kernel.startswith("mma") and ("e4m3" in kernel or "e5m2" in kernel)


def test_capture_comes_from_a_hopper_gpu(capture: tuple[dict, dict]) -> None:
    meta = capture[0]["meta"]
    assert meta["made_by"] == "tools/h100/tensor_types.py" and meta.get("compute_capability") == "9.0", meta
    assert all(v["rc"] == 0 for v in capture[0]["sections"].values()), capture[0]["sections"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("section", ["mma", "wmma", "ldmatrix", "cpasync"])
def test_section_is_bit_identical(capture: tuple[dict, dict], section: str) -> None:
    bad = _run_section(capture, section)
    assert not bad, "\n".join(bad[:30])


@pytest.mark.timeout(900)
def test_wgmma_is_bit_identical(capture: tuple[dict, dict]) -> None:
    bad = _run_section(capture, "wgmma")
    assert not bad, "\n".join(bad[:30])


def _sfu_outputs(fn: str, x: np.ndarray, quiet: bool = True) -> np.ndarray:
    from helpers import gpu

    k = tp.kernels_of(tp.sfu_source())["sfu_" + tp.sfu_name(fn)]
    dx, dy = gpu.to_device(np.ascontiguousarray(x, np.uint32)), gpu.empty((x.size,), np.uint32)
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        gpu.launch(k, 64, 256, 0, dx, dy, np.int32(x.size))
    return dy.to_host()


@pytest.mark.timeout(600)
def test_special_functions_against_the_capture(capture: tuple[dict, dict]) -> None:
    """Each approximation on the captured sample: bit-identical, or (until its algorithm is pinned down) within the
    bound the executor states; the count of differing inputs is reported."""
    doc, arrays = capture
    rec = next(c for c in doc["cases"] if c["id"] == "sfu")
    xs = tp.sample_inputs(arrays[rec["sample_starts"]])
    samples: dict[str, np.ndarray] = {}
    report: list[str] = []
    beyond: list[int] = []
    for fn, info in rec["functions"].items():
        if "table16" in info:
            x = np.arange(65536, dtype=np.uint32)
            want = arrays[info["table16"]].astype(np.uint32)
        else:
            x = xs
            if "sample" in info:
                want = tp.delta_decode(arrays[info["sample"]], tp.RUN)
            else:
                twin = samples[info["sample_vs"]["twin"]].copy()
                twin[arrays[info["sample_vs"]["index"]]] = arrays[info["sample_vs"]["value"]]
                want = twin
            samples[fn] = want
        keep = np.ones(x.size, bool) if x.size == 65536 else (np.arange(x.size) // tp.RUN) % 4 == 0  # every 4th run
        x, want = x[keep], want[keep]
        got = _sfu_outputs(fn, x)
        if fn.endswith(("bf16", "f16")):
            got &= 0xFFFF
        outside = _outside_bound(fn, x, got, want)
        beyond.append(int(outside.sum()))
        report.append(f"{fn}: {int((got != want).sum())} of {x.size} differ, {int(outside.sum())} beyond the stated "
                      "bound" + (f" (e.g. input {int(x[outside][0]):#010x}: executor {int(got[outside][0]):#x}, GPU "
                                 f"{int(want[outside][0]):#x})" if outside.any() else ""))
    print("\n".join(report))
    assert not any(beyond), "\n".join(report)


def _ordered(u: np.ndarray, bits: int) -> np.ndarray:
    """Bit patterns -> integers in the order of their values (for ulp distances)."""
    u = u.astype(np.int64)
    sign = 1 << (bits - 1)
    return np.where(u & sign, -(u & (sign - 1)), u)


def _outside_bound(fn: str, x: np.ndarray, got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where the executor's answer is further from the GPU's than the bound the executor states
    (helpers.gpu.executor.alu.SPECIAL_FNS): NaNs must agree bit for bit, finite answers within a few ulp (sin/cos
    within 2**-21 absolute for |x| <= pi and 2**-14.5 up to 100 pi, tanh within 2**-10 relative, lg2 within 2**-21
    absolute)."""
    bits = 16 if fn.endswith(("f16", "bf16")) else 32
    if bits == 16:
        ulps = np.abs(_ordered(got, 16) - _ordered(want, 16))
        nan_g = (got & 0x7FFF) > (0x7C00 if "f16" in fn and "bf16" not in fn else 0x7F80)
        nan_w = (want & 0x7FFF) > (0x7C00 if "f16" in fn and "bf16" not in fn else 0x7F80)
        return np.where(nan_g | nan_w, got != want, ulps > 2)
    g, w = got.view(np.float32).astype(np.float64), want.view(np.float32).astype(np.float64)
    nan = np.isnan(g) | np.isnan(w)
    ulps = np.abs(_ordered(got, 32) - _ordered(want, 32))
    ok = ulps <= 4
    with np.errstate(all="ignore"):
        diff = np.abs(g - w)
        xv = x.view(np.float32).astype(np.float64)
        if fn.startswith(("sin", "cos")):
            ok |= (diff <= 2.0 ** -21) | ((diff <= 2.0 ** -14.5) & (np.abs(xv) > np.pi)) | ~(np.abs(xv) <= 100 * np.pi)
        elif fn.startswith("tanh"):
            ok |= diff <= 2.0 ** -10 * np.abs(w)
        elif fn.startswith("lg2"):
            ok |= diff <= 2.0 ** -21
    return np.where(nan, got != want, ~ok)


# --------------------------------------------------------------------------------------------- without the capture
def test_the_bf16_wgmma_of_every_type_path_is_the_silicon_one() -> None:
    """The typed wgmma (every input type) gives the H100's bits on the bf16 captures of tools/h100/tma_wgmma.py."""
    from helpers.hopper import wgmma as wg

    checked = 0
    for name in ("wgmma", "wgmma_desc"):
        doc = json.loads((DATA / f"{name}.json").read_text())
        z = np.load(DATA / f"{name}.npz")

        def arr(key: str, z: np.lib.npyio.NpzFile = z) -> np.ndarray | None:
            if key in z:
                return z[key]
            return z[key + "_i16"].astype(np.float32) if key + "_i16" in z else None

        for c in doc["cases"]:
            hw = arr(f"out{c['index']}").astype(np.float32).view(np.uint32)
            cin = arr(f"cin{c['index']}")
            acc = None if cin is None else cin.astype(np.float32).view(np.uint32)
            out = wg.mma_async_typed(z[c["img"]], int(c["desc_a"]), int(c["desc_b"]), c["n"], acc, c["scale_d"],
                                     "bf16", "bf16", "f32")
            assert np.array_equal(out, hw), c
            checked += 1
    assert checked >= 30


MMA_GEMM = r"""
#include <cuda_bf16.h>
// An Ampere-style warp tile as public kernels write it: cp.async into shared memory, ldmatrix.x4 for A,
// ldmatrix.x2 for B, mma.sync m16n8k16, the fragment written back by each lane.
extern "C" __global__ void warp_mma(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                    float* __restrict__ C) {
  __shared__ __align__(128) __nv_bfloat16 sA[16 * 16], sB[8 * 16];
  const int lane = threadIdx.x;
  unsigned sa = (unsigned)__cvta_generic_to_shared(sA), sb = (unsigned)__cvta_generic_to_shared(sB);
  // 16x16 A (row-major) = 32 chunks of 16 bytes; 8x16 B (n-major: B^T rows) = 16 chunks
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(sa + lane * 16), "l"(A + lane * 8));
  if (lane < 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(sb + lane * 16), "l"(B + lane * 8));
  asm volatile("cp.async.commit_group;\n cp.async.wait_group 0;" ::: "memory");
  __syncwarp();
  unsigned a[4], b[2];
  unsigned pa = sa + ((lane % 16) * 16 + (lane / 16) * 8) * 2;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(pa));
  unsigned pb = sb + ((lane % 8) * 16 + ((lane / 8) % 2) * 8) * 2;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(b[0]), "=r"(b[1]) : "r"(pb));
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  int g = lane / 4, t = lane % 4;
  C[g * 8 + 2 * t] = d[0]; C[g * 8 + 2 * t + 1] = d[1];
  C[(g + 8) * 8 + 2 * t] = d[2]; C[(g + 8) * 8 + 2 * t + 1] = d[3];
}
"""


def test_ldmatrix_cp_async_and_mma_sync_make_a_warp_gemm() -> None:
    """cp.async, ldmatrix and mma.sync's documented fragments agree: the warp tile is A @ B^T exactly (integers)."""
    from helpers import gpu

    rng = np.random.default_rng(5)
    a = rng.integers(-4, 5, (16, 16)).astype(np.float32)
    b = rng.integers(-4, 5, (8, 16)).astype(np.float32)
    k = gpu.compile(MMA_GEMM, "warp_mma")
    dc = gpu.zeros((16, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpu.launch(k, 1, 32, 0, gpu.to_device(a, gpu.bfloat16), gpu.to_device(b, gpu.bfloat16), dc)
    assert np.array_equal(dc.to_host(), a @ b.T)


@pytest.mark.parametrize("shape", ["m16n8k16.row.col.f32.f16.f16.f32", "m16n8k8.row.col.f32.tf32.tf32.f32",
                                   "m16n8k32.row.col.f32.e4m3.e4m3.f32", "m16n8k32.row.col.s32.s8.s8.s32",
                                   "m16n8k16.row.col.f16.f16.f16.f16", "m8n8k4.row.col.f64.f64.f64.f64",
                                   "m16n8k256.row.col.s32.b1.b1.s32.xor.popc"])
def test_mma_sync_matches_the_documented_fragments(shape: str) -> None:
    """Small integers in every register of the probe: D = A B + C exactly, A, B and C assembled from the lanes'
    registers by the fragment maps of the PTX ISA (tensorcore.a_map / b_map / c_map)."""
    from helpers import gpu
    from helpers.hopper import tensorcore as tc

    m = next(x for x in tp.MMAS if x.ptx.endswith(shape))
    dty, aty, bty, cty = m.types
    if aty == "b1":
        dty, cty = "s32", "s32"
    mm, nn, kk = (int(v) for v in shape.split(".")[0][1:].replace("n", " ").replace("k", " ").split())
    rng = np.random.default_rng(7)
    mult = 2 if m.wide else 1
    rows = [np.concatenate([tp.typed_words("ints", aty, m.na * mult, rng),
                            tp.typed_words("ints", bty, m.nb * mult, rng),
                            tp.typed_words("ints", cty, m.nc * mult, rng)]) for _ in range(32)]
    words = np.stack(rows)
    k = tp.kernels_of(tp.mma_source())[m.name]
    out = gpu.zeros(32 * m.nc * mult, np.uint32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpu.launch(k, 1, 32, 0, gpu.to_device(words.ravel()), out)
    got = out.to_host().reshape(32, -1)
    regs = words.view(np.uint64) if m.wide else words
    na, nb = m.na, m.nb
    A = np.zeros((mm, kk))
    B = np.zeros((kk, nn))
    ra, ca = tc.a_map(mm, kk, aty, na)
    kb, nb_ = tc.b_map(kk, nn, bty, nb)
    A[ra, ca] = tc.decode(tc.unpack(regs[:, :na], aty), aty)
    B[kb, nb_] = tc.decode(tc.unpack(regs[:, na:na + nb], bty), bty)
    creg = regs[:, na + nb:]
    half = cty == "f16"
    cel = tc.unpack(creg, "f16").reshape(32, -1) if half else creg
    rc, cc = tc.c_map(mm, cel.shape[1])
    C = np.zeros((mm, nn))
    C[rc, cc] = tc.decode(cel, "f16" if half else cty)
    if aty == "b1":
        want = C + (A[:, :, None] != B[None, :, :]).sum(axis=1)
    else:
        want = A @ B + C
    g = got.view(np.uint64) if m.wide else got
    gel = tc.unpack(g, "f16").reshape(32, -1) if dty == "f16" else g
    D = np.zeros((mm, nn))
    D[rc, cc] = tc.decode(gel, "f16" if dty == "f16" else dty)
    assert np.array_equal(D, want)


def test_movmatrix_transposes() -> None:
    from helpers import gpu

    v = np.arange(32, dtype=np.uint32) * 0x00020002 + 0x00010000  # lane l: elements 2l (low), 2l+1 (high)
    k = tp.kernels_of(tp.ldmatrix_source())["movm"]
    out = gpu.zeros(32, np.uint32)
    gpu.launch(k, 1, 32, 0, gpu.to_device(v), out)
    got = out.to_host()
    mat = np.empty((8, 8), np.uint32)
    lane = np.arange(32)
    mat[lane // 4, 2 * (lane % 4)] = v & 0xFFFF
    mat[lane // 4, 2 * (lane % 4) + 1] = v >> 16
    t = mat.T
    assert np.array_equal(got, t[lane // 4, 2 * (lane % 4)] | (t[lane // 4, 2 * (lane % 4) + 1] << 16))


def test_cp_async_copies_zero_fills_and_waits() -> None:
    from helpers import gpu

    src = np.random.default_rng(9).integers(0, 1 << 32, 1024, dtype=np.uint64).astype(np.uint32)
    k = tp.kernels_of(tp.CPASYNC_SOURCE)["cpasync_probe"]
    out = gpu.zeros(1504, np.uint32)
    gpu.launch(k, 1, 32, 0, gpu.to_device(src), out)
    o = out.to_host()
    sm, s8 = o[480:].view(np.uint8), src.view(np.uint8)
    assert np.array_equal(sm[:384], s8[:384]) and np.array_equal(sm[512:1024], s8[512:1024])
    assert np.array_equal(sm[1536:2048], s8[1536:2048])
    for lane in range(32):
        n = lane % 17
        seg = sm[1024 + 16 * lane:1040 + 16 * lane]
        assert np.array_equal(seg[:n], s8[1024 + 16 * lane:1024 + 16 * lane + n]) and not seg[n:].any()
        seg = sm[2048 + 16 * lane:2064 + 16 * lane]
        assert not seg.any() if lane & 1 else np.array_equal(seg, s8[2048 + 16 * lane:2064 + 16 * lane])
    assert (sm[384:512] == 0xEE).all()
    assert np.array_equal(o[:96].view(np.uint8), sm[:384]) and np.array_equal(o[96:480].view(np.uint8), sm[512:2048])


def test_special_functions_say_once_per_run_that_they_are_approximate() -> None:
    from helpers.gpu.executor.errors import ApproximationWarning

    x = np.array([0.0, 1.0, -1.5, 10.25, -126.5, -150.0, np.inf, -np.inf, np.nan], np.float32)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y = _sfu_outputs("ex2.approx.ftz.f32", x.view(np.uint32), quiet=False).view(np.float32)
        _sfu_outputs("ex2.approx.ftz.f32", x.view(np.uint32), quiet=False)
    said = [str(m.message) for m in w if issubclass(m.category, ApproximationWarning)]
    assert len(said) == 2 and "ex2.approx.ftz.f32" in said[0] and "can differ from the GPU's" in said[0]
    assert all(m.filename == __file__ for m in w)  # it points at the line that launched
    want = np.exp2(x.astype(np.float64)).astype(np.float32)
    want[4:6] = 0.0  # .ftz: a subnormal result flushes
    assert np.array_equal(y[:8], want[:8]) and y.view(np.uint32)[8] == 0x7FFFFFFF
