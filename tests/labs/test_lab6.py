"""Lab 6 (persistent blocks, a tile scheduler) graders, both ways: the solution passes; the stubs and the named
plausible wrong answers fail, each on every one of 200 seeds, with a hint naming the mistake. The kernel's wrong
versions are the solution kernel with one change each: those the PTX shows are rejected statically, those only a
run shows are run on the course's PTX executor (two blocks, several tiles each), where the work is checked too.
Also here: the tiered hints (the stubs show tier 0 only). The kernel is graded on the solutions' wrappers of Labs 1 and
2; no Lab 5 notebook is beside the tests, so the course's Lab 5 kernel stands in (test_lab6_carry.py covers a
student's).

Tests marked ``gpu`` run the kernels on an H100 (``pytest -m gpu tests/labs/test_lab6.py``).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
from gpu_lab5679 import caught_where, lab6_run_only, rejects_naming
from hinttools import assert_stubs_show_tier_0_only, assert_tiered, lab_exercises, notebook_regions

from helpers.course import carry, grading, labgen
from helpers.course.checks import lab5, lab6
from helpers.hopper import scheduler

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "lab6_persistent.ipynb"
BENCH = (ROOT / "bench" / "kernels" / "lab6_persistent.cu").read_text()
SEEDS = 200
#: the notebook's kernel cell, solved (the wrong kernels' names are read from it at collection)
SOL_SRC = labgen.solution_namespace(SOLUTION)["LAB6_SRC"]


@pytest.fixture(scope="module")
def sol() -> dict:
    return labgen.solution_namespace(SOLUTION)


@pytest.fixture(autouse=True)
def course_wrappers(monkeypatch, wrappers):
    """The kernel is built on the wrappers of Labs 1 and 2: here the solutions'. No Lab 5 notebook is beside the
    tests, so the course's Lab 5 kernel stands in."""
    monkeypatch.setattr(lab5, "carry_wrappers", lambda checked=True: wrappers)


@pytest.fixture(scope="module")
def stub() -> dict:
    return labgen.solution_namespace(ROOT / "labs" / "lab6_persistent.ipynb")


def _static_only(monkeypatch) -> None:
    """Grade from the compile report and the PTX only: no GPU, and no PTX executor (where helpers.gpu has one)."""
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")


def _executor(monkeypatch) -> None:
    """Run kernels on the course's PTX executor (the default without a GPU; forced here even beside one)."""
    monkeypatch.setenv("HELPERS_EXECUTOR", "force")


def rejected_on_every_seed(monkeypatch, grader, answer, *needles: str, seeds: int = SEEDS) -> None:
    for seed in range(seeds):
        monkeypatch.setattr(grading, "fresh_rng", lambda seed=seed: grading.SeededRng(seed))
        grading.assert_rejects(grader, answer, *needles)


def passes_on_seeds(monkeypatch, grader, answer, seeds: int = 10) -> None:
    for seed in range(seeds):
        monkeypatch.setattr(grading, "fresh_rng", lambda seed=seed: grading.SeededRng(seed))
        grader(answer)


def _swap(src: str, old: str, new: str) -> str:
    assert old in src, old
    return src.replace(old, new)


# ------------------------------------------------------------------------------------------- the notebook
#: the lines of the course's Lab 5 cell that persistence changes (whitespace collapsed): the header comment, the
#: kernel's name, m0 and n0 from the block's place, the producer's ring position, the zeroed accumulators (scale-d = 0
#: now), the consumers' ring position, the wgmma (scale-d), the releases (the ring position), Lab 5's condition on the
#: wait
LAB5_LINES_CHANGED = [
    "// Lab 5: Lab 4's kernel with a TMA-store epilogue and a bf16 C.",
    "// C (M x N, bf16) = A (M x K, bf16) · B (N x K, bf16)ᵀ, all row-major; one block of 384 threads per 128 x 256 "
    "tile:",
    "// out as the TMA store reads it (step 5, part 1).",
    "lab5_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,",
    "const int t = threadIdx.x % 128, wg = threadIdx.x / 128, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN,",
    "for (int j = 0; j < nk; ++j) {", "const int s = j % STAGES;",
    'my_mbar_wait(&empty[s], ((j / STAGES) & 1) ^ 1, "empty", s);',
    "#pragma unroll", "for (int j = 0; j < 128; ++j) d[j] = 0.0f;", "",
    "for (int k = 0; k < nk; ++k) {", "const int s = k % STAGES;",
    'my_mbar_wait(&full[s], (k / STAGES) & 1, "full", s);',
    "for (int kk = 0; kk < BK / 16; ++kk)", "hopper::wgmma_m64n256k16_bf16(d, kslice_desc(a, kk), kslice_desc(b, kk));",
    "if (k > 0 && t == 0) my_mbar_arrive(&empty[(k - 1) % STAGES]);",
    "if (nk > 0 && t == 0) my_mbar_arrive(&empty[(nk - 1) % STAGES]);",
    "if (sub >= 2) { // the store issued from this buffer two sub-tiles ago must have read it", "}",
]


