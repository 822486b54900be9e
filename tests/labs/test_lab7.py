"""Lab 7 (clusters and multicast on Lab 6's persistent kernel) graders, both ways: the solution passes; the stubs and
the named plausible wrong answers fail, each on every one of 200 seeds, with a hint naming the mistake. The cluster
model itself rejects every wrong protocol on 200 random problems. The kernel's wrong versions are the solution kernel
with one change each: those the PTX shows are rejected statically, those only a run shows are run on the course's PTX
executor (two clusters, several pairs each). Also here: the tiered hints (the stubs show tier 0 only; the kernel's
comments do not give the barrier counts away). The kernel is graded on the solutions' wrappers of Labs 1 and 2; no Lab 6
notebook is beside the tests, so the course's Lab 6 kernel stands in (test_lab7_carry.py covers a student's).

Tests marked ``gpu`` run the kernels on an H100 (``pytest -m gpu tests/labs/test_lab7.py``).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
from gpu_lab5679 import caught_where, lab7_run_only, rejects_naming
from hinttools import (
    assert_stubs_show_tier_0_only,
    assert_tiered,
    comments_outside_regions,
    lab_exercises,
    notebook_regions,
)

from helpers.course import carry, grading, labgen
from helpers.course.checks import lab5, lab7
from helpers.hopper import cluster
from helpers.hopper import pipeline as pl
from helpers.hopper.mbarrier import MBarrierError

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "lab7_clusters.ipynb"
BENCH = (ROOT / "bench" / "kernels" / "lab7_clusters.cu").read_text()
SEEDS = 200
#: the notebook's kernel cell, solved (the wrong kernels' names are read from it at collection)
SOL_SRC = labgen.solution_namespace(SOLUTION)["LAB7_SRC"]


@pytest.fixture(scope="module")
def sol() -> dict:
    return labgen.solution_namespace(SOLUTION)


@pytest.fixture(scope="module")
def stub() -> dict:
    return labgen.solution_namespace(ROOT / "labs" / "lab7_clusters.ipynb")


@pytest.fixture(autouse=True)
def course_wrappers(monkeypatch, wrappers):
    """The kernel is built on the wrappers of Labs 1 and 2: here the solutions'. No Lab 6 notebook is beside the
    tests, so the course's Lab 6 kernel stands in."""
    monkeypatch.setattr(lab5, "carry_wrappers", lambda checked=True: wrappers)


def _static_only(monkeypatch) -> None:
    """Grade from the compile report and the PTX only: no GPU, and no PTX executor (where helpers.gpu has one)."""
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")


def rejected_on_every_seed(monkeypatch, grader, *answer_and_needles, seeds: int = SEEDS, answers: int = 1) -> None:
    answer, needles = answer_and_needles[:answers], answer_and_needles[answers:]
    for seed in range(seeds):
        monkeypatch.setattr(grading, "fresh_rng", lambda seed=seed: grading.SeededRng(seed))
        grading.assert_rejects(lambda a: grader(*a), answer, *needles)


def passes_on_seeds(monkeypatch, grader, *answer, seeds: int = 10) -> None:
    for seed in range(seeds):
        monkeypatch.setattr(grading, "fresh_rng", lambda seed=seed: grading.SeededRng(seed))
        grader(*answer)


# ------------------------------------------------------------------------------------------- the notebook
#: the lines of the course's Lab 6 cell that the clusters change (whitespace collapsed): the header comment, the
#: kernel's declaration and name, the tiles counted (pairs now), empty[s]'s count, the block barrier after the set-up
#: (a cluster barrier now), the loops over tiles (over pairs), the B load (a multicast of half), the releases (on both
#: CTAs); and a cluster barrier comes before the kernel's end
LAB6_LINES_CHANGED = [
    "// Lab 6: Lab 5's kernel made persistent, with a tile scheduler.",
    "// C (M x N, bf16) = A (M x K, bf16) · B (N x K, bf16)ᵀ, all row-major; one block of 384 threads per SM, each "
    "taking",
    "// 128 x 256 tiles of C in turn (tiles b, b + gridDim.x, … of a grouped raster order; the ring runs on across "
    "them):",
    'extern "C" __global__ void __launch_bounds__(THREADS, 1)',
    "lab6_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,",
    "const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n; // C's tiles",
    "my_mbar_init(&empty[s], CONSUMERS);", "__syncthreads();",
    "for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {", "int tm, tn;",
    "tile_coords(tile, tiles_m, tiles_n, tm, tn);", "const int m0 = tm * BM, n0 = tn * BN;",
    "my_tma_load_2d(smem + s * STAGE_BYTES + A_BYTES, &tmap_b, &full[s], j * BK, n0);",
    "for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {", "int tm, tn;",
    "tile_coords(tile, tiles_m, tiles_n, tm, tn);", "const int m0 = tm * BM, n0 = tn * BN;",
    "if (k > 0 && t == 0) my_mbar_arrive(&empty[(it - 1) % STAGES]);",
    "if (nk > 0 && t == 0) my_mbar_arrive(&empty[(it - 1) % STAGES]); // the tile's last stage",
]


