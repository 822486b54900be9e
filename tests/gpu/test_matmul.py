"""``gpu.matmul``: the course's final kernel as one function, any M, N, K. Without a GPU it runs on the PTX
executor (tiny shapes, every edge case); with one (``pytest -m gpu``) against ``torch.matmul``."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import gpu
from helpers.gpu import gemm as mm  # noqa: E402 - gpu.matmul, the function, lives here
from helpers.hopper import parts

# shapes whose every dimension misses the tile (128 or 256 rows, 256 columns, 64-deep K steps) and 8
#: the H100 SXM's resident pairs of blocks, which the choice rule's thresholds were measured on
SXM = parts.PROFILES["h100-sxm"].resident(2)
EDGES = [(37, 45, 29), (130, 270, 70), (1, 9, 3)]


def _ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(gpu.bfloat16).astype(np.float64) @ b.astype(gpu.bfloat16).astype(np.float64)


@pytest.fixture(autouse=True)
def _emulator_unless_gpu(monkeypatch):
    if not gpu.hopper_available():
        monkeypatch.setenv("HELPERS_EXECUTOR", "force")


@pytest.mark.parametrize(("style", "bn"), [("lab7", 256), ("lab9", 256), ("lab9", 128)])
@pytest.mark.parametrize("shape", EDGES)
def test_numpy_bf16_any_shape_with_the_course_kernels(style, bn, shape):
    m, n, k = shape
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(gpu.bfloat16)
    b = rng.standard_normal((k, n)).astype(gpu.bfloat16)
    c = mm.matmul(a, b, kernel=mm.course_kernel(style, bn))
    assert c.shape == (m, n) and c.dtype == gpu.bfloat16
    gpu.check_gemm(c, _ref(a, b), k)


def test_numpy_float32_comes_back_float32_and_writes_out():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((24, 17)).astype(np.float32)
    out = np.full((40, 17), np.nan, np.float32)
    c = mm.matmul(a, b, out=out)
    assert c is out and c.dtype == np.float32
    gpu.check_gemm(c.astype(gpu.bfloat16), _ref(a, b), 24)
    assert (c != c.astype(gpu.bfloat16).astype(np.float32)).any()  # fp32 C: the accumulators, not rounded to bf16
    assert np.abs(c - _ref(a, b)).max() < 1e-4 * np.abs(_ref(a, b)).max()


def test_device_arrays_go_through_the_pack_and_unpack_kernels():
    """fp32 DeviceArrays: A and B packed to bf16 (B transposed), C through a padded buffer (N = 45)."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((37, 29)).astype(np.float32), rng.standard_normal((29, 45)).astype(np.float32)
    c = mm.matmul(gpu.to_device(a), gpu.to_device(b))
    assert isinstance(c, gpu.DeviceArray) and c.shape == (37, 45) and c.dtype == np.float32
    gpu.check_gemm(c.to_host().astype(gpu.bfloat16), _ref(a, b), 29)