def test_kernel_is_the_course_lab5_cell_with_the_persistence_change(sol):
    """The notebook's kernel is the course's Lab 5 cell with this lab's change: every other line of Lab 5 is there,
    the same (so a student's edits of it are kept); merged with the course's Lab 5 kernel (a student who wrote the
    course's Lab 5), it is exactly the cell's code; the graded source is the wrappers and that code, the student's
    wrappers where Lab 5 used them."""
    from difflib import SequenceMatcher

    from helpers.course.checks._common import course_kernel

    course5 = carry.code_lines(course_kernel("lab5"))
    lab5_cell = labgen.solution_namespace(ROOT / "solutions" / "lab5_epilogue.ipynb")["LAB5_SRC"]
    assert course5 == carry.code_lines(lab5_cell)
    cell = carry.code_lines(sol["LAB6_SRC"])
    key = [" ".join(x.split()) for x in course5.split("\n")], [" ".join(x.split()) for x in cell.split("\n")]
    gone = [x for tag, i1, i2, _, _ in SequenceMatcher(None, *key, autojunk=False).get_opcodes() if tag != "equal"
            for x in key[0][i1:i2]]
    assert gone == LAB5_LINES_CHANGED
    m = carry.merge(course5, course5, cell)
    assert m.text == cell and not m.conflicts and not m.kept
    made, source = lab6._carried(sol["LAB6_SRC"], "// the wrappers\n", None, quiet=True)
    assert not made.previous.yours and source == lab5.HEADER + "// the wrappers\n" + cell
    for mine in ("my_mbar_init(", "my_mbar_wait(", "my_mbar_expect_tx(", "my_mbar_arrive(", "my_tma_load_2d(",
                 "kslice_desc("):
        assert mine in cell, mine
    for theirs in ("hopper::mbar_init(", "HOPPER_WAIT(", "hopper::mbar_arrive(", "hopper::tma_load_2d(",
                   "make_smem_desc", "namespace"):
        assert theirs not in cell, theirs


def test_the_notebook_kernel_computes_the_bench_kernels_bits(sol, wrappers, monkeypatch):
    """bench/kernels/lab6_persistent.cu (the course's Lab 6 kernel, measured on the H100 and timed beside the
    student's) and the notebook's kernel compute the same C, bit for bit, on the course's PTX executor: a shape of
    3 × 3 tiles (partial ones) on two blocks, each taking several tiles."""
    from helpers.course.checks._common import run_gemm
    from helpers.course.checks.lab3 import make_operands

    _executor(monkeypatch)
    cases = [make_operands(np.random.default_rng(6), 264, 520, 200)]
    mine = run_gemm(lab5.HEADER + wrappers + carry.code_lines(sol["LAB6_SRC"]), lab6.LAUNCH, cases, what="notebook")
    bench = run_gemm(BENCH, lab6.LAUNCH, cases, what="bench")
    assert np.isfinite(mine[0].astype(np.float32)).all()
    assert np.array_equal(mine[0].view(np.uint16), bench[0].view(np.uint16))