def test_kernel_is_the_course_lab6_cell_with_the_cluster_change(sol):
    """The notebook's kernel is the course's Lab 6 cell with this lab's change: every other line of Lab 6 is there,
    the same (so a student's edits of it are kept); merged with the course's Lab 6 kernel, it is exactly the cell's
    code; the graded source is the wrappers and that code."""
    from difflib import SequenceMatcher

    from helpers.course.checks._common import course_kernel

    course6 = carry.code_lines(course_kernel("lab6"))
    lab6_cell = labgen.solution_namespace(ROOT / "solutions" / "lab6_persistent.ipynb")["LAB6_SRC"]
    assert course6 == carry.code_lines(lab6_cell)
    cell = carry.code_lines(sol["LAB7_SRC"])
    key = [" ".join(x.split()) for x in course6.split("\n")], [" ".join(x.split()) for x in cell.split("\n")]
    gone = [x for tag, i1, i2, _, _ in SequenceMatcher(None, *key, autojunk=False).get_opcodes() if tag != "equal"
            for x in key[0][i1:i2]]
    assert gone == LAB6_LINES_CHANGED
    m = carry.merge(course6, course6, cell)
    assert m.text == cell and not m.conflicts and not m.kept
    made, source = lab7._carried(sol["LAB7_SRC"], "// the wrappers\n", None, quiet=True)
    assert not made.previous.yours and source == lab5.HEADER + "// the wrappers\n" + cell
    for mine in ("my_mbar_init(", "my_mbar_wait(", "my_mbar_expect_tx(", "my_tma_load_2d(", "kslice_desc(",
                 "tile_coords(p, pairs_m, pairs_n, pm, pn);"):
        assert mine in cell, mine


def test_the_notebook_kernel_computes_the_bench_kernels_bits(sol, wrappers, monkeypatch):
    """bench/kernels/lab7_clusters.cu (the course's Lab 7 kernel, measured on the H100 and timed beside the
    student's) and the notebook's kernel compute the same C, bit for bit, on the course's PTX executor: two
    clusters, several pairs each, partial tiles."""
    from helpers.course.checks._common import run_gemm
    from helpers.course.checks.lab3 import make_operands

    _executor(monkeypatch)
    cases = [make_operands(np.random.default_rng(7), 392, 520, 200)]
    mine = run_gemm(lab5.HEADER + wrappers + carry.code_lines(sol["LAB7_SRC"]), lab7.LAUNCH, cases, what="notebook")
    bench = run_gemm(BENCH, lab7.LAUNCH, cases, what="bench")
    assert np.isfinite(mine[0].astype(np.float32)).all()
    assert np.array_equal(mine[0].view(np.uint16), bench[0].view(np.uint16))


# ------------------------------------------------------------------------------------------- tiered hints
def test_every_exercise_has_tiered_hints():
    assert_tiered("lab7")
    assert len(lab_exercises("lab7")["lab7-kernel"].regions) == 7
    assert len(lab_exercises("lab7")["lab7-multicast"].regions) == 2


def test_the_stubs_show_tier_0_only():
    assert assert_stubs_show_tier_0_only("lab7_clusters.ipynb", "lab7") == notebook_regions("lab7_clusters.ipynb")