def test_a_weight_passed_transposed_is_read_in_place():
    """x @ w.T with w (N×K, bf16, rows 16-byte aligned): B is used where it lies, nothing copied."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((70, 64)).astype(gpu.bfloat16), rng.standard_normal((48, 64)).astype(gpu.bfloat16)
    dx, dw = gpu.to_device(x), gpu.to_device(w)
    wt = mm.Matrix(dw.ptr, (64, 48), (2, 128), gpu.bfloat16, dw)
    packed = []
    real_pack = mm._pack
    mm._pack = lambda *args: packed.append(args) or real_pack(*args)
    try:
        c = mm.matmul(dx, wt)
    finally:
        mm._pack = real_pack
    assert packed == []
    gpu.check_gemm(c.to_host(), x.astype(np.float64) @ w.astype(np.float64).T, 64)


def test_empty_dimensions():
    a, b = np.ones((3, 0), gpu.bfloat16), np.ones((0, 5), gpu.bfloat16)
    assert (mm.matmul(a, b).astype(np.float32) == 0).all()
    assert mm.matmul(np.ones((0, 4), np.float32), np.ones((4, 2), np.float32)).shape == (0, 2)


def test_mistakes_are_refused_in_words():
    a = np.ones((4, 3), gpu.bfloat16)
    with pytest.raises(ValueError, match="columns must match"):
        mm.matmul(a, np.ones((4, 3), gpu.bfloat16))
    with pytest.raises(TypeError, match="same dtype"):
        mm.matmul(a, np.ones((3, 2), np.float32))
    with pytest.raises(TypeError, match="bf16, fp16 or fp32"):
        mm.matmul(np.ones((4, 3), np.int32), np.ones((3, 2), np.int32))
    k = gpu.compile('extern "C" __global__ void three(float* a, int n, int m) { a[0] = n + m; }', "three")
    with pytest.raises(TypeError, match="Lab 7's six"):
        mm.matmul(a, np.ones((3, 2), gpu.bfloat16), kernel=k)


def test_kernel_styles_are_read_from_the_parameters():
    assert mm.kernel_style(mm.course_kernel("lab7")) == "lab7"
    assert mm.kernel_style(mm.course_kernel("lab9")) == "lab9"


@pytest.mark.parametrize(("shape", "style"), [
    ((4096, 4096, 4096), "lab7"),      # 256 pairs, waves 97 % full
    ((8192, 4096, 8192), "lab7"),      # 512 pairs, 97 %
    ((1024, 1024, 16384), "lab9"),     # 16 pairs on 66 clusters
    ((1024, 4352, 8192), "lab9"),      # 68 pairs: a second wave of 2
])
def test_streamk_where_the_last_wave_is_mostly_empty(shape, style):
    choice = mm.choose(*shape, clusters=SXM)
    assert choice.kernel == style and choice.streamk == (style == "lab9")


#: bench/shapes.py's shape set → what choose picks on the H100's 66 clusters (Choice.name)
SHAPE_SET_CHOICES = {
    (2048, 2048, 2048): "lab7",           # 64 wide pairs: 128 would not fit in one wave; 0.97 full
    (4096, 4096, 4096): "lab7",           # 256 pairs: a last wave of 58 (0.88): whole pairs
    (8192, 8192, 8192): "lab9",           # 1024 pairs: 15 full waves and a last one of 34 (0.52): Stream-K
    (16384, 16384, 8192): "lab9",         # 4096 pairs: 62 full waves and a last one of 4
    (512, 4096, 4096): "lab7-128",        # 32 wide pairs, 64 narrow ones fit in one wave (0.97): one cluster each
    (512, 1024, 4096): "lab9-128",        # 8 wide, 16 narrow pairs (0.24 full): Stream-K
    (512, 14336, 4096): "lab7",           # 112 wide pairs: two waves, 0.85 full: whole pairs (Stream-K lost there)
    (512, 4096, 14336): "lab7-128",
    (2048, 4096, 4096): "lab7",
    (2048, 1024, 4096): "lab7-128",       # 32 wide, 64 narrow pairs
    (2048, 14336, 4096): "lab7",
    (2048, 4096, 14336): "lab7",
    (8192, 4096, 4096): "lab7",
    (8192, 1024, 4096): "lab7",
    (8192, 14336, 4096): "lab9",          # 1792 pairs: a last wave of 10
    (8192, 4096, 14336): "lab7",
    (1024, 1024, 16384): "lab9-128",      # 16 wide, 32 narrow pairs (0.48)
    (1024, 4352, 8192): "lab9",           # 68 wide pairs: more than one wave, so wide
    (4352, 2048, 8192): "lab9",
}


@pytest.mark.parametrize(("mnk", "last", "name"), [
    ((3072, 3072, 3072), 0.18, "lab9"),      # 144 pairs: 2 full waves and 12
    ((5120, 5120, 5120), 0.06, "lab9"),      # 400 pairs: 6 full waves and 4
    ((8192, 8192, 4096), 0.52, "lab9"),      # 1024 pairs: the last wave about half full
    ((6144, 6144, 6144), 0.73, "lab7"),      # 576 pairs: a last wave of 48
    ((12288, 12288, 12288), 0.91, "lab7"),   # 2304 pairs: a last wave of 60
])
def test_streamk_where_the_last_wave_keeps_at_most_055_of_the_clusters_busy(mnk, last, name):
    assert mm.last_wave(*mnk[:2], clusters=SXM) == pytest.approx(last, abs=0.005)
    assert mm.choose(*mnk, clusters=SXM).name == name


@pytest.mark.parametrize(("mnk", "saved", "name"), [
    ((8192, 8192, 8192), 62, "lab9"),        # the last wave leaves 48 % of the clusters idle for 128 K steps
    ((2560, 4096, 4096), 37, "lab9"),
    ((1024, 4352, 2048), 31, "lab9"),        # 68 pairs: a second wave of 2, 32 K steps
    ((1024, 4352, 1024), 15.5, "lab9"),      # 16 K steps: Stream-K still won (1.10×)
    ((3072, 3072, 1024), 13, "lab7"),        # the waves of 3072³ with a third of the K steps: Stream-K lost (0.98×)
    ((4352, 4352, 256), 2, "lab7"),          # 4 K steps: the fix-ups would cost more than the whole last wave
])
def test_streamk_only_where_the_idle_time_it_saves_is_worth_14_k_steps(mnk, saved, name):
    assert mm.saved_steps(*mnk, clusters=SXM) == pytest.approx(saved, abs=0.5)
    assert mm.choose(*mnk, clusters=SXM).name == name


def test_the_choice_on_the_shape_set():
    import sys

    sys.path.insert(0, str(mm.KERNELS_DIR.parent))
    import shapes

    assert {s for _, _, s in shapes.SHAPES} == set(SHAPE_SET_CHOICES)
    for shape, name in SHAPE_SET_CHOICES.items():
        choice = mm.choose(*shape, clusters=SXM)
        assert choice.name == name, (shape, choice)
        assert (choice.kernel, choice.bn) in (("lab7", 256), ("lab9", 256), ("lab9", 128), ("lab7", 128))
        assert choice.streamk == (name in ("lab9", "lab9-128"))
    assert set(shapes.SMALL) >= {n for n, _, s in shapes.SHAPES if mm.choose(*s, clusters=SXM).bn == mm.NARROW}


@pytest.mark.parametrize(("mn", "clusters", "name"), [
    ((768, 2816), 66, "lab7-128"),        # 3 × 11 = 33 wide pairs: twice as many, 66, just fit in one wave
    ((768, 3072), 66, "lab9"),            # 3 × 12 = 36: 72 narrow ones would not fit; 0.55 full: Stream-K, wide
    ((256, 100), 66, "lab9-128"),         # N below 128: as many pairs either way, narrow ones waste less
    ((512, 4096), 16, "lab7"),            # on 16 clusters 32 wide pairs are two full waves
    ((512, 4096), 40, "lab7"),            # on 40: 32 wide pairs would not fit twice; 0.8 full: whole pairs
    ((512, 4096), 48, "lab9"),            # on 48: 0.67 full: Stream-K
])
def test_narrow_tiles_exactly_when_twice_the_pairs_fit_in_one_wave(mn, clusters, name):
    """K = 8192: 128 K steps a pair, long enough for Stream-K wherever the waves leave clusters idle."""
    assert mm.choose(*mn, 8192, clusters=clusters).name == name


@pytest.mark.parametrize(("count", "steps", "active", "launched"), [
    (32, 256, 66, 64),   # 1024×1024×16384, narrow: each pair in two on 64 of 66 clusters
    (16, 64, 66, 64),    # 512×1024×4096, narrow: in four
    (20, 64, 66, 66),    # three each would use 60 of 66 (91 %), but 64 K steps do not split in three: all 66
    (21, 63, 66, 63),    # three each: 63 of 66, 21 K steps each
    (22, 64, 66, 66),    # three each would be 66, but 64 K steps do not split in three
    (16, 64, 50, 50),    # three each: 48 of 50, but 64 is not a multiple of 3
    (16, 64, 70, 64),    # four each: 64 of 70 (91 %)
    (16, 64, 75, 75),    # four each: 64 of 75 (85 %): Stream-K on all of them
    (34, 128, 66, 66),   # more than half as many pairs as clusters: Stream-K on all
    (68, 128, 66, 66),
])
def test_stream_k_splits_pairs_evenly_where_that_keeps_the_clusters_busy(count, steps, active, launched):
    assert mm.streamk_clusters(count, steps, active) == launched


def test_the_stream_k_launch_takes_the_even_split():
    """1024×1024×16384 on the H100's 66 clusters: 32 narrow pairs, Stream-K on 64 clusters (128 blocks)."""
    kern = mm.course_kernel("lab9", 128)
    a, b = gpu.zeros((1024, 16384), gpu.bfloat16), gpu.zeros((1024, 16384), gpu.bfloat16)
    c = gpu.zeros((1024, 1024), gpu.bfloat16)
    assert mm.launcher(kern, a, b, c, clusters=66).grid[0] == 128
    assert mm.launcher(kern, a, b, c, clusters=66, streamk=False).grid[0] == 64