def test_bench_kernel_differs_from_lab5_in_the_schedule_only():
    """Lab 6's kernel is Lab 5's with the schedule changed: no cluster, no multicast, the same loads and stores."""
    for absent in ("__cluster_dims__", "multicast", "cluster_sync", "mbar_arrive_cluster", "CLUSTER"):
        assert absent not in BENCH, absent
    bench5 = (ROOT / "bench" / "kernels" / "lab5_epilogue.cu").read_text()
    for line in ("hopper::tma_load_2d(a + A_BYTES, &tmap_b, &full[s], k * BK, n0);",
                 "hopper::mbar_init(&empty[s], CONSUMERS);", "stage_subtile(buf, d + 32 * sub, tid);",
                 "hopper::tma_store_2d(&tmap_c, buf, n0 + sub * SUB, m0 + 64 * c);"):
        assert line in bench5 and line in BENCH, line


def test_every_exercise_has_tiered_hints():
    assert_tiered("lab6")
    assert len(lab_exercises("lab6")["lab6-kernel"].regions) == 6


def test_the_stubs_show_tier_0_only():
    assert assert_stubs_show_tier_0_only("lab6_persistent.ipynb", "lab6") == notebook_regions("lab6_persistent.ipynb")


def test_hint_and_answer_entry_points(capsys):
    lab6.hint("lab6-kernel", 1)
    lab6.hint("lab6-order", 2)
    lab6.answer("lab6-loop", sure=True)
    out = capsys.readouterr().out
    assert "Hint 1 · lab6-kernel" in out and "part 6 of 6" in out
    assert "Hint 2 · lab6-order" in out and "in_group % rows" in out
    assert "list(range(block, tiles, blocks))" in out.split("The answer · lab6-loop")[1]


def test_stub_kernel_hides_every_region(stub):
    src = stub["LAB6_SRC"]
    assert src.count('#error "not written yet:') == 6
    for line in ("tile += gridDim.x", "tn = in_group / rows", "k > 0 || kk > 0", "tma_store_wait_read<1>",
                 "my_mbar_arrive(&empty[(it - 1) % STAGES]);  // the tile's last stage"):
        assert line not in src, line


@pytest.mark.parametrize("grader, name", [
    (lab6.check_tile_coords, "tile_coords"), (lab6.check_block_tiles, "block_tiles"),
    (lab6.check_wave_footprint, "wave_footprint")])
def test_stubs_fail(stub, grader, name):
    grading.assert_rejects(grader, stub[name], "not written yet", "hint")


def test_kernel_stub_fails(stub):
    grading.assert_rejects(lambda s: lab6.check_persistent_kernel(s, benchmark=False), stub["LAB6_SRC"],
                           "not written yet")


def test_opening_shows_the_diff_and_lab5s_figures(sol):
    from helpers.course.widgets import roofline

    with contextlib.redirect_stdout(io.StringIO()):
        text = str(lab6.opening(sol["LAB6_SRC"]))
    lab5_4096 = next(m for key, _, m in roofline.ladder(4096) if key == "lab5")
    assert f"{lab5_4096.tflops:.0f} TFLOP/s" in text and lab5_4096.source in text
    assert text.splitlines()[1].startswith("⚠ your Lab 5 kernel was not found")
    assert "--- the course's Lab 5 kernel (Lab 5)" in text and "+++ Lab 6: the kernel graded" in text
    assert "+    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {" in text
    # a line the tile loop only indents is shown unchanged
    assert "\n         const unsigned char* b = smem + s * STAGE_BYTES + A_BYTES;" in text
    assert "-      const unsigned char* b" not in text
    assert "cluster" not in text.lower().replace("no cluster", "")


def test_lab6_rung_reads_not_measured_yet_until_the_h100_run():
    """The results recorded so far measured the clustered kernel (today's Lab 7) as "lab6": that figure is Lab 7's,
    and Lab 6's rung is not measured yet until a run of bench/ladder.py (which marks its numbering) records it."""
    from helpers.course import ladder
    from helpers.course.widgets import roofline

    data = ladder.load()
    if int(data.get("lab_numbering", 1)) >= ladder.LAB_NUMBERING:
        pytest.skip("bench/results/ladder.json was recorded with today's numbering")
    rungs = {r.key: r for r in ladder.rungs((4096, 4096, 4096), data)}
    assert rungs["lab6"].tflops is None and "not measured yet" in str(rungs["lab6"])
    old_clusters = data["rungs"]["lab6"]["speed"]
    assert rungs["lab7"].tflops == next(s["tflops"] for s in old_clusters if s["shape"] == [4096, 4096, 4096])
    assert roofline.measured("lab6", (4096, 4096, 4096)) is None
    assert roofline.measured("lab7", (4096, 4096, 4096)) is not None