def test_kernel_comments_do_not_give_the_counts_away(sol):
    comments = comments_outside_regions(sol["LAB7_SRC"])
    for phrase in ("CONSUMERS × CLUSTER", "1 arrival", "WHOLE stage", "mask"):
        assert phrase not in comments, phrase


def test_hint_and_answer_entry_points(capsys):
    lab7.hint("lab7-kernel", 1)
    lab7.hint("lab7-multicast", 2, part=1)
    lab7.answer("lab7-release", sure=True)
    out = capsys.readouterr().out
    assert "Hint 1 · lab7-kernel" in out and "part 7 of 7" in out
    assert "Hint 2 · lab7-multicast" in out and "ctx.consumers · ctx.size" in out
    assert "ctx.arrive(ctx.mapa(ctx.empty[s], cta))" in out.split("The answer · lab7-release")[1]


def test_stub_kernel_hides_every_region(stub):
    src = stub["LAB7_SRC"]
    assert src.count('#error "not written yet:') == 7
    for line in ("CONSUMERS * CLUSTER);", "(1u << CLUSTER) - 1", "mbar_arrive_cluster(&empty", "p += clusters"):
        assert line not in src


@pytest.mark.parametrize("grader, names", [
    (lab7.check_produce, ("init_barriers", "produce")), (lab7.check_release, ("release",))])
def test_stubs_fail(stub, grader, names):
    grading.assert_rejects(lambda a: grader(*a), tuple(stub[n] for n in names), "not written yet", "hint")


def test_kernel_stub_fails(stub):
    grading.assert_rejects(lambda s: lab7.check_cluster_kernel(s, benchmark=False), stub["LAB7_SRC"],
                           "not written yet")


def test_opening_shows_the_diff_from_lab6_and_its_figures(sol):
    """The diff from Lab 6's kernel: the cluster parts only (the persistent loop, scale-d and the epilogue's waits are
    Lab 6's); Lab 6's speed where measured, else "not measured yet"."""
    with contextlib.redirect_stdout(io.StringIO()):
        text = str(lab7.opening(sol["LAB7_SRC"]))
    from helpers.course.widgets import roofline

    lab6_4096 = next(m for key, _, m in roofline.ladder(4096) if key == "lab6")
    assert text.splitlines()[1].startswith("⚠ your Lab 6 kernel was not found")
    assert "--- the course's Lab 6 kernel (Lab 6)" in text and "+++ Lab 7: the kernel graded" in text
    assert (f"{lab6_4096.tflops:.0f} TFLOP/s" in text) if lab6_4096 else \
        "the course's Lab 6 kernel at 4096³: not measured yet" in text
    assert '+extern "C" __global__ void __launch_bounds__(THREADS, 1) __cluster_dims__(CLUSTER, 1, 1)' in text
    assert "+          hopper::tma_load_2d_multicast(" in text and "+  hopper::cluster_sync();" in text
    assert "scale-d" not in "\n".join(ln for ln in text.splitlines() if ln[:1] in "+-")


# ------------------------------------------------------------------------------------------- 1 · the producer
def _produce(mask=None, expect=None, b_offset=None, b_rows=None, a_multicast=False):
    def produce(ctx, s, k, m0, n0):
        base = s * ctx.STAGE_BYTES
        ctx.arrive_expect_tx(ctx.full[s], expect(ctx) if expect else ctx.STAGE_BYTES)
        ctx.tma_load("A", base, (k * ctx.BK, m0), ctx.full[s], mask=3 if a_multicast else None)
        ctx.tma_load("B", base + ctx.A_BYTES + (b_offset(ctx) if b_offset else ctx.rank * ctx.B_HALF),
                     (k * ctx.BK, n0 + (b_rows(ctx) if b_rows else ctx.rank * ctx.B_ROWS)), ctx.full[s],
                     mask=mask(ctx) if mask else (1 << ctx.size) - 1)

    return produce


def _init(empty, full=1):
    def init(ctx):
        for s in range(ctx.stages):
            ctx.init(ctx.full[s], full)
            ctx.init(ctx.empty[s], empty(ctx))

    return init