def test_host_stages_and_shared_memory_are_the_kernels():
    """gemm.stages(bn) against the kernel's own STAGES, at both widths (a static_assert that NVRTC checks)."""
    src = (mm.KERNELS_DIR / "lab9_streamk.cu").read_text()
    assert [mm.stages(bn) for bn in (256, 128, 64, 32, 16)] == [4, 6, 8, 10, 12]
    assert mm.smem_bytes(256) == mm.SMEM_BYTES and mm.smem_bytes(128) == 6 * 32 * 1024 + 32 * 1024 + 1024
    assert mm.smem_bytes(16) == 12 * 18 * 1024 + 2 * 2 * 64 * 16 * 2 + 1024 <= 227 * 1024
    assert mm.stages(16, 4) == 11 and mm.stages(256, 4) == 4 and mm.smem_bytes(256, 4) == mm.SMEM_BYTES
    for bn in (256, 128, 64, 32, 16):
        for out in (2, 4):
            probe = src + (f'\nstatic_assert(lab9::STAGES == {mm.stages(bn, out)} && lab9::BN == {bn} && lab9::SUB == '
                           f'{mm.store_width(bn, out)} && lab9::OUT == {out}, "host and kernel");\n')
            gpu.compile(probe, "lab9_gemm", options=(f"-DLAB9_BN={bn}", f"-DLAB9_OUT_F32={int(out == 4)}"))
    with pytest.raises(gpu.CompileError, match="LAB9_BN is 256, 128, 64, 32 or 16"):
        gpu.compile(src, "lab9_gemm", options=("-DLAB9_BN=48",))


