"""The course's final GEMM as one function: ``C = matmul(A, B)`` for any M, N, K, like ``torch.matmul``.

A is M×K and B is K×N: torch tensors or cupy arrays on the H100 (anything with ``__dlpack__`` or
``__cuda_array_interface__``, read through ``cuda.core``'s ``StridedMemoryView``), the course's ``DeviceArray``,
a :class:`Matrix` (an address with a shape and byte strides), or numpy arrays (copied in and back; without a GPU
they run on the PTX executor, the emulator). The product is the course's kernels' (``bench/kernels/``), fp32
accumulation always: fp16 inputs are multiplied as f16 (the kernels' ``LAB7_F16`` / ``LAB9_F16`` builds, ``wgmma``
with f16 inputs), bf16 ones as bf16, fp32 ones rounded to bf16 first; C is stored in the inputs' dtype, and an fp32
C (fp32 inputs, or ``out`` of fp32) gets the fp32 accumulators unrounded (the ``OUT_F32`` builds).

The kernels read A (M×K) and B as N×K, both K-major, through tensor maps whose row strides must be multiples of
16 bytes, and store C (M×N) the same way. So an operand is used in place when it already has that layout
(A row-major, B the transpose of a row-major N×K matrix, as ``x @ w.T`` gives for a linear layer's weight w);
otherwise a small kernel copies it into a zero-padded bf16 (or f16) buffer (transposing B, padding K and N to
multiples of 8), and C goes through a padded buffer when its rows are not 16 bytes apart. The tensor maps
zero-fill loads past M, N and K and clip stores at M and N, so no dimension needs to be a multiple of a tile.

Which kernel (:func:`choose`): Lab 7's data-parallel persistent kernel, unless the last wave of 256×256 tile
pairs would leave many clusters idle, where Lab 9's Stream-K spreads the K steps evenly; and when even twice as
many pairs would fit in one wave, 128×128 tiles (``LAB7_BN=128`` or ``LAB9_BN=128``: pairs of 256×128), which
make twice as many pairs: Lab 7's kernel, where one consumer warpgroup then computes a whole tile, when the pairs
fill their wave, else Lab 9's. Stream-K with few pairs runs on a whole number of clusters per pair where that keeps
nearly all of them busy (:func:`streamk_clusters`). Both kernels are built with switches beyond their labs'
(:data:`OPTIONS`), with the same bits: their cluster barriers cost no GPU-wide memory barrier (the producer's tail
instead of the last one), and Lab 9's Stream-K splits hand their partial sums to the final split all at once
instead of along a chain. Where the tile does not meet the problem: a small M (decode: 1–128 tokens) swaps A and
B (the kernel computes Cᵀ = B·Aᵀ, N×M, and a copy writes it back transposed, :func:`swaps`), a C with at most 64
columns gets Lab 9's 128×64, 128×32 or 128×16 tiles (:func:`skinny_width`), and those split K over every cluster
when their pairs fill less than a wave (these rules are provisional until bench/torch_matmul.py has measured them).
:func:`plan` prepares a call's launches without running them (for timing and CUDA graphs).
``kernel=`` runs a kernel of your own with Lab 7's or Lab 9's parameters instead (the count of parameters says
which).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .arrays import DeviceArray, bfloat16, to_device
from .compiler import Kernel, compile
from .device import current, executor_active
from .hardware import this_gpu
from .launch import Launcher, prepare, wait
from .occupancy import max_active_clusters
from .tensormaps import tensor_map

__all__ = ["matmul", "choose", "Choice", "pairs", "wave_efficiency", "last_wave", "saved_steps", "needs_streamk",
           "streamk_clusters", "resident_pairs", "plan", "Plan", "swaps", "skinny_width", "SKINNY", "WIDTHS",
           "SWAP_AB_UP_TO", "store_width", "ELEMENTS", "element_type", "out_type", "EVEN_SPLITS_FROM", "launcher",
           "course_kernel", "kernel_style", "tile_width", "stages", "smem_bytes", "KERNELS", "OPTIONS",
           "kernel_options", "STREAMK_BELOW", "STREAMK_LAST_WAVE", "STREAMK_MIN_SAVED_STEPS", "WIDE", "NARROW",
           "SMEM_BYTES", "FUSED_ACTS", "FUSED_BIAS", "fused_source", "fused_kernel", "lab5_launcher", "fused_launcher"]

KERNELS_DIR = Path(__file__).resolve().parents[2] / "bench" / "kernels"
#: the course's final kernels: style → (file under bench/kernels, kernel name)
KERNELS = {"lab7": ("lab7_clusters.cu", "lab7_gemm"), "lab9": ("lab9_streamk.cu", "lab9_gemm")}
#: dynamic shared memory of both at their default tile width: 4 stages of 128×64 A + 256×64 B, two 64×64 bf16
#: store buffers per consumer warpgroup, 1 KB of alignment slack (:func:`smem_bytes` for other widths)
SMEM_BYTES = 4 * (128 * 64 + 256 * 64) * 2 + 2 * 2 * 64 * 64 * 2 + 1024
PAIR = 256  # a cluster's output: 2 blocks × 128 rows (and, with wide tiles, 256 columns)
#: tile widths (columns of C per tile, the kernels' LAB7_BN and LAB9_BN): 128×256 tiles (wide, the labs' own) or
#: 128×128 tiles (narrow)
WIDE, NARROW = 256, 128
#: the narrower tile widths of Lab 9's kernel (``LAB9_BN``), for a C with few columns: 128×64, 128×32, 128×16 tiles
SKINNY = (64, 32, 16)
#: tile widths each kernel compiles at
WIDTHS = {"lab7": (WIDE, NARROW), "lab9": (WIDE, NARROW, *SKINNY)}
#: the kernels' element types (A, B and C; fp32 accumulators either way): ``LAB7_F16=1`` / ``LAB9_F16=1`` builds
#: multiply f16 data with ``wgmma .f32.f16.f16`` and store C in f16
ELEMENTS = {"bf16": bfloat16, "f16": np.dtype(np.float16)}
#: A and B swap places (Cᵀ = B·Aᵀ) when M is at most this and smaller than N (see :func:`swaps`)
SWAP_AB_UP_TO = 128
#: The thresholds below were measured on the H100 SXM (its profile in helpers.hopper.parts) and are in the machine's
#: own units (shares of a wave of clusters, K steps), so they carry over to parts with other counts.
#: Stream-K when the tile pairs fill their waves of clusters less than this well (see :func:`choose`)
STREAMK_BELOW = 0.8
#: Stream-K also when the last wave keeps at most this share of the clusters busy, however many waves come before
#: it (see :func:`choose`)
STREAMK_LAST_WAVE = 0.55
#: ... and only when the time it can save, the last wave's idle share × the K steps of a pair, is at least this many
#: K steps: below it the fix-ups cost more than they save on the H100 (see :func:`choose`)
STREAMK_MIN_SAVED_STEPS = 14
#: Stream-K on a whole number of splits per pair when that keeps at least this share of the clusters busy (see
#: :func:`streamk_clusters`)
EVEN_SPLITS_FROM = 0.9
#: clusters launched on the emulator, which runs every thread on the CPU
EMULATED_CLUSTERS = 2


def resident_pairs() -> int:
    """Clusters of two one-block-per-SM blocks resident at once on the GPU kernels run on here (its own count from
    the occupancy API, or the emulated part's: ``helpers.gpu.hardware``)."""
    return this_gpu().resident(2)


def pairs(m: int, n: int, bn: int = WIDE) -> int:
    """Tile pairs of an m×n C, one per cluster at a time: 256 rows (two blocks of 128) × `bn` columns each."""
    return math.ceil(m / PAIR) * math.ceil(n / bn)


def wave_efficiency(m: int, n: int, clusters: int | None = None, bn: int = WIDE) -> float:
    """How full the waves of tile pairs (256 × `bn`) keep the clusters: pairs / (waves × clusters), 1.0 = every
    wave full (`clusters`: this GPU's resident pairs of blocks by default)."""
    clusters = clusters or resident_pairs()
    count = pairs(m, n, bn)
    return count / (math.ceil(count / clusters) * clusters)


def last_wave(m: int, n: int, clusters: int | None = None, bn: int = WIDE) -> float:
    """The share of the clusters the last wave of tile pairs (256 × `bn`) keeps busy: 1.0 when every wave is full
    (1024 pairs on 66 clusters: 15 full waves and 34 pairs, 0.52)."""
    clusters = clusters or resident_pairs()
    rest = pairs(m, n, bn) % clusters
    return rest / clusters if rest else 1.0


def saved_steps(m: int, n: int, k: int, clusters: int | None = None, bn: int = WIDE) -> float:
    """The time Stream-K can win back, in K steps (64 of K): the share of the clusters the last wave leaves idle ×
    a pair's K steps, 0 when every wave is full (8192³: 0.48 × 128 = 62)."""
    return (1.0 - last_wave(m, n, clusters, bn)) * math.ceil(k / 64)


def needs_streamk(m: int, n: int, k: int, clusters: int | None = None, bn: int = WIDE) -> bool:
    """Whether Stream-K pays for its fix-ups here: the pairs fill their waves less than :data:`STREAMK_BELOW` or the
    last wave keeps at most :data:`STREAMK_LAST_WAVE` of the clusters busy, and what that wave leaves idle is worth
    at least :data:`STREAMK_MIN_SAVED_STEPS` K steps (see :func:`choose`)."""
    clusters = clusters or resident_pairs()
    idle = (wave_efficiency(m, n, clusters, bn) < STREAMK_BELOW
            or last_wave(m, n, clusters, bn) <= STREAMK_LAST_WAVE)
    return idle and saved_steps(m, n, k, clusters, bn) >= STREAMK_MIN_SAVED_STEPS


def streamk_clusters(count: int, steps: int, active: int) -> int:
    """How many of `active` clusters a Stream-K launch of `count` tile pairs of `steps` K steps uses: all of them,
    unless the pairs are at most half as many and a whole number s of splits per pair that divides the K steps keeps
    at least :data:`EVEN_SPLITS_FROM` of the clusters busy; then s × `count`, so that every pair is cut into s equal
    ranges of K steps, one per cluster, that end together (no cluster's range spans two pairs). Measured on the H100
    (2026-11-26, interleaved against all 66 clusters): 1024×1024×16384, 32 narrow pairs split in two on 64 clusters,
    **1.12×** (0.96× cuBLAS); 512×1024×4096, 16 pairs in four on 64, 1.01×; in three on 48 (73 % of the clusters),
    0.95×."""
    if 2 * count <= active:
        splits = active // count
        if splits * count >= EVEN_SPLITS_FROM * active and steps % splits == 0:
            return splits * count
    return active


class Choice(NamedTuple):
    """What :func:`choose` picks for a shape: the kernel (``"lab7"`` or ``"lab9"``), its tile width (:data:`WIDE`,
    :data:`NARROW` or one of :data:`SKINNY`), whether Lab 9's kernel runs Stream-K on every cluster (else whole
    pairs only), and whether A and B swap places (the kernel computes Cᵀ = B·Aᵀ, :func:`swaps`)."""

    kernel: str
    bn: int
    streamk: bool
    swapped: bool = False

    @property
    def name(self) -> str:
        """``lab7``, ``lab9`` (wide, Stream-K), ``lab9-128`` (narrow, Stream-K), ``lab7-128`` (narrow, whole
        pairs), ``lab9-16`` (128×16 tiles), ``-pairs`` after Lab 9's kernel on whole pairs (no Stream-K), and
        ``-swapAB`` after any of them when A and B swap places."""
        base = self.kernel if self.bn == WIDE else f"{self.kernel}-{self.bn}"
        return base + ("-pairs" if self.kernel == "lab9" and not self.streamk else "") + (
            "-swapAB" if self.swapped else "")


def swaps(m: int, n: int) -> bool:
    """Whether ``gpu.matmul`` computes Cᵀ = B·Aᵀ instead of C = A·B: when M is at most :data:`SWAP_AB_UP_TO` and
    smaller than N (decode and small batches: M = 1–128 tokens against N of thousands). The kernels' tiles are 128
    rows (256 a pair of blocks) by 16–256 columns, so a small M wastes most of every tile's rows, while as the
    tile's columns it fits a narrow tile (:func:`skinny_width`): 16 tokens are 16 of 256 rows, or all 16 columns
    of a 128×16 tile. Provisional until measured: the rule expects the swapped launch (and the transposing copy of
    C it needs) to beat the plain one for every such shape; bench/torch_matmul.py measures the small-M class."""
    return m <= SWAP_AB_UP_TO and m < n


def skinny_width(n: int) -> int | None:
    """The tile width for a C of `n` columns where n ≤ 128: the narrowest of 16, 32, 64 and 128 that holds all of
    them (100 → 128, 17 → 32, 1 → 16); None for wider C, whose width :func:`choose` picks by its waves."""
    for bn in (*SKINNY[::-1], NARROW):
        if n <= bn:
            return bn
    return None


def choose(m: int, n: int, k: int, clusters: int | None = None) -> Choice:
    """The kernel for an m×n×k GEMM on `clusters` clusters (this GPU's resident pairs of blocks by default:
    :func:`resident_pairs`), in two questions.

    1. *Tile width.* 128×256 tiles, unless even twice as many pairs as they make would fit in one wave of clusters:
       then 128×128 tiles, which make twice as many (512×4096: 32 wide pairs keep 32 of the H100's 66 clusters
       busy, 64 narrow ones keep 64 busy).
    2. *Stream-K or whole pairs.* Stream-K (Lab 9's kernel on every cluster: whole pairs for all but the last one
       or two waves) when the pairs fill their waves less than :data:`STREAMK_BELOW` of the clusters, or when the
       last wave keeps at most :data:`STREAMK_LAST_WAVE` of them busy, and the idle time Stream-K can win back is
       worth at least :data:`STREAMK_MIN_SAVED_STEPS` K steps (:func:`needs_streamk`); else whole pairs:
       Lab 7's kernel, at either width (with narrow tiles one consumer warpgroup computes a whole 128×128 tile:
       5–7 % faster on the H100 than Lab 9's kernel with two warpgroups on one cluster per pair, 2026-11-26).

    The 0.8 is from the shape set measured on the H100 (bench/results/2026-11-26-shapes-narrow-h100.md, Lab 7 and
    Lab 9 interleaved with cuBLAS in one run): Stream-K won where the waves were 69 % full or less (4352×2048×8192:
    136 pairs in three waves, 1.03× cuBLAS against Lab 7's 0.75×; 1024×4352×8192: 68 pairs, 52 %, 0.97× against
    0.58×) and lost from 85 % up (512×14336×4096: 112 pairs in two waves, 0.89× against Lab 7's 0.98×; 4096³:
    256 pairs, 97 %). The 0.55 is from the large shapes, whose waves are all nearly full: Stream-K won on all of
    them whose last wave was at most 52 % busy and lost on all whose last wave was 70 % busy or more (Lab 9
    against Lab 7, interleaved, H100 2026-11-26: 8192³, last wave 0.52, 1.00–1.03× in six runs and 1.04× cuBLAS
    over 41 rounds; 8192×14336×4096, 0.15, 1.01–1.03×; 16384×16384×8192, 0.06, 1.01–1.02×; shapes outside the
    set, 3072³ 1.19×, 5120³ 1.13×, 10240×10240×4096 1.02×; 6144³, 0.73, 0.98×; 4096³, 0.88, 0.92–0.97×). The 14
    K steps are from the same comparison with short K (bench/results/2026-11-26-tried-4-h100.md): the fix-ups cost
    a few microseconds whatever K is, and the idle time saved is proportional to K. Stream-K won or tied wherever it
    saved 15 K steps or more (1024×4352×1024, 15.5 steps, 1.10×; 1024×1024×2048 at 128×128, 16.5, 1.02×;
    2560×4096×4096, 37, 1.08×; 8192×8192×2048, 15.5, 0.99×; 5120×5120×1024, 15, 1.00×) and lost wherever it saved
    13 or fewer (3072×3072×1024, 13 steps, 0.98×; 512×1024×1024 at 128×128, 12, 0.85×; 4352×4352×1024, 10, 0.94×;
    3072×3072×512 0.88×; 4352×4352×256 0.86×).

    Before both questions, the shape may be turned round and its C given narrow tiles (provisional rules, until
    bench/torch_matmul.py's small-M and odd-size classes have measured them):

    0. *Swap A and B* (:func:`swaps`): when M ≤ :data:`SWAP_AB_UP_TO` and M < N the kernel computes Cᵀ = B·Aᵀ,
       an N×M product, and the questions below are asked of it.
    0'. *Narrow C.* When the (possibly swapped) C has at most 128 columns, its tiles are as narrow as hold them
       (:func:`skinny_width`: 128, 64, 32 or 16); below 128 only Lab 9's kernel has those widths. Such a GEMM
       reads its wide operand once and does little arithmetic per byte (a decode GEMM is memory-bound), so it
       wants every SM streaming: Stream-K (split-K for few pairs, :func:`streamk_clusters`) whenever the pairs fill
       less than one wave of clusters, as well as where :func:`needs_streamk` says so. The expectation: as fast as
       ``torch.matmul`` for M = 1–128 against N, K of 1024–16384, both at the memory bound."""
    clusters = clusters or resident_pairs()
    swapped = swaps(m, n)
    if swapped:
        m, n = n, m
    bn = skinny_width(n)
    if bn is not None and bn < NARROW:
        streamk = pairs(m, n, bn) < clusters or needs_streamk(m, n, k, clusters, bn)
        return Choice("lab9", bn, streamk, swapped)
    if bn is None:
        twice_as_many_fit_in_one_wave = 2 * pairs(m, n, WIDE) <= clusters
        bn = NARROW if twice_as_many_fit_in_one_wave else WIDE
    streamk = needs_streamk(m, n, k, clusters, bn)
    return Choice("lab9" if streamk else "lab7", bn, streamk, swapped)


def store_width(bn: int, out_bytes: int = 2) -> int:
    """Columns of the epilogue's sub-tiles (64 rows each) at tile width `bn` for C elements of `out_bytes` (2, or 4
    for fp32 C): a 128-byte row (64 or 32 columns), or the whole tile where it is narrower."""
    return min(128 // out_bytes, bn)


def stages(bn: int, out_bytes: int = 2) -> int:
    """Ring stages of the kernels at tile width `bn`, as the kernels count them: what 227 KiB of shared memory holds
    after the store buffers and 1 KiB of alignment slack (4 of 48 KiB at 256, 6 of 32 KiB at 128, 12 of 18 KiB at
    16; 11 at 16 with fp32 C, whose store buffers are twice as large)."""
    stage = (128 * 64 + bn * 64) * 2
    return (227 * 1024 - 1024 - 2 * 2 * 64 * store_width(bn, out_bytes) * out_bytes) // stage


def smem_bytes(bn: int = WIDE, out_bytes: int = 2) -> int:
    """Dynamic shared memory of the kernels at tile width `bn` (C elements of `out_bytes`): the ring, the store
    buffers, the alignment slack."""
    return (stages(bn, out_bytes) * (128 * 64 + bn * 64) * 2 + 2 * 2 * 64 * store_width(bn, out_bytes) * out_bytes
            + 1024)


_compiled: dict[str, Kernel] = {}


#: compile-time switches of the final kernels beyond their labs' defaults:
#: - both: the producer's tail instead of the last cluster barrier, and the first one arrived on .relaxed, so that
#:   neither costs a GPU-wide memory barrier (the same bits; 1.06× at 2048³, 1.04–1.06× at 512×4096×4096 and
#:   2048×1024×4096, the same on long runs, H100 2026-11-26);
#: - Lab 9's parallel fix-up (each split but a pair's final one leaves its partial sums in its own cluster's slot at
#:   once, and the final split adds them all in K order: the bits of the lab's chain of splits, without its waits;
#:   1.11× the chain at 512×1024×4096, where a pair is split four ways, the same elsewhere, H100 2026-11-26)
OPTIONS = {"lab7": ("-DLAB7_PRODUCER_TAIL=1",), "lab9": ("-DLAB9_PARALLEL_FIXUP=1", "-DLAB9_PRODUCER_TAIL=1")}


def kernel_options(style: str, bn: int = WIDE, element: str = "bf16", out_f32: bool = False) -> tuple[str, ...]:
    """The NVRTC options of the course's final kernel of this style at tile width `bn` for `element` data
    (:data:`ELEMENTS`): :data:`OPTIONS`, ``-DLAB7_BN=128`` or ``-DLAB9_BN=128`` (64, 32, 16) for narrower tiles
    (:data:`WIDTHS`), ``-DLAB7_F16=1`` or ``-DLAB9_F16=1`` for f16 data, ``-DLAB7_OUT_F32=1`` or
    ``-DLAB9_OUT_F32=1`` for C in fp32 (the accumulators unrounded)."""
    if style not in OPTIONS or bn not in WIDTHS[style]:
        raise ValueError(f"the course's kernels have tiles {WIDTHS} wide; not {style} at {bn}")
    if element not in ELEMENTS:
        raise ValueError(f"the course's kernels multiply {list(ELEMENTS)} data, not {element}")
    return (OPTIONS[style] + (() if bn == WIDE else (f"-D{style.upper()}_BN={bn}",))
            + (() if element == "bf16" else (f"-D{style.upper()}_F16=1",))
            + ((f"-D{style.upper()}_OUT_F32=1",) if out_f32 else ()))


def course_kernel(style: str, bn: int = WIDE, element: str = "bf16", out_f32: bool = False) -> Kernel:
    """The course's final kernel of this style ("lab7" or "lab9") and tile width (:data:`WIDTHS`), compiled with
    :func:`kernel_options` once (NVRTC's cache keeps it across runs)."""
    options = kernel_options(style, bn, element, out_f32)
    key = ((style if bn == WIDE else f"{style}/{bn}") + ("" if element == "bf16" else f"/{element}")
           + ("/f32-out" if out_f32 else ""))
    if key not in _compiled:
        file, name = KERNELS[style]
        _compiled[key] = compile((KERNELS_DIR / file).read_text(), name, options=options, filename=file)
    return _compiled[key]


def tile_width(kernel: Kernel) -> int:
    """The tile width a course-style kernel was compiled with: LAB7_BN or LAB9_BN from its options
    (``-DLAB9_BN=128``) or a ``#define LAB9_BN`` in its source, else :data:`WIDE`."""
    for option in kernel.options:
        if option.startswith(("-DLAB7_BN=", "-DLAB9_BN=")):
            return int(option.split("=", 1)[1])
    m = re.search(r"^\s*#\s*define\s+LAB[79]_BN\s+(\d+)", kernel.source, re.M)
    return int(m.group(1)) if m else WIDE


def element_type(kernel: Kernel) -> np.dtype:
    """The element type a course-style kernel multiplies and stores: float16 when it was built with ``LAB7_F16`` or
    ``LAB9_F16`` set (an option or a ``#define`` in its source), else bf16."""
    for option in kernel.options:
        if option.startswith(("-DLAB7_F16=", "-DLAB9_F16=")):
            return ELEMENTS["f16"] if option.split("=", 1)[1].strip() not in ("", "0") else bfloat16
    m = re.search(r"^\s*#\s*define\s+LAB[79]_F16\s+(\d+)", kernel.source, re.M)
    return ELEMENTS["f16"] if m and int(m.group(1)) else bfloat16


def out_type(kernel: Kernel) -> np.dtype:
    """The type a course-style kernel stores C in: float32 when built with ``LAB7_OUT_F32`` or ``LAB9_OUT_F32`` set,
    else its element type (:func:`element_type`)."""
    for option in kernel.options:
        if option.startswith(("-DLAB7_OUT_F32=", "-DLAB9_OUT_F32=")):
            if option.split("=", 1)[1].strip() not in ("", "0"):
                return np.dtype(np.float32)
    m = re.search(r"^\s*#\s*define\s+LAB[79]_OUT_F32\s+(\d+)", kernel.source, re.M)
    return np.dtype(np.float32) if m and int(m.group(1)) else element_type(kernel)


def kernel_style(kernel: Kernel) -> str:
    """"lab7" for a kernel with Lab 7's parameters (maps of A, B, C; M, N, K), "lab9" for Lab 9's (those, then the
    Stream-K workspace and flags); counted in the kernel's PTX entry."""
    m = re.search(r"\.entry\s+" + re.escape(kernel.lowered_name) + r"\s*\((.*?)\)", kernel.ptx, re.S)
    count = len(re.findall(r"\.param\b", m.group(1))) if m else -1
    styles = {6: "lab7", 8: "lab9"}
    if count not in styles:
        raise TypeError(f"kernel {kernel.name} takes {count} parameters; matmul runs kernels with Lab 7's six "
                        "(tensor maps of A, B and C; M, N, K) or Lab 9's eight (those, then the workspace and the "
                        "flags)")
    return styles[count]


@dataclass
class Matrix:
    """A 2-D matrix in device memory as the tensor maps see it: address, shape, byte strides, dtype."""

    ptr: int
    shape: tuple[int, int]
    strides: tuple[int, int]
    dtype: np.dtype
    owner: Any = None  # keeps the memory alive

    @property
    def ndim(self) -> int:
        return 2

    def k_major(self, element: np.dtype = bfloat16) -> bool:
        """Usable in place by a tensor map of `element` data: that dtype, contiguous rows, row stride and address
        multiples of 16 bytes."""
        return (self.dtype == element and self.strides[1] == self.dtype.itemsize and self.strides[0] % 16 == 0
                and self.ptr % 16 == 0 and self.strides[0] > 0)

    def transposed(self) -> Matrix:
        return Matrix(self.ptr, self.shape[::-1], self.strides[::-1], self.dtype, self.owner)


def _clusters(kernel: Kernel, smem: int) -> int:
    return EMULATED_CLUSTERS if executor_active() else max_active_clusters(kernel, 384, smem, 2)


_workspaces: dict[tuple[int, int], tuple[DeviceArray, DeviceArray]] = {}


def launcher(kernel: Kernel, a: Any, b: Any, c: Any, *, clusters: int | None = None, streamk: bool = True) -> Launcher:
    """A launcher of the course's kernel (or one with its parameters) on A (M×K), B (N×K, K-major) and C (M×N), all
    bf16 with rows a multiple of 16 bytes apart (``DeviceArray`` or :class:`Matrix`), at the kernel's tile width
    (:func:`tile_width`): every resident cluster (:data:`EMULATED_CLUSTERS` on the emulator), fewer for Lab 7 when
    there are fewer tile pairs. Lab 9 style gets a zeroed workspace and flags, kept per kernel (the kernel leaves the
    flags zeroed); with Stream-K it runs on :func:`streamk_clusters` of them; with ``streamk=False`` on as few
    clusters as its waves of pairs need, so that each cluster gets whole pairs (one cluster per pair when they fit
    in one wave)."""
    (m, k), n = a.shape, b.shape[0]
    style = kernel_style(kernel)
    bn = tile_width(kernel)
    element, out = element_type(kernel), out_type(kernel)
    if np.dtype(a.dtype) != element or np.dtype(b.dtype) != element or np.dtype(c.dtype) != out:
        raise TypeError(f"kernel {kernel.name} multiplies {element} data into {out} C; A, B and C are {a.dtype}, "
                        f"{b.dtype} and {c.dtype}")
    smem = smem_bytes(bn, out.itemsize)
    active = clusters or _clusters(kernel, smem)
    sub = store_width(bn, out.itemsize)
    maps = (tensor_map(a, (128, 64)), tensor_map(b, (bn // 2, 64)),
            tensor_map(c, (64, sub), swizzle=128 if sub * out.itemsize == 128 else 0))
    dims = (np.int32(m), np.int32(n), np.int32(k))
    count = pairs(m, n, bn)
    if style == "lab7":
        grid = 2 * max(1, min(active, count))
        return prepare(kernel, (grid, 1, 1), 384, smem, *maps, *dims, cluster=(2, 1, 1))
    key = (id(kernel), active)
    if key not in _workspaces:
        from .arrays import zeros

        _workspaces[key] = (zeros((active * 2 * 128 * bn,), np.float32), zeros((active * 2,), np.uint32))
    ws, flags = _workspaces[key]
    if streamk:
        launched = streamk_clusters(count, math.ceil(k / 64), active)
    else:
        launched = max(1, math.ceil(count / math.ceil(count / active)))
    return prepare(kernel, (2 * launched, 1, 1), 384, smem, *maps, *dims, ws, flags, cluster=(2, 1, 1))


# ------------------------------------------------------------------------------------- Lab 5 and its fused epilogue
#: FUSED_ACT and FUSED_BIAS of bench/kernels/lab5_fused.cu: activation name → value, bias type → value
FUSED_ACTS = {"none": 0, "relu": 1, "gelu": 2}
FUSED_BIAS = {None: 0, "f32": 1, "bf16": 2}


def fused_source(act: str = "gelu", bias: str | None = "f32") -> str:
    """bench/kernels/lab5_fused.cu with its activation (``"none"``, ``"relu"``, ``"gelu"``) and bias type (None,
    ``"f32"``, ``"bf16"``) chosen."""
    if act not in FUSED_ACTS or bias not in FUSED_BIAS:
        raise ValueError(f"act is one of {list(FUSED_ACTS)} and bias one of {list(FUSED_BIAS)}; got {act!r}, {bias!r}")
    return (f"#define FUSED_ACT {FUSED_ACTS[act]}\n#define FUSED_BIAS {FUSED_BIAS[bias]}\n"
            + (KERNELS_DIR / "lab5_fused.cu").read_text())


def fused_kernel(act: str = "gelu", bias: str | None = "f32") -> Kernel:
    """The fused Lab 5 kernel ``lab5_fused`` with this activation and bias type, compiled once."""
    key = f"lab5_fused/{act}/{bias}"
    if key not in _compiled:
        _compiled[key] = compile(fused_source(act, bias), "lab5_fused", filename="lab5_fused.cu")
    return _compiled[key]


def _lab5_grid(m: int, n: int) -> tuple[int, int]:
    return math.ceil(n / 256), math.ceil(m / 128)  # one 128×256 tile a block


def lab5_launcher(kernel: Kernel, a: Any, b: Any, c: Any, *, programmatic: bool = False) -> Launcher:
    """A launch of Lab 5's kernel (``lab5_gemm``, bench/kernels/lab5_epilogue.cu): C (M×N, bf16) = A·Bᵀ, A M×K and
    B N×K, one block per 128×256 tile."""
    (m, k), n = a.shape, b.shape[0]
    return prepare(kernel, _lab5_grid(m, n), 384, SMEM_BYTES, tensor_map(a, (128, 64)), tensor_map(b, (256, 64)),
                   tensor_map(c, (64, 64)), np.int32(m), np.int32(n), np.int32(k), programmatic=programmatic)


def fused_launcher(kernel: Kernel, a: Any, b: Any, c: Any, d: Any, *, alpha: float = 1.0, beta: float = 0.0,
                   bias: Any = None, programmatic: bool = False) -> Launcher:
    """A launch of the fused Lab 5 kernel (:func:`fused_kernel`): D = act(α·A·Bᵀ + β·C + bias), D and C M×N bf16,
    bias one value a column (a device array of the kernel's bias type) or None. With β = 0 the kernel never reads
    C, and ``c`` may be None."""
    (m, k), n = a.shape, b.shape[0]
    tc = tensor_map(c if c is not None else d, (64, 64))
    if beta != 0.0 and c is None:
        raise ValueError("β ≠ 0 needs the source matrix C")
    ptr = bias if bias is not None else np.uint64(0)
    return prepare(kernel, _lab5_grid(m, n), 384, SMEM_BYTES, tensor_map(a, (128, 64)), tensor_map(b, (256, 64)),
                   tc, tensor_map(d, (64, 64)), np.int32(m), np.int32(n), np.int32(k), np.float32(alpha),
                   np.float32(beta), ptr, programmatic=programmatic)


# ------------------------------------------------------------------------------------- operands in and out
_DTYPES = {"bf16": bfloat16, "f16": np.dtype(np.float16), "f32": np.dtype(np.float32)}
_CTYPES = {"bf16": "__nv_bfloat16", "f16": "__half", "f32": "float"}
_COPY_SOURCE = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T narrow(float x);
template <> __device__ __forceinline__ float narrow<float>(float x) { return x; }
template <> __device__ __forceinline__ __half narrow<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// dst (rows × ld, U = bf16 or f16, row-major) = src[r·rs + c·cs] for c < cols, 0 in the padding columns
template <typename T, typename U>
__global__ void pack(const T* src, long long rs, long long cs, int rows, int cols, U* dst, int ld) {
  const long long total = (long long)rows * ld;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += step) {
    const int r = (int)(i / ld), c = (int)(i % ld);
    dst[i] = c < cols ? narrow<U>(widen(src[r * rs + c * cs])) : narrow<U>(0.0f);
  }
}

// dst[r·rs + c·cs] = src (rows × ld, S = bf16, f16 or float, row-major) for c < cols
template <typename S, typename T>
__global__ void unpack(const S* src, int ld, int rows, int cols, T* dst, long long rs, long long cs) {
  const long long total = (long long)rows * cols;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += step) {
    const int r = (int)(i / cols), c = (int)(i % cols);
    dst[r * rs + c * cs] = narrow<T>(widen(src[(long long)r * ld + c]));
  }
}
"""


def _ctype(dtype: np.dtype) -> str:
    tag = next((t for t, d in _DTYPES.items() if d == dtype), None)
    if tag is None:
        raise TypeError(f"matmul multiplies bf16, fp16 or fp32 matrices, not {dtype}")
    return _CTYPES[tag]


def _copy_kernel(kind: str, src: np.dtype, dst: np.dtype) -> Kernel:
    key = f"{kind}<{_ctype(src)}, {_ctype(dst)}>"
    if key not in _compiled:
        _compiled[key] = compile(_COPY_SOURCE, key, filename="matmul_copy.cu")
    return _compiled[key]


def _grid(total: int) -> int:
    return max(1, min(math.ceil(total / 256), 4 if executor_active() else 8 * this_gpu().sms))


def _pack(src: Matrix, element: np.dtype = bfloat16) -> tuple[DeviceArray, Launcher]:
    """A zero-padded, row-major buffer of `element` data (bf16 or f16) for `src` with its row length rounded up to
    a multiple of 8, and the launch that copies `src` into it."""
    rows, cols = src.shape
    ld = -(-cols // 8) * 8
    dst = DeviceArray((rows, ld), element)
    item = src.dtype.itemsize
    return dst, prepare(_copy_kernel("pack", src.dtype, element), _grid(rows * ld), 256, 0, np.uint64(src.ptr),
                        np.int64(src.strides[0] // item), np.int64(src.strides[1] // item), np.int32(rows),
                        np.int32(cols), dst, np.int32(ld))


def _unpack(src: DeviceArray, dst: Matrix) -> Launcher:
    """The launch that copies the first ``dst.shape[1]`` columns of `src` (bf16, f16 or fp32, row-major) into `dst`
    (any strides: a transposed view writes the transpose)."""
    rows, cols = dst.shape
    item = dst.dtype.itemsize
    return prepare(_copy_kernel("unpack", src.dtype, dst.dtype), _grid(rows * cols), 256, 0, src,
                   np.int32(src.shape[1]), np.int32(rows), np.int32(cols), np.uint64(dst.ptr),
                   np.int64(dst.strides[0] // item), np.int64(dst.strides[1] // item))


def _as_matrix(x: Any, what: str) -> Matrix:
    """A device operand as a Matrix: a DeviceArray directly, anything else through cuda.core's StridedMemoryView
    (DLPack or the CUDA array interface), ordered after the work its owner queued on its own stream."""
    if isinstance(x, Matrix):
        return x
    if isinstance(x, DeviceArray):
        if x.ndim != 2:
            raise ValueError(f"{what} must be 2-D, got shape {x.shape}")
        return Matrix(x.ptr, x.shape, x.strides, x.dtype, x)
    from cuda.core.utils import StridedMemoryView

    stream = -1 if executor_active() else int(current()["stream_handle"])
    view = StridedMemoryView.from_any_interface(x, stream_ptr=stream)
    if not view.is_device_accessible:
        raise TypeError(f"{what} is in host memory: pass numpy arrays (copied in and back) or GPU arrays")
    if len(view.shape) != 2:
        raise ValueError(f"{what} must be 2-D, got shape {tuple(view.shape)}")
    dtype = np.dtype(view.dtype)
    strides = view.strides or (view.shape[1], 1)
    return Matrix(int(view.ptr), tuple(view.shape), tuple(s * dtype.itemsize for s in strides), dtype, x)


def _empty_like(x: Any, shape: tuple[int, int]) -> Any:
    if isinstance(x, DeviceArray | Matrix):
        return DeviceArray(shape, x.dtype)
    if hasattr(x, "new_empty"):  # torch
        return x.new_empty(shape)
    import importlib

    return importlib.import_module(type(x).__module__.split(".")[0]).empty_like(x, shape=shape)  # cupy


def _shapes(a: Any, b: Any) -> tuple[int, int, int]:
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ValueError(f"matmul takes two 2-D matrices, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"A is {m}×{k} and B is {k2}×{n}: A's columns must match B's rows")
    return int(m), int(n), int(k)


@dataclass
class Plan:
    """One ``gpu.matmul`` call's launches, prepared once: the copies into padded bf16 or f16 buffers (operands not
    usable in place), the GEMM, the copy of C out of a padded or transposed buffer. Calling it enqueues them all on the
    course stream, in order, without waiting; :meth:`on_stream` moves them to another stream (e.g. one that a
    CUDA graph is capturing), so that the same launches can be replayed without Python between them."""

    launchers: list[Any]
    choice: Choice | None
    result: Any
    keep: list[Any] = field(default_factory=list, repr=False)  # buffers the tensor maps point into

    def __call__(self) -> None:
        for launch in self.launchers:
            launch()

    def on_stream(self, stream: Any) -> Plan:
        """The same launches enqueued on `stream` (a CUstream or its handle as an int) from now on."""
        for launch in self.launchers:
            launch.retarget(stream)
        return self


def _element(a_dtype: Any, kernel: Kernel | None) -> np.dtype:
    """The element type the GEMM multiplies: `kernel`'s, or f16 for f16 inputs and bf16 for all others."""
    if kernel is not None:
        return element_type(kernel)
    return ELEMENTS["f16"] if np.dtype(a_dtype) == ELEMENTS["f16"] else bfloat16


def _gemm_launches(kernel: Kernel | None, m: int, n: int, k: int, a: Any, b_nk: Any, c: Matrix,
                   keep: list[Any], choice: Choice | None = None) -> tuple[list[Any], Choice | None]:
    """The GEMM's launch (and the copy out of C's buffer where C cannot be stored in place): `kernel` as given, or
    :func:`choose`'s kernel for A's element type, swapping A and B (the kernel writes Cᵀ, N×M) where the choice
    says so."""
    element = out = np.dtype(a.dtype)
    if kernel is not None:
        choice, run = None, lambda x, y, z: launcher(kernel, x, y, z)
    else:
        choice = choice or choose(m, n, k)
        out_f32 = c.dtype == np.float32
        out = np.dtype(np.float32) if out_f32 else element
        kern = course_kernel(choice.kernel, choice.bn, "f16" if element == ELEMENTS["f16"] else "bf16", out_f32)
        run = lambda x, y, z: launcher(kern, x, y, z, streamk=choice.streamk)  # noqa: E731
    if choice is not None and choice.swapped:
        a, b_nk, c, m, n = b_nk, a, c.transposed(), n, m
    if c.k_major(out):
        return [run(a, b_nk, c)], choice
    tmp = DeviceArray((m, -(-n // 8) * 8), out)
    keep.append(tmp)
    return [run(a, b_nk, tmp), _unpack(tmp, c)], choice


def matmul(a: Any, b: Any, *, out: Any = None, kernel: Kernel | None = None) -> Any:
    """C = A·B (A: M×K, B: K×N) with the course's final kernel, any M, N, K; returns C (M×N) of the inputs' kind
    and dtype, or writes `out` (an fp32 `out` gets the fp32 accumulators). fp16 inputs are multiplied in f16, bf16
    in bf16, fp32 rounded to bf16. ``kernel=`` runs your own kernel with Lab 7's or Lab 9's parameters."""
    m, n, k = _shapes(a, b)
    if isinstance(a, np.ndarray) != isinstance(b, np.ndarray):
        raise TypeError("A and B must both be numpy arrays or both be GPU arrays")
    if str(a.dtype) != str(b.dtype):
        raise TypeError(f"A and B must have the same dtype, got {a.dtype} and {b.dtype}")
    if isinstance(a, np.ndarray):
        return _matmul_host(a, b, out, kernel, m, n, k)
    return _matmul_device(a, b, out, kernel, m, n, k)


def _matmul_host(a: np.ndarray, b: np.ndarray, out: Any, kernel: Kernel | None, m: int, n: int, k: int) -> Any:
    if a.dtype not in _DTYPES.values():
        raise TypeError(f"matmul multiplies bf16, fp16 or fp32 matrices, not {a.dtype}")
    c = np.zeros((m, n), a.dtype) if out is None else out
    if out is not None and c.shape != (m, n):
        raise ValueError(f"out must be {m}×{n}, got {c.shape}")
    if not k:
        c[...] = 0
    elif m and n:
        kp, nl = -(-k // 8) * 8, -(-n // 8) * 8
        element = _element(a.dtype, kernel)
        ah = np.zeros((m, kp), element)
        ah[:, :k] = a.astype(element)
        bh = np.zeros((n, kp), element)
        bh[:, :k] = b.T.astype(element)
        cdt = np.dtype(np.float32) if kernel is None and c.dtype == np.float32 else element
        da, db, dc = to_device(ah), to_device(bh), DeviceArray((m, nl), cdt)
        keep: list[Any] = []
        launches, _ = _gemm_launches(kernel, m, n, k, da, db, Matrix(dc.ptr, (m, n), dc.strides, cdt, dc), keep)
        for launch in launches:
            launch()
        wait()
        c[...] = dc.to_host()[:, :n].astype(c.dtype)
    return c


def plan(a: Any, b: Any, *, out: Any = None, kernel: Kernel | None = None, choice: Choice | None = None) -> Plan:
    """``gpu.matmul``'s launches for GPU operands A (M×K) and B (K×N), prepared but not run (:class:`Plan`): its
    ``result`` is C (`out`, or a new matrix of the inputs' kind and dtype), filled each time the plan is called.
    For timing and CUDA graphs: ``matmul(a, b)`` is ``plan(a, b)()`` followed by a wait. ``choice`` launches that
    :class:`Choice` instead of :func:`choose`'s (to measure the alternatives a rule rejects)."""
    m, n, k = _shapes(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        raise TypeError("plan takes GPU arrays; matmul also takes numpy arrays")
    if str(a.dtype) != str(b.dtype):
        raise TypeError(f"A and B must have the same dtype, got {a.dtype} and {b.dtype}")
    va, vb = _as_matrix(a, "A"), _as_matrix(b, "B")
    result = out if out is not None else _empty_like(a, (m, n))
    vc = _as_matrix(result, "out")
    if vc.shape != (m, n):
        raise ValueError(f"out must be {m}×{n}, got {vc.shape}")
    keep: list[Any] = [va, vb, vc]
    if not m or not n:
        return Plan([], None, result, keep)
    if not k:  # an empty sum: C = 0
        from .arrays import zeros

        zero = zeros((m, n), bfloat16)
        return Plan([_unpack(zero, vc)], None, result, [*keep, zero])
    launches = []
    element = _element(va.dtype, kernel)
    b_nk = vb.transposed()
    ua, ub = va, b_nk
    if not va.k_major(element):
        ua, copy = _pack(va, element)
        launches.append(copy)
    if not b_nk.k_major(element):
        ub, copy = _pack(b_nk, element)
        launches.append(copy)
    keep += [ua, ub]
    gemm, chosen = _gemm_launches(kernel, m, n, k, ua, ub, vc, keep, choice)
    return Plan(launches + gemm, chosen, result, keep)


def _matmul_device(a: Any, b: Any, out: Any, kernel: Kernel | None, m: int, n: int, k: int) -> Any:
    p = plan(a, b, out=out, kernel=kernel)
    p()
    wait()
    return p.result