GOOD_INIT = _init(lambda ctx: ctx.consumers * ctx.size)
WRONG_PRODUCERS = {
    "mask 0b01": (_produce(mask=lambda ctx: 1), "0b11"),
    "mask of this CTA only": (_produce(mask=lambda ctx: 1 << ctx.rank), "only to this CTA"),
    "mask 0b10": (_produce(mask=lambda ctx: 2), "0b11"),
    "expect-tx of the local operands only": (_produce(expect=lambda ctx: ctx.A_BYTES + ctx.B_HALF),
                                             "only this CTA's own loads"),
    "expect-tx of A + the whole B + the half again": (_produce(expect=lambda ctx: ctx.STAGE_BYTES + ctx.B_HALF),
                                                      "STAGE_BYTES"),
    "both shares at the same offset": (_produce(b_offset=lambda ctx: 0), "must not land on top"),
    "both shares the same rows": (_produce(b_rows=lambda ctx: 0), "B_ROWS"),
    "A multicast too": (_produce(a_multicast=True), "one multicast load"),
}
WRONG_INITS = {
    "empty counts this CTA's consumers only": (_init(lambda ctx: ctx.consumers), "forgets the peer"),
    "empty counts 1": (_init(lambda ctx: 1), "every consumer warpgroup of every CTA"),
    "full counts 2": (_init(lambda ctx: 4, full=2), "full[s]'s arrival count"),
}


def test_produce_solution_passes(sol, monkeypatch):
    passes_on_seeds(monkeypatch, lab7.check_produce, sol["init_barriers"], sol["produce"], seeds=3)


@pytest.mark.parametrize("name", list(WRONG_PRODUCERS))
def test_produce_wrong_answers_fail(monkeypatch, name):
    wrong, needle = WRONG_PRODUCERS[name]
    rejected_on_every_seed(monkeypatch, lab7.check_produce, GOOD_INIT, wrong, needle, answers=2)


@pytest.mark.parametrize("name", list(WRONG_INITS))
def test_init_wrong_answers_fail(monkeypatch, name):
    wrong, needle = WRONG_INITS[name]
    needle = "2 counts" if False else needle
    rejected_on_every_seed(monkeypatch, lab7.check_produce, wrong, cluster.reference_produce,
                           needle if "peer" not in needle else "both CTAs", answers=2)


# ------------------------------------------------------------------------------------------- 5 · the release
def _release_local_twice(ctx, s):
    for _ in range(ctx.size):
        ctx.arrive(ctx.empty[s])


def _release_local_once(ctx, s):
    ctx.arrive(ctx.empty[s])


def _release_peer_only(ctx, s):
    ctx.arrive(ctx.mapa(ctx.empty[s], 1 - ctx.rank))


def _release_full(ctx, s):
    for cta in range(ctx.size):
        ctx.arrive(ctx.mapa(ctx.full[s], cta))


WRONG_RELEASES = {
    "remote arrival sent to the local barrier": (_release_local_twice, "own empty[s]"),
    "only the local barrier": (_release_local_once, "for both CTAs"),
    "only the peer's barrier": (_release_peer_only, "this CTA's empty[s] too"),
    "arrives on full": (_release_full, "not another barrier"),
}


def test_release_solution_passes(sol, monkeypatch):
    passes_on_seeds(monkeypatch, lab7.check_release, sol["release"], seeds=3)


@pytest.mark.parametrize("name", list(WRONG_RELEASES))
def test_release_wrong_answers_fail(monkeypatch, name):
    wrong, needle = WRONG_RELEASES[name]
    rejected_on_every_seed(monkeypatch, lab7.check_release, wrong, needle)


# ------------------------------------------------------------------------------------------- the cluster model
MODEL_CASES = {
    **{f"producer: {k}": (GOOD_INIT, v[0], cluster.reference_release) for k, v in WRONG_PRODUCERS.items()},
    **{f"init: {k}": (v[0], cluster.reference_produce, cluster.reference_release) for k, v in WRONG_INITS.items()},
    **{f"release: {k}": (cluster.reference_init, cluster.reference_produce, v[0]) for k, v in WRONG_RELEASES.items()},
}