def test_tile_width_is_read_from_the_kernel():
    assert mm.tile_width(mm.course_kernel("lab9")) == 256 and mm.tile_width(mm.course_kernel("lab9", 128)) == 128
    src = "#define LAB9_BN 128\n" + (mm.KERNELS_DIR / "lab9_streamk.cu").read_text()
    assert mm.tile_width(gpu.compile(src, "lab9_gemm")) == 128
    assert mm.tile_width(mm.course_kernel("lab7", 128)) == 128 and mm.tile_width(mm.course_kernel("lab7")) == 256
    assert mm.kernel_options("lab7", 128) == ("-DLAB7_PRODUCER_TAIL=1", "-DLAB7_BN=128")
    with pytest.raises(ValueError, match="128"):
        mm.course_kernel("lab7", 64)


def test_whole_pairs_launch_on_as_few_clusters_as_their_waves_need():
    """Lab 9 with streamk=False: 4 narrow pairs on 8 clusters run on 4, on 3 clusters (two waves) on 2; Stream-K on
    every cluster."""
    kern = mm.course_kernel("lab9", 128)
    a, b = gpu.zeros((300, 64), gpu.bfloat16), gpu.zeros((200, 64), gpu.bfloat16)
    c = gpu.zeros((300, 200), gpu.bfloat16)
    grid = {(clusters, streamk): mm.launcher(kern, a, b, c, clusters=clusters, streamk=streamk).grid[0]
            for clusters in (8, 3) for streamk in (True, False)}
    assert grid == {(8, True): 16, (8, False): 8, (3, True): 6, (3, False): 4}