# ------------------------------------------------------------------------------------------- 1 · raster order
def test_order_solution_passes(sol, monkeypatch):
    passes_on_seeds(monkeypatch, lab6.check_tile_coords, sol["tile_coords"])


def test_order_matches_the_device_function():
    """scheduler.grouped (vectorised) and grouped_coords (the kernel's arithmetic) agree, and are permutations."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        tm, tn, g = int(rng.integers(1, 50)), int(rng.integers(1, 50)), int(rng.integers(1, 20))
        v = scheduler.grouped(tm, tn, g)
        assert not scheduler.permutation_problems(v, tm, tn)
        t = int(rng.integers(0, tm * tn))
        assert tuple(v[t]) == scheduler.grouped_coords(t, tm, tn, g)


def _no_partial_group(t, tm, tn, g):
    per = g * tn
    first = (t // per) * g
    return first + (t % per) % g, (t % per) // g


@pytest.mark.parametrize("wrong, needle", [
    (lambda t, tm, tn, g: (t // tn, t % tn), "down a column"),
    (lambda t, tm, tn, g: (t % tm, t // tm), "column-major"),
    (_no_partial_group, "fewer than `group` rows"),
    (lambda t, tm, tn, g: scheduler.grouped_coords(min(t + 1, tm * tn - 1), tm, tn, g), "not a permutation"),
    (lambda t, tm, tn, g: [scheduler.grouped_coords(t, tm, tn, g)], "pair (tm, tn)"),
])
def test_order_wrong_answers_fail(monkeypatch, wrong, needle):
    rejected_on_every_seed(monkeypatch, lab6.check_tile_coords, wrong, needle)


# ------------------------------------------------------------------------------------------- 2 · the loop
def test_loop_solution_passes(sol, monkeypatch):
    passes_on_seeds(monkeypatch, lab6.check_block_tiles, sol["block_tiles"])


def _blocked(b, blocks, tiles):
    size = -(-tiles // blocks)
    return list(range(b * size, min(tiles, (b + 1) * size)))


@pytest.mark.parametrize("wrong, needle", [
    (lambda b, n, t: list(range(b, t)), "step by the number of blocks"),  # steps by 1: every tile several times
    (lambda b, n, t: list(range(b, t // n * n, n)), "the last wave is partial"),  # skips the last, partial wave
    (lambda b, n, t: list(range(b + 1, t, n)), "starts at t = b"),
    (lambda b, n, t: list(range(b, t, max(1, n - 1))), "taken"),
    (lambda b, n, t: list(range(b, t + 1, n)), "outside"),
    (_blocked, "contiguous chunks"),
    (lambda b, n, t: list(range(b, t, n))[::-1], "the tiles of block"),
])
def test_loop_wrong_answers_fail(monkeypatch, wrong, needle):
    rejected_on_every_seed(monkeypatch, lab6.check_block_tiles, wrong, needle)


# ------------------------------------------------------------------------------------------- 3 · footprint
def test_footprint_solution_passes(sol, monkeypatch):
    passes_on_seeds(monkeypatch, lab6.check_wave_footprint, sol["wave_footprint"])


def _panels(chunk, K, a_rows=128, b_rows=256):
    return len(set(chunk[:, 0].tolist())) * a_rows * K * 2, len(set(chunk[:, 1].tolist())) * b_rows * K * 2


def _per_tile(v, blocks, wave, K):
    n = len(v[wave * blocks:(wave + 1) * blocks])
    return n * 128 * K * 2, n * 256 * K * 2


def _elements(v, blocks, wave, K):
    f = scheduler.wave_footprint(v, blocks, wave, 128, 256, K)
    return f.a_panels * 128 * K, f.b_panels * 256 * K


def _square_panels(v, blocks, wave, K):
    return _panels(v[wave * blocks:(wave + 1) * blocks], K, 256, 256)


def _first_wave_only(v, blocks, wave, K):
    return _panels(v[:blocks], K)


def _one_more_tile(v, blocks, wave, K):
    return _panels(v[wave * blocks:(wave + 1) * blocks + 1], K)


def _one_tile_short(v, blocks, wave, K):
    return _panels(v[wave * blocks:min((wave + 1) * blocks, len(v)) - 1], K)


def _full_waves_only(v, blocks, wave, K):
    return _panels(v[[(wave * blocks + i) % len(v) for i in range(blocks)]], K)


@pytest.mark.parametrize("wrong", [_one_more_tile, _one_tile_short, _full_waves_only])
def test_footprint_wave_boundaries_are_deterministic(monkeypatch, wrong):
    rejected_on_every_seed(monkeypatch, lab6.check_wave_footprint, wrong, "of the visit order")


@pytest.mark.parametrize("wrong, needle", [(_per_tile, "distinct"), (_elements, "2 bytes"),
                                           (_square_panels, "an A panel is 128 rows"), (_first_wave_only, "wave 3"),
                                           (lambda v, b, w, K: None, "return (bytes of A")])
def test_footprint_wrong_answers_fail(monkeypatch, wrong, needle):
    rejected_on_every_seed(monkeypatch, lab6.check_wave_footprint, wrong, needle)


# ------------------------------------------------------------------------------------------- 4 · the kernel
_LOOP = "for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {"
_WAIT = "        if (t == 0) hopper::tma_store_wait_read<1>();\n"


def wrong_kernels(src: str) -> dict[str, tuple[str, str]]:
    """Plausible wrong versions of the Lab 6 kernel the PTX shows: name -> (source, words the failure must hold)."""
    return {
        "the loop steps by 1 (every tile computed several times)": (
            src.replace(_LOOP, "for (int tile = blockIdx.x; tile < tiles; ++tile) {"), "steps by the grid size"),
        "scale-d left at 1 on a tile's first wgmma (accumulates the previous tile)": (
            _swap(src, "k > 0 || kk > 0);", "true);"), "previous tile's sums"),
        "the store buffer reused before the previous tile's store was waited for (Lab 5's wait)": (
            _swap(src, _WAIT, "        if (sub >= 2 && t == 0) hopper::tma_store_wait_read<1>();\n"),
            "overwrite-in-flight"),
        "clusters of 2 left on": (_swap(src, "__launch_bounds__(THREADS, 1)\n", "__launch_bounds__(THREADS, 1) "
                                        "__cluster_dims__(2, 1, 1)\n"), "without clusters"),
        "no fence": (_swap(src, "        hopper::fence_proxy_async();", "       "), "unfenced-store"),
    }


@pytest.fixture(scope="module")
def wrong(sol) -> dict:
    return wrong_kernels(sol["LAB6_SRC"])


def test_kernel_solution_passes_without_gpu(sol, monkeypatch):
    _static_only(monkeypatch)
    lab6.check_persistent_kernel(sol["LAB6_SRC"])


@pytest.mark.parametrize("name", list(wrong_kernels(SOL_SRC)))
def test_kernel_wrong_versions_fail_statically(wrong, name, monkeypatch):
    """The static checks read the PTX, the same on every seed: one run covers them all."""
    _static_only(monkeypatch)
    src, needle = wrong[name]
    grading.assert_rejects(lambda s: lab6.check_persistent_kernel(s, benchmark=False), src, needle)


def test_zeroing_the_accumulators_per_tile_is_accepted(sol, monkeypatch):
    """scale-d = 1 throughout is right when the consumers zero the 128 registers at the start of every tile."""
    _static_only(monkeypatch)
    src = _swap(sol["LAB6_SRC"], "k > 0 || kk > 0);", "true);")
    src = _swap(src, "      const int m0 = tm * BM, n0 = tn * BN;\n    // ### END SOLUTION\n",
                "      const int m0 = tm * BM, n0 = tn * BN;\n    // ### END SOLUTION\n#pragma unroll\n"
                "      for (int j = 0; j < 128; ++j) d[j] = 0.0f;\n")
    with contextlib.redirect_stdout(io.StringIO()) as out:
        lab6.check_persistent_kernel(src, benchmark=False)
    assert "the accumulators are zeroed before each tile" in out.getvalue()


def test_launch_spec_matches_the_kernel():
    assert lab6.LAUNCH.smem == 4 * 48 * 1024 + 33 * 1024 and lab6.LAUNCH.box_b == (256, 64)
    assert lab6.LAUNCH.cluster == 1 and lab6.LAUNCH.persistent_unit == (128, 256)


@pytest.mark.gpu
def test_kernel_solution_runs_on_the_h100(sol):
    """Random shapes, then 4096³, 8192³ and two non-square shapes beside cuBLAS (the ratios go in the report)."""
    lab6.check_persistent_kernel(sol["LAB6_SRC"], sizes=(4096, 8192, (8192, 4096, 8192), (4096, 8192, 2048)))


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(lab6_run_only(SOL_SRC)))
def test_run_only_wrong_kernels_fail_on_the_h100(sol, name):
    src, needles, every_time = lab6_run_only(sol["LAB6_SRC"])[name]
    rejects_naming(lambda s: lab6.check_persistent_kernel(s, benchmark=False), src, caught_where(every_time), *needles)


# ------------------------------------------------------------------------------------------- on the PTX executor
def test_kernel_solution_passes_on_the_executor(sol, monkeypatch, capsys):
    """Two blocks, several tiles each: the persistent loop, the ring and the stores across tiles all run; the
    work (every tile stored once, by its block) is checked."""
    _executor(monkeypatch)
    lab6.check_persistent_kernel(sol["LAB6_SRC"])
    out = capsys.readouterr().out
    each = re.findall(r"✓ ran on the emulator \([^)]*hazard mode\): M=\d+, N=\d+, K=\d+ \((\d+) tiles on 2 blocks, "
                      r"(\d+)(?: or \d+)? tiles each in turn\)", out)
    assert each == [("9", "4"), ("10", "5")], out  # 5 and 4 tiles (the last wave partial); two raster groups
    assert out.count("the work, as the emulator recorded it: each of the") == 2, out
    assert out.count("every stage released once per fill, by all its consumers") == 2, out


@pytest.mark.parametrize("seed", range(40))
def test_emulator_shape_wraps_the_ring_and_gives_every_block_several_tiles(seed):
    from helpers.course.checks.lab5 import _emulator_shapes

    shapes = _emulator_shapes(grading.SeededRng(seed), lab6.LAUNCH)
    # 5 and 4 tiles per block, the ring wraps; then 10 rows of tiles: two raster groups of 8 and 2 rows
    assert [(-(-m // 128), -(-n // 256), -(-k // 64)) for m, n, k in shapes] == [(3, 3, 4), (10, 1, 2)]
    for m, n, k in shapes:
        assert m % 128 and n % 256 and m % 8 == n % 8 == k % 8 == 0 and len({m, n, k}) == 3  # partial tiles


@pytest.mark.parametrize("name", list(lab6_run_only(SOL_SRC)))
def test_run_only_wrong_kernels_pass_statically_and_fail_on_the_executor(sol, monkeypatch, name):
    src, needles, _ = lab6_run_only(sol["LAB6_SRC"])[name]
    _static_only(monkeypatch)
    with contextlib.redirect_stdout(io.StringIO()):
        lab6.check_persistent_kernel(src, benchmark=False)  # the PTX cannot tell
    _executor(monkeypatch)
    rejects_naming(lambda s: lab6.check_persistent_kernel(s, benchmark=False), src, "on the emulator", *needles)


# ------------------------------------------------------------------------------------------- the work
WORK_MISTAKES = {
    "the loop steps by one block too few (every tile from the block's own on)": (
        lambda s: s.replace(_LOOP, "for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x - 1) {"),
        ("was computed and stored 2 times", "by block (0,0), block (1,0)", "step by the grid size")),
    "the two blocks swap their tiles": (
        lambda s: s.replace(_LOOP, "for (int tile = gridDim.x - 1 - blockIdx.x; tile < tiles; tile += gridDim.x) {"),
        ("which the schedule gives block 0", "was stored by block (1,0)")),
}


@pytest.mark.parametrize("name", list(WORK_MISTAKES))
def test_right_c_with_the_wrong_work_is_rejected_on_the_executor(sol, monkeypatch, name):
    """C comes out right; the work does not: a tile computed twice, or by the wrong block."""
    change, needles = WORK_MISTAKES[name]
    _executor(monkeypatch)
    text = rejects_naming(lambda s: lab6.check_persistent_kernel(s, benchmark=False), change(sol["LAB6_SRC"]),
                          *needles)
    assert "C is right" in text or "the schedule gives it to" in text