@pytest.mark.parametrize("name", list(MODEL_CASES))
def test_cluster_model_rejects_every_wrong_protocol(name):
    """Not only the graders' call probes: the model itself catches each wrong protocol, on 100 random problems (the
    graders' own tests above run 200 seeds each)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    for _ in range(100):
        a, b, pairs = lab7.model_problem(rng)
        with pytest.raises((cluster.ClusterError, MBarrierError)):
            cluster.run_mainloop(a, b, pairs, *MODEL_CASES[name])


def test_cluster_model_accepts_the_reference_on_random_problems():
    rng = np.random.default_rng(11)
    for _ in range(20):
        a, b, pairs = lab7.model_problem(rng)
        models = cluster.run_mainloop(a, b, pairs, cluster.reference_init, cluster.reference_produce,
                                      cluster.reference_release)
        steps = models[0].steps
        assert all(m.reads == 2 * 2 * len(pairs) * steps for m in models)


# ------------------------------------------------------------------------------------------- 6 · the kernel
def _swap(src: str, old: str, new: str) -> str:
    assert src.count(old) >= 1, old
    return src.replace(old, new)


def wrong_kernels(src: str) -> dict[str, tuple[str, str]]:
    """Plausible wrong versions of the Lab 7 kernel: name -> (source, words the failure must contain)."""
    return {
        "multicast mask 0b01": (_swap(src, "(1u << CLUSTER) - 1);", "1u);"), "multicast mask"),
        "multicast mask of this CTA": (_swap(src, "(1u << CLUSTER) - 1);", "1u << rank);"), "multicast mask"),
        "expect-tx of the local operands": (_swap(src, "my_mbar_expect_tx(&full[s], STAGE_BYTES)",
                                                  "my_mbar_expect_tx(&full[s], A_BYTES + B_HALF)"), "32768"),
        "EMPTY forgets the peer's consumers": (_swap(src, "mbar_init(&empty[s], CONSUMERS * CLUSTER)",
                                                     "mbar_init(&empty[s], CONSUMERS)"), "this CTA's consumers only"),
        "remote arrival sent to the local barrier": (_swap(src, "&empty[(it - 1) % STAGES], t)",
                                                           "&empty[(it - 1) % STAGES], rank)"), "own rank"),
        "remote arrivals all to CTA 0": (_swap(src, "&empty[(it - 1) % STAGES], t)",
                                               "&empty[(it - 1) % STAGES], 0)"), "CTA ['0']"),
        "plain local arrivals": (_swap(src, "hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], t)",
                                       "my_mbar_arrive(&empty[(it - 1) % STAGES])"), "other CTA's empty"),
        "the .release.cluster form": (
            _swap(src, "hopper::mbar_arrive_cluster(", "hopper::mbar_arrive_cluster_release("),
            "in one run at 8192³: 531 TFLOP/s"),
        "no cluster barrier at the end": (_swap(src, "  hopper::cluster_sync();\n}", "}"), "at the end"),
        "no cluster barrier after init": (_swap(src, "  hopper::cluster_sync();  // both", "  // both"),
                                          "before any copy"),
        "no cluster dims": (_swap(src, " __cluster_dims__(CLUSTER, 1, 1)", ""), "reqnctapercluster"),
        "Lab 5's epilogue wait (only from sub-tile 2)": (_swap(
            src, "        if (t == 0) hopper::tma_store_wait_read<1>();\n        hopper::named_bar_sync(1 + c, 128);\n",
            "        if (sub >= 2) {\n          if (t == 0) hopper::tma_store_wait_read<1>();\n"
            "          hopper::named_bar_sync(1 + c, 128);\n        }\n"), "overwrite-in-flight"),
        "no fence": (_swap(src, "        hopper::fence_proxy_async();", "       "), "unfenced-store"),
    }


@pytest.fixture(scope="module")
def wrong(sol) -> dict:
    return wrong_kernels(sol["LAB7_SRC"])


def test_kernel_solution_passes_without_gpu(sol, monkeypatch):
    _static_only(monkeypatch)
    lab7.check_cluster_kernel(sol["LAB7_SRC"])


@pytest.mark.parametrize("name", list(wrong_kernels(SOL_SRC)))
def test_kernel_wrong_versions_fail_statically(wrong, name, monkeypatch):
    """The static checks read the PTX, the same on every seed: one run covers them all."""
    _static_only(monkeypatch)
    src, needle = wrong[name]
    grading.assert_rejects(lambda s: lab7.check_cluster_kernel(s, benchmark=False), src, needle)


def test_launch_spec_matches_the_bench():
    ladder = (ROOT / "bench" / "ladder.py").read_text()
    assert "SMEM_EPI = 4 * 48 * 1024 + 32 * 1024 + 1024" in ladder and lab7.LAUNCH.smem == 4 * 48 * 1024 + 33 * 1024
    assert lab7.LAUNCH.box_b == (128, 64) and lab7.LAUNCH.cluster == 2


@pytest.mark.gpu
def test_kernel_solution_runs_on_the_h100(sol):
    """Random shapes, then 4096³, 8192³ and two non-square shapes beside cuBLAS (the ratios go in the report)."""
    lab7.check_cluster_kernel(sol["LAB7_SRC"], sizes=(4096, 8192, (8192, 4096, 8192), (4096, 8192, 2048)))


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(lab7_run_only(SOL_SRC)))
def test_run_only_wrong_kernels_fail_on_the_h100(sol, name):
    src, needles, every_time = lab7_run_only(sol["LAB7_SRC"])[name]
    rejects_naming(lambda s: lab7.check_cluster_kernel(s, benchmark=False), src, caught_where(every_time), *needles)


def right_kernels(src: str) -> dict[str, str]:
    """Right versions of the Lab 7 kernel in other spellings: the mask, the bytes and the EMPTY count computed from
    the cluster's size at run time (hopper::cluster_nctarank()) instead of the constants."""
    size = "hopper::cluster_nctarank()"
    return {
        "mask from the cluster's size": _swap(src, "(1u << CLUSTER) - 1);", f"(1u << {size}) - 1);"),
        "mask as an or of both ranks": _swap(src, "(1u << CLUSTER) - 1);", "0b01u | 0b10u);"),
        "bytes and EMPTY count from the cluster's size": _swap(
            _swap(src, "my_mbar_expect_tx(&full[s], STAGE_BYTES)", f"my_mbar_expect_tx(&full[s], A_BYTES + {size} * "
                  "B_HALF)"), "mbar_init(&empty[s], CONSUMERS * CLUSTER)", f"mbar_init(&empty[s], CONSUMERS * {size})"),
    }