@pytest.mark.parametrize(("shape", "launched"), [((130, 72, 1600), ("lab9", 128, True)),
                                                 ((300, 200, 100), ("lab7", 128, False)),
                                                 ((1, 9, 3), ("lab9", 16, True))])
def test_matmul_runs_the_choice(shape, launched, monkeypatch):
    """matmul launches what choose picks and gets the product right: 128×128 tiles, Stream-K where one pair's 25 K
    steps are worth splitting, whole pairs where K is a step or two."""
    seen = []
    real = mm.launcher
    monkeypatch.setattr(mm, "launcher", lambda kern, *args, streamk=True: seen.append(
        (mm.kernel_style(kern), mm.tile_width(kern), streamk)) or real(kern, *args, streamk=streamk))
    m, n, k = shape
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((m, k)).astype(gpu.bfloat16), rng.standard_normal((k, n)).astype(gpu.bfloat16)
    c = mm.matmul(a, b)
    assert seen == [launched] and mm.choose(m, n, k)[:3] == launched
    gpu.check_gemm(c, _ref(a, b), k)


# ------------------------------------------------------------------------------------------------ small M: A and B swap
@pytest.mark.parametrize(("mn", "swapped"), [((1, 4096), True), ((128, 4096), True), ((129, 4096), False),
                                             ((64, 64), False), ((16, 8), False), ((256, 14336), False)])
def test_a_and_b_swap_where_m_is_small_and_n_larger(mn, swapped):
    assert mm.swaps(*mn) == swapped


@pytest.mark.parametrize(("n", "bn"), [(1, 16), (16, 16), (17, 32), (33, 64), (64, 64), (65, 128), (128, 128),
                                       (129, None)])
def test_the_narrowest_tile_that_holds_c(n, bn):
    assert mm.skinny_width(n) == bn


@pytest.mark.parametrize(("mnk", "name"), [
    ((1, 4096, 4096), "lab9-16-swapAB"),        # decode: 16 pairs of 256 × 16 on 66 clusters: split-K
    ((8, 14336, 4096), "lab9-16-swapAB"),
    ((17, 1024, 1024), "lab9-32-swapAB"),       # 4 pairs, 16 K steps: split-K all the same (memory-bound)
    ((64, 16384, 16384), "lab9-64-swapAB"),
    ((128, 4096, 4096), "lab9-128-swapAB"),     # 16 pairs of 256 × 128: Stream-K (the waves' rule)
    ((128, 65536, 4096), "lab7-128-swapAB"),    # 256 narrow pairs, nearly full waves: whole pairs
    ((4096, 16, 4096), "lab9-16"),              # N small already: narrow tiles, no swap
    ((256, 4096, 4096), "lab9-128"),            # M = 256 fills a pair's rows: the rule as before
])
def test_the_choice_for_small_m(mnk, name):
    assert mm.choose(*mnk, clusters=SXM).name == name


@pytest.mark.parametrize("bn", [64, 32, 16])
def test_narrow_tiles_run_lab9_at_odd_shapes(bn):
    """Lab 9 at 128×64, 128×32 and 128×16 tiles, N not a multiple of the tile, Stream-K splits on 2 clusters."""
    m, n, k = 150, bn + 3, 200
    rng = np.random.default_rng(bn)
    a = rng.standard_normal((m, k)).astype(gpu.bfloat16)
    b = rng.standard_normal((k, n)).astype(gpu.bfloat16)
    c = mm.matmul(a, b, kernel=mm.course_kernel("lab9", bn))
    gpu.check_gemm(c, _ref(a, b), k)


@pytest.mark.parametrize("shape", [(1, 150, 70), (8, 200, 130), (17, 131, 100)])
def test_swapped_launches_give_the_product(shape):
    """M = 1, 8, 17 against odd N and K: matmul computes Cᵀ = B·Aᵀ on 128×16 or 128×32 tiles and writes C back
    transposed; every element against fp64, on numpy arrays and on fp32 device arrays (both copies of C: the
    transposing one, and a strided out)."""
    m, n, k = shape
    assert mm.choose(m, n, k).swapped
    rng = np.random.default_rng(m * n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ref = _ref(a, b)
    gpu.check_gemm(mm.matmul(a.astype(gpu.bfloat16), b.astype(gpu.bfloat16)), ref, k)
    out = gpu.zeros((n, m), np.float32)  # C written into a column-major view
    p = mm.plan(gpu.to_device(a), gpu.to_device(b), out=mm.Matrix(out.ptr, (m, n), (4, 4 * m), np.dtype(np.float32),
                                                                   out))
    assert p.choice is not None and p.choice.swapped
    p()
    gpu.check_gemm(out.to_host().T.astype(gpu.bfloat16), ref, k)


@pytest.mark.parametrize(("style", "bn"), [("lab7", 256), ("lab7", 128), ("lab9", 256), ("lab9", 128), ("lab9", 64),
                                           ("lab9", 32), ("lab9", 16)])
def test_fp32_c_is_the_accumulators_the_bf16_build_rounds(style, bn):
    """The OUT_F32 build stores the fp32 accumulators; the default build, the same accumulators rounded to bf16:
    bit for bit, at an odd shape (partial tiles, Stream-K splits on Lab 9's two emulated clusters)."""
    m, n, k = 150, 40 + bn // 2 + 3, 200
    rng = np.random.default_rng(bn)
    a = gpu.to_device(rng.standard_normal((m, k)).astype(gpu.bfloat16))
    b = gpu.to_device(rng.standard_normal((n, k)).astype(gpu.bfloat16))
    c16, c32 = gpu.zeros((m, n + 5), gpu.bfloat16), gpu.zeros((m, n + 1), np.float32)
    v16 = mm.Matrix(c16.ptr, (m, n), c16.strides, gpu.bfloat16, c16)
    v32 = mm.Matrix(c32.ptr, (m, n), c32.strides, np.dtype(np.float32), c32)
    mm.launcher(mm.course_kernel(style, bn), a, b, v16)()
    mm.launcher(mm.course_kernel(style, bn, out_f32=True), a, b, v32)()
    got16, got32 = c16.to_host()[:, :n], c32.to_host()[:, :n]
    assert np.array_equal(got32.astype(gpu.bfloat16).view(np.uint16), got16.view(np.uint16))
    assert (c32.to_host()[:, n:] == 0).all()  # clipped at N
    ref = a.to_host().astype(np.float64) @ b.to_host().astype(np.float64).T
    assert np.abs(got32 - ref).max() < 1e-4 * np.abs(ref).max()
    with pytest.raises(TypeError, match="into float32 C"):
        mm.launcher(mm.course_kernel(style, bn, out_f32=True), a, b, v16)


@pytest.mark.parametrize(("style", "bn", "out_f32"), [("lab9", 64, False), ("lab9", 32, False), ("lab9", 16, False),
                                                      ("lab9", 16, True), ("lab9", 32, True), ("lab9", 128, True),
                                                      ("lab7", 256, True)])
def test_the_new_builds_run_without_a_hazard(style, bn, out_f32):
    """Narrow tiles and fp32 C in the executor's hazard mode: every generic store to a store buffer fenced before
    its TMA store reads it, no buffer rewritten while a store may still read it; three clusters, Stream-K splits."""
    from helpers.gpu import TensorMapArg

    m, n, k = 264, bn + 8 if bn < 128 else 296, 200  # rows of C 16 bytes apart, a partial tile
    a = gpu.random_host((m, k), gpu.bfloat16, seed=3)
    b = gpu.random_host((n, k), gpu.bfloat16, seed=4)
    c = np.full((m, n), np.nan, np.float32 if out_f32 else gpu.bfloat16)
    out = 4 if out_f32 else 2
    sub = mm.store_width(bn, out)
    extra = (np.zeros(3 * 2 * 128 * bn, np.float32), np.zeros(3 * 2, np.uint32)) if style == "lab9" else ()
    res = gpu.run_on_executor(mm.course_kernel(style, bn, out_f32=out_f32), (6, 1, 1), 384, mm.smem_bytes(bn, out),
                              TensorMapArg(a, (128, 64)), TensorMapArg(b, (bn // 2, 64)),
                              TensorMapArg(c, (64, sub), swizzle=128 if sub * out == 128 else 0),
                              np.int32(m), np.int32(n), np.int32(k), *extra, cluster=(2, 1, 1), check=False)
    assert res.error is None and res.hazards == [], "\n".join(str(h) for h in res.hazards[:3]) or str(res.error)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    gpu.check_gemm(res.arrays[2], ref, k)


# ------------------------------------------------------------------------------------------------ f16 data
F16 = np.dtype(np.float16)


def _run_f16(fn):
    """Runs `fn`; on the emulator, skips where it refuses f16 wgmma (it emulates bf16 inputs only)."""
    try:
        return fn()
    except gpu.ExecutorLimit as e:
        if ".f16.f16" in str(e):
            pytest.skip("a limit of the executor: it emulates wgmma with bf16 inputs only, not .f32.f16.f16; "
                        "the same test runs on a Hopper GPU (pytest -m gpu)")
        raise


def test_hopper_f16_cuh_is_what_gen_wgmma_writes():
    """helpers/include/hopper_f16.cuh is generated (gen_wgmma.py), like hopper.cuh's wgmma section: the bf16
    wrappers with f16 inputs."""
    import importlib.util

    path = mm.KERNELS_DIR.parents[1] / "helpers" / "include" / "gen_wgmma.py"
    spec = importlib.util.spec_from_file_location("gen_wgmma", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    want = gen.F16_HEAD + "".join(gen.one(n, "f16") for n in gen.NS) + gen.F16_TAIL
    assert gen.F16_HEADER.read_text() == want
    assert gen.one(64, "f16") == gen.one(64).replace("bf16", "f16")


@pytest.mark.parametrize(("style", "bn"), [("lab7", 256), ("lab7", 128), ("lab9", 256), ("lab9", 128), ("lab9", 64),
                                           ("lab9", 32), ("lab9", 16)])
def test_f16_builds_multiply_f16_and_store_f16(style, bn):
    kern = mm.course_kernel(style, bn, "f16")
    assert kern.options[-1] == f"-D{style.upper()}_F16=1" and mm.element_type(kern) == F16
    assert ".f32.f16.f16" in kern.ptx and ".f32.bf16.bf16" not in kern.ptx
    assert "cvt.rn.f16x2.f32" in kern.ptx and "cvt.rn.bf16x2.f32" not in kern.ptx
    assert mm.element_type(mm.course_kernel(style, bn)) == gpu.bfloat16
    assert kern.report.spill_stores == 0 == kern.report.spill_loads


def test_f16_inputs_are_copied_as_f16_and_a_bf16_kernel_refuses_them():
    """fp16 A and B (B not K-major): the copies make f16 buffers, bit for bit, and the GEMM is an f16 build; a bf16
    kernel given f16 matrices says so."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((40, 70)).astype(np.float16), rng.standard_normal((70, 33)).astype(np.float16)
    p = mm.plan(gpu.to_device(a), gpu.to_device(b))
    copy_a, copy_b, gemm = p.launchers[:3]
    assert mm.element_type(gemm.kernel) == F16 and p.result.dtype == F16
    copy_b()
    packed = next(x for x in copy_b.args if isinstance(x, gpu.DeviceArray) and x.shape == (33, 72))
    assert packed.dtype == F16 and np.array_equal(packed.to_host()[:, :70], b.T)
    with pytest.raises(TypeError, match="multiplies bfloat16 data"):
        mm.launcher(mm.course_kernel("lab9", 64), *(gpu.zeros(s, F16) for s in ((40, 72), (33, 72), (40, 40))))


@pytest.mark.parametrize("shape", [(40, 33, 70), (8, 150, 100), (1, 40, 64), (130, 270, 70)])
def test_f16_matmul_keeps_f16_precision(shape):
    """gpu.matmul on fp16 inputs multiplies f16, not bf16: its error against fp64 is a fraction of the error that
    rounding the inputs to bf16 makes; fp16 C, or fp32 out."""
    m, n, k = shape
    rng = np.random.default_rng(m + n)
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bf16_error = np.abs(_ref(a, b) - ref).max()
    c = _run_f16(lambda: mm.matmul(a, b))
    assert c.dtype == F16
    assert np.abs(c.astype(np.float64) - ref).max() < 0.3 * bf16_error
    out = np.zeros((m, n), np.float32)
    _run_f16(lambda: mm.matmul(a, b, out=out))
    assert np.abs(out - ref).max() < 0.3 * bf16_error


# ------------------------------------------------------------------------------------------------ on the H100
# 128×128 tiles with Stream-K at 1000³, 513×2049×4100 and 1024×1024×16384, on one cluster per pair at 512×4096×4096
GPU_SHAPES = [(37, 45, 29), (1000, 1000, 1000), (513, 2049, 4100), (4096, 4096, 4096), (1024, 1024, 16384),
              (512, 4096, 4096)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_torch_against_torch_matmul(shape):
    torch = pytest.importorskip("torch")
    m, n, k = shape
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda", generator=g).to(torch.bfloat16)
    c = mm.matmul(a, b)
    assert c.dtype == torch.bfloat16 and c.device == a.device and tuple(c.shape) == (m, n)
    ref = torch.matmul(a.double(), b.double())
    gpu.check_gemm(c.float().cpu().numpy(), ref.cpu().numpy(), k)
    theirs = torch.matmul(a, b).float()
    assert (c.float() - theirs).abs().max().item() <= 0.02 * theirs.abs().max().item() + 0.05


@pytest.mark.gpu
def test_torch_linear_layer_weight_in_place_and_float32():
    torch = pytest.importorskip("torch")
    x = torch.randn(300, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1000, 512, device="cuda", dtype=torch.bfloat16)
    gpu.check_gemm(mm.matmul(x, w.T).float().cpu().numpy(), (x.double() @ w.double().T).cpu().numpy(), 512)
    xf, wf = x.float(), w.float()
    cf = mm.matmul(xf, wf.T)
    assert cf.dtype == torch.float32
    gpu.check_gemm(cf.to(torch.bfloat16).cpu().float().numpy(), (x.double() @ w.double().T).cpu().numpy(), 512)


@pytest.mark.gpu
def test_cupy_float32_against_its_matmul():
    cp = pytest.importorskip("cupy")
    a = cp.random.standard_normal((300, 200), dtype=cp.float32)
    b = cp.random.standard_normal((200, 130), dtype=cp.float32)
    c = mm.matmul(a, b)
    assert isinstance(c, cp.ndarray) and c.dtype == cp.float32
    ah, bh = cp.asnumpy(a), cp.asnumpy(b)
    gpu.check_gemm(cp.asnumpy(c).astype(gpu.bfloat16), _ref(ah, bh), 200)


@pytest.mark.gpu
def test_device_arrays_on_the_h100():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((777, 333)).astype(gpu.bfloat16), rng.standard_normal((333, 555)).astype(gpu.bfloat16)
    c = mm.matmul(gpu.to_device(a), gpu.to_device(b))
    gpu.check_gemm(c.to_host(), _ref(a, b), 333)


def test_a_two_layer_mlp_forward_pass_on_numpy():
    """docs/gpu.md's example, small enough for the emulator: y = relu(x·W1ᵀ)·W2ᵀ, weights stored (out, in)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((20, 24)).astype(gpu.bfloat16)
    w1 = (rng.standard_normal((40, 24)) / 5).astype(gpu.bfloat16)
    w2 = (rng.standard_normal((24, 40)) / 6).astype(gpu.bfloat16)
    h = np.maximum(mm.matmul(x, w1.T).astype(np.float32), 0).astype(gpu.bfloat16)
    y = mm.matmul(h, w2.T)
    href = np.maximum(x.astype(np.float64) @ w1.astype(np.float64).T, 0).astype(gpu.bfloat16)
    gpu.check_gemm(y, href.astype(np.float64) @ w2.astype(np.float64).T, 40)