@pytest.mark.parametrize("name", list(right_kernels(SOL_SRC)))
def test_right_kernels_in_other_spellings_pass_statically(sol, monkeypatch, name, capsys):
    _static_only(monkeypatch)
    lab7.check_cluster_kernel(right_kernels(sol["LAB7_SRC"])[name], benchmark=False)
    out = capsys.readouterr().out
    assert "mask 0b11" in out and "expects the whole stage: 49152" in out and "initialised for 4 arrivals" in out, out


# ------------------------------------------------------------------------------------------- on the PTX executor
def _executor(monkeypatch) -> None:
    """Run kernels on the course's PTX executor (the default without a GPU; forced here even beside one)."""
    monkeypatch.setenv("HELPERS_EXECUTOR", "force")


def test_kernel_solution_passes_on_the_executor(sol, monkeypatch, capsys):
    """Two clusters of two CTAs, several pairs each: the persistent loop, the multicast and the stores across
    tiles all run."""
    _executor(monkeypatch)
    lab7.check_cluster_kernel(sol["LAB7_SRC"])
    out = capsys.readouterr().out
    each = re.findall(r"✓ ran on the emulator \([^)]*hazard mode\): M=\d+, N=\d+, K=\d+ \((\d+) pairs on 2 clusters of "
                      r"2 CTAs, (\d+)(?: or \d+)? pairs each in turn\)", out)
    assert len(each) == 2 and all(int(least) >= 2 for _, least in each), out
    assert out.count("the work, as the emulator recorded it: each of the") == 2, out
    assert out.count("every stage released once per fill, by all its consumers") == 2, out


@pytest.mark.parametrize("seed", range(40))
def test_emulator_shapes_give_every_cluster_several_pairs(seed):
    from helpers.course.checks.lab5 import _emulator_shapes

    for m, n, k in _emulator_shapes(grading.SeededRng(seed), lab7.LAUNCH):
        pairs = -(-m // 256) * -(-n // 256)
        assert pairs >= 4 and m % 8 == n % 8 == k % 8 == 0 and k > 128 and len({m, n, k}) == 3


@pytest.mark.parametrize("name", list(lab7_run_only(SOL_SRC)))
def test_run_only_wrong_kernels_pass_statically_and_fail_on_the_executor(sol, monkeypatch, name):
    src, needles, _ = lab7_run_only(sol["LAB7_SRC"])[name]
    _static_only(monkeypatch)
    with contextlib.redirect_stdout(io.StringIO()):
        lab7.check_cluster_kernel(src, benchmark=False)  # the PTX cannot tell
    _executor(monkeypatch)
    rejects_naming(lambda s: lab7.check_cluster_kernel(s, benchmark=False), src, "on the emulator", *needles)


# ------------------------------------------------------------------------------------------- the work
_LOOP = "for (int p = cluster_id; p < pairs; p += clusters)"
_M0 = "const int m0 = pm * 2 * BM + rank * BM, n0 = pn * BN;"
WORK_MISTAKES = {
    "every cluster takes every pair from its own on (++p)": (
        lambda s: _swap(s, _LOOP, "for (int p = cluster_id; p < pairs; ++p)"),
        ("was computed and stored 2 times", "block (0,0) (cluster 0, rank 0), block (2,0) (cluster 1, rank 0)",
         "step by the number of clusters")),
    "two clusters swap their pairs": (
        lambda s: _swap(s, _LOOP, "for (int p = clusters - 1 - cluster_id; p < pairs; p += clusters)"),
        ("pair 0, which the schedule gives cluster 0", "was stored by block (2,0) (cluster 1, rank 0)")),
    "each CTA computes the other CTA's rows": (
        lambda s: _swap(s, _M0, "const int m0 = pm * 2 * BM + (1 - rank) * BM, n0 = pn * BN;"),
        ("was stored by block (1,0) (cluster 0, rank 1); the schedule gives it to block (0,0)",)),
}


@pytest.mark.parametrize("name", list(WORK_MISTAKES))
def test_right_c_with_the_wrong_work_is_rejected_on_the_executor(sol, monkeypatch, name):
    """C comes out right (the run's ✓ says so); the work does not: a tile computed twice or by the wrong block."""
    change, needles = WORK_MISTAKES[name]
    _executor(monkeypatch)
    text = rejects_naming(lambda s: lab7.check_cluster_kernel(s, benchmark=False), change(sol["LAB7_SRC"]),
                          *needles)
    assert "C is right" in text or "the schedule gives it to" in text


# ------------------------------------------------------------------------------------------- 4 · counts at init
def _ok_counts(wg, cl, mc):
    return pl.arrival_counts(wg, cl, mc)


def _ok_problems(stages, full, empty, wg, cl, mc, bars):
    return pl.verify_init(stages, full, empty, consumer_warpgroups=wg, cluster=cl, multicast=mc, named_barriers=bars)


def test_counts_solution_passes(sol, monkeypatch):
    passes_on_seeds(monkeypatch, lab7.check_arrival_counts, sol["arrival_counts"], sol["init_problems"])
    passes_on_seeds(monkeypatch, lab7.check_arrival_counts, _ok_counts, _ok_problems, seeds=3)


def test_counts_stub_fails(stub):
    grading.assert_rejects(lambda a: lab7.check_arrival_counts(*a), (stub["arrival_counts"], stub["init_problems"]),
                           "not written yet", "hint")


def _blocks(wg, cl, mc):
    return pl.arrival_counts(wg, cl, mc)[1] // wg


@pytest.mark.parametrize("wrong, needle", [
    (lambda wg, cl, mc: (1, (cl[0] + cl[1] - 1) * wg), "only an operand that is multicast"),
    (lambda wg, cl, mc: (1, cl[0] * cl[1] * wg), "not every block of the cluster"),
    (lambda wg, cl, mc: (1, _blocks(wg, cl, mc)), "one arrival per consumer warpgroup"),
    (lambda wg, cl, mc: pl.arrival_counts(wg, cl[::-1], mc), "axes are swapped"),
    (lambda wg, cl, mc: (1, wg), "the other blocks"),
    (lambda wg, cl, mc: (_blocks(wg, cl, mc), pl.arrival_counts(wg, cl, mc)[1]), "FULL counts arrivals, not copies"),
    (lambda wg, cl, mc: (1, 128 * pl.arrival_counts(wg, cl, mc)[1]), "one elected thread"),
])
def test_arrival_counts_wrong_answers(monkeypatch, wrong, needle):
    rejected_on_every_seed(monkeypatch, lab7.check_arrival_counts, wrong, _ok_problems, needle, answers=2)


def _only_low(stages, full, empty, wg, cl, mc, bars):
    f, e = pl.arrival_counts(wg, cl, mc)
    return _ok_problems(stages, min(full, f), min(empty, e), wg, cl, mc, bars)


def _warps_not_checked(stages, full, empty, wg, cl, mc, bars):
    return _ok_problems(stages, full, empty, wg, cl, mc, {i: (32 if t > 0 else t) for i, t in bars.items()})


def _ids_to_16(stages, full, empty, wg, cl, mc, bars):
    return _ok_problems(stages, full, empty, wg, cl, mc, {(i if i != 16 else 15): t for i, t in bars.items()})


def _zero_threads_ok(stages, full, empty, wg, cl, mc, bars):
    return _ok_problems(stages, full, empty, wg, cl, mc, {i: (t if t else 32) for i, t in bars.items()})


def _no_stages_rule(stages, full, empty, wg, cl, mc, bars):
    return _ok_problems(max(stages, 1), full, empty, wg, cl, mc, bars)


def _cutlass_rule(stages, full, empty, wg, cl, mc, bars):
    want = (cl[0] + cl[1] - 1) * wg
    out = [p for p in _ok_problems(stages, full, empty, wg, cl, mc, bars) if "EMPTY" not in p]
    return out + ([f"EMPTY initialised with {empty}, but {want} arrive"] if empty != want else [])


def _no_count_said(stages, full, empty, wg, cl, mc, bars):
    return [re.sub(r"but \d+ arrive", "but not that many arrive", p) for p in
            _ok_problems(stages, full, empty, wg, cl, mc, bars)]


@pytest.mark.parametrize("wrong, needle", [
    (_only_low, "too high is a problem too"),
    (_warps_not_checked, "counts whole warps"),
    (_ids_to_16, "named barriers 0..15"),
    (_zero_threads_ok, "positive multiple of 32"),
    (_no_stages_rule, "at least one"),
    (_cutlass_rule, "EMPTY"),
    (_no_count_said, "say the count the roles need"),
])
def test_init_problems_wrong_answers(monkeypatch, wrong, needle):
    rejected_on_every_seed(monkeypatch, lab7.check_arrival_counts, _ok_counts, wrong, needle, answers=2)


def _lower_case(stages, full, empty, wg, cl, mc, bars):
    return [p.lower() for p in _ok_problems(stages, full, empty, wg, cl, mc, bars)]


def _sentence_case(stages, full, empty, wg, cl, mc, bars):
    out = []
    for p in _ok_problems(stages, full, empty, wg, cl, mc, bars):
        p = p.replace("FULL", "the full barrier").replace("EMPTY", "the empty barrier")
        out.append(p[0].upper() + p[1:] + ".")
    return out


@pytest.mark.parametrize("right", [_lower_case, _sentence_case])
def test_init_problems_in_other_capitals_pass(monkeypatch, right):
    """A sentence's topic is read whatever its capitals: 'empty initialised with 2 …', 'The full barrier …',
    'Named barrier 3 …', '0 stages: …'."""
    passes_on_seeds(monkeypatch, lab7.check_arrival_counts, _ok_counts, right)


def test_init_problems_that_invent_a_problem_are_rejected(monkeypatch):
    def always_empty(stages, full, empty, wg, cl, mc, bars):
        return _ok_problems(stages, full, empty, wg, cl, mc, bars) or ["EMPTY looks wrong: 3 arrive"]

    rejected_on_every_seed(monkeypatch, lab7.check_arrival_counts, _ok_counts, always_empty, "that is not there",
                           answers=2)


def test_the_counts_step_reads_every_course_kernel(sol, capsys, monkeypatch):
    passes_on_seeds(monkeypatch, lab7.check_arrival_counts, sol["arrival_counts"], sol["init_problems"], seeds=1)
    out = capsys.readouterr().out
    for k in lab7.course_kernel_inits():
        assert k.name in out
    assert any(k.name == "lab7_clusters.cu" for k in lab7.course_kernel_inits())
