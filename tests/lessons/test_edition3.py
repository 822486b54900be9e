"""Third edition of the text: each corrected statement tied to the computation or the committed file it rests on."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from helpers.course import ladder
from helpers.course.checks import lab7
from helpers.course.quizzes import lesson07
from helpers.course.widgets import roofline
from helpers.hopper import seqbar

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
DATA = ROOT / "tests" / "data"


def _nb(path: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / path, as_version=4)


def _cell(path: str, cell_id: str) -> str:
    return next(c.source for c in _nb(path).cells if c.get("id") == cell_id)


def _text(path: str) -> str:
    return "\n".join(c.source for c in _nb(path).cells)


def _run(src: str, env: dict | None = None) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(src, env if env is not None else {})  # noqa: S102 - the notebook's own cell, no GPU needed
    return out.getvalue()


# ------------------------------------------------------------------------- 1 · Lesson 00 reads the 64×64 run
def test_lesson00_reads_the_64x64_kernel_from_the_ladder_file():
    text = _cell("lessons/00_big_picture.ipynb", "l00-24") + _cell("lessons/00_big_picture.ipynb", "l00-24m")
    assert not re.search(r"\d+ TFLOP/s", text), "a speed typed into the text"
    printed = _run(_cell("lessons/00_big_picture.ipynb", "l00-24r"))
    ref = ladder.load()["rungs"]["ref64"]
    for s in ref["speed"]:
        m, n, k = s["shape"]
        assert f"{m}×{n}×{k}: {s['tflops']:.0f} TFLOP/s; cuBLAS in the same run {s['cublas_tflops']:.0f}" in printed
        # what the words after the cell claim: several times the HBM-only bound, cuBLAS more than twice as fast
        assert s["tflops"] > 2 * 3.35e12 * 32 / 1e12 and s["cublas_tflops"] > 2 * s["tflops"]
    assert "gemm_64x64.cu" in ref["file"]


# ------------------------------------------------------------------------- 2 · ping-pong was measured
def test_lesson05_reads_the_pingpong_run_and_says_what_it_shows():
    src = "\n".join(c.source for c in _nb("lessons/05_kernel_design.ipynb").cells)
    assert "is not measured on an H100 yet. The" not in src
    printed = _run("import json\nfrom pathlib import Path\n" + _cell("lessons/05_kernel_design.ipynb", "l05-45h"),
                   {"roofline": roofline})
    rows = json.loads((RESULTS / "2026-11-26-pingpong-h100.json").read_text())["shapes"]
    ratio = {tuple(r["shape"]): r["lab8 vs lab6"]["ratio"] for r in rows}
    assert printed.count("ping-pong / cooperative") == len(rows) == 4
    assert all(r < 1 for r in ratio.values()), "the text says ping-pong lost at every shape"
    short = min(ratio[8192, 8192, 512], ratio[4096, 4096, 1024])
    assert short > max(ratio[4096, 4096, 4096], ratio[8192, 8192, 8192]), "the text says it lost least at short K"
    assert "lost least at the short K" in _cell("lessons/05_kernel_design.ipynb", "l05-45i")


# ------------------------------------------------------------------------- 3 · model and H100 side by side
WARP_CASES = json.loads((DATA / "mbarrier_warp_arrivals_h100.json").read_text())["cases"]


@pytest.mark.parametrize("case", [c for c in WARP_CASES if c["form"] == "arrive" and c["reps"] == 1],
                         ids=lambda c: c["name"])
def test_handoff_on_gpu_follows_the_h100_capture(case):
    # one arrive per thread: the rule traps exactly where the H100 did
    lanes, count = case["lanes"], case["count"]
    said = seqbar.handoff_on_gpu(count, lanes)
    assert ("traps" in said) == case["faulted"], said


def test_lesson07_shows_the_model_and_the_h100_and_says_which_the_kernel_meets():
    path = "lessons/07_sequence_barriers.ipynb"
    printed = _run("from helpers.hopper import seqbar\n" + _cell(path, "l07-x02"))
    model = [ln for ln in printed.splitlines() if ln.startswith("model:")]
    h100 = [ln for ln in printed.splitlines() if ln.startswith("H100:")]
    assert len(model) == len(h100) == 4
    assert "128 phases complete" in model[1] and "64 phases complete" in model[3]
    assert "traps" in h100[1] and "traps" in h100[3] and "traps" not in h100[0] + h100[2]
    words = _cell(path, "l07-x02b")
    assert "meets the right-hand column" in words and "not a ring that hands out turns early" in words
    assert "mbarrier_warp_arrivals_h100.json" in _cell(path, "l07-x01")
    explanation = lesson07.participants.explanation
    assert "traps" in explanation and "hand the turn on before" not in explanation


# ------------------------------------------------------------------------- 4 · the renumbered labs
def test_lab4_and_lab5_send_clusters_to_lab7():
    for path in ("solutions/lab4_pipeline.ipynb", "labs/lab4_pipeline.ipynb",
                 "solutions/lab5_epilogue.ipynb", "labs/lab5_epilogue.ipynb"):
        text = _text(path)
        for sentence in re.split(r"(?<=[.;:])\s", text):
            if re.search(r"multicast|cluster", sentence) and re.search(r"Lab \d", sentence):
                assert "Lab 6" not in sentence, (path, sentence)
        assert "Lab 7" in text, path


# ------------------------------------------------------------------------- 5 · a TMA store clips to 16 bytes
def test_a_tma_store_clips_to_16_bytes_as_the_capture_shows():
    stores = json.loads((DATA / "tma_stores.json").read_text())["cases"]
    case = stores[16]
    assert case["rank"] == 1 and case["dims"] == [300] and case["coords"] == [240] and case["box"] == [128]
    written = np.load(DATA / "tma_stores.npz")["case16"]
    assert (written[240:304] != 0xEE).all() and (written[304:] == 0xEE).all()  # bytes 300-303 past the end
    assert any(c["fault"] for c in stores if min(c["coords"]) < 0)              # negative coordinates fault
    for path, cid in (("lessons/06_epilogue.ipynb", "l06-16"),):
        text = _cell(path, cid)
        assert "never writes outside" not in text
        assert "16 bytes" in text and "bytes 300–303" in text and "view" in text and "faults" in text
    for path in ("solutions/lab5_epilogue.ipynb", "labs/lab5_epilogue.ipynb", "lessons/06_epilogue.ipynb"):
        assert "never writes outside" not in _text(path), path
    assert "16-byte granularity" in _text("solutions/lab5_epilogue.ipynb")


# ------------------------------------------------------------------------- 6 · one run, or no comparison
def test_lab7_and_its_grader_compare_the_arrive_forms_from_one_run():
    for path in ("solutions/lab7_clusters.ipynb", "labs/lab7_clusters.ipynb"):
        text = _text(path)
        assert "547" not in text and "lab6_arrive_speed_h100.json" in text, path
    note = lab7._release_cluster_note()
    med = json.loads((DATA / "lab6_arrive_speed_h100.json").read_text())["medians"]["8192×8192×8192"]
    assert f"{med['.release.cluster arrive']['tflops']:.0f} TFLOP/s" in note and "one run" in note


def test_lab9_outro_reads_one_run_and_gives_no_ratio_against_a_dipping_cublas():
    for path in ("solutions/lab9_streamk.ipynb", "labs/lab9_streamk.ipynb"):
        src = _cell(path, "outro-table")
        printed = _run(src)
        assert "1.17" not in printed and "1.90×" not in _text(path)
        assert re.search(r"8192×8192×8192 +793 +798 +1\.01× +682–782", printed), printed


# ------------------------------------------------------------------------- the Hopper parts, from their profiles
def test_lesson05_compares_the_hopper_parts_from_their_profiles():
    from helpers.hopper import parts

    path = "lessons/05_kernel_design.ipynb"
    words = _cell(path, "l05-parts")
    sxm, h200, pcie = parts.get("h100-sxm"), parts.get("h200"), parts.get("h100-pcie")
    assert f"about {sxm.ridge_point:.0f} to about {h200.ridge_point:.0f} FLOP/B" in words
    assert f"({h200.hbm_tbs} TB/s against {sxm.hbm_tbs})" in words and f"has {pcie.sms} SMs, not {sxm.sms}" in words
    assert f"{sxm.power_w} W for the H100 SXM and the H200, {pcie.power_w} W for the H100 PCIe" in words
    assert sxm.power_w == h200.power_w
    printed = _run(_cell(path, "l05-parts-run"), {"roofline": roofline})
    n132, last132 = parts.waves(2048, 132)
    n114, last114 = parts.waves(2048, 114)
    for n, last in ((n132, last132), (n114, last114)):
        assert f"{n} waves, the last {last:.0%} full" in printed
    assert last114 > 0.9 > 0.6 > last132, "the words after the cell: 114 SMs fill the last wave, 132 leave half idle"
    assert "almost completely" in _cell(path, "l05-parts-after") and "about half" in _cell(path, "l05-parts-after")


# ------------------------------------------------------------------------- the topics that were partial or missing
def test_lesson02_teaches_the_time_hint_pending_count_and_the_coherency_claim():
    text = _cell("lessons/02_mbarrier.ipynb", "l02-more-wait")
    for needle in ("suspendTimeHint", "mbarrier.pending_count.b64", "state", "cache coherency", "no cache",
                   "atomic", "acquire"):
        assert needle in text, needle


def test_lesson04_says_why_two_arrays_and_what_cutlass_counts_per_cluster_size():
    text = _text("lessons/04_pipelines.ipynb")
    assert "Why two arrays" in text and "its own phase sequence" in text
    assert "`num_consumers`" in text and "(cluster width + cluster height − 1) × the consumer warpgroups" in text
    assert "`PipelineTmaAsync::producer_tail(state)`" in text and "`load_tail`" in text


def test_lesson05_regimes_issue_rate_occupancy_and_the_tpc_claim():
    path = "lessons/05_kernel_design.ipynb"
    regimes = _cell(path, "l05-regimes")
    assert all(w in regimes for w in ("memory-bound", "compute-bound", "too few tiles", "N/2 clocks"))
    printed = _run(_cell(path, "l05-issue"))
    assert "= 989 TFLOP/s" in printed and "m64n256k16: 524,288 FLOP, the tensor cores busy 128 clocks" in printed
    assert "a 128×128×64 K step: 512 clocks" in printed        # Lab 9's 260 ns at 1980 MHz
    assert round(512 / 1.98) == 259
    occupancy = _cell(path, "l05-occupancy")
    assert f"{128 * 24 + 256 * 240:,} of the SM's {65536:,}" in occupancy and (128 * 24 + 256 * 240) // 384 == 168
    assert "TPC" in _text(path) and "usual argument" not in _text(path)


def test_lesson07_block_striped_variants_invariants_and_the_stream_k_bridge():
    path = "lessons/07_sequence_barriers.ipynb"
    text = _text(path)
    assert "2 × 2 = 4 mbarriers, 32 bytes" in text
    assert "every cursor is made for a ring of the barrier's own" in text
    variants = _cell(path, "l07-x07")
    for needle in ("**element by", "`half2` pairs", "`StripedAccessType`", "reduce-max", "at least 16 bits",
                   "red.global.add.s32"):
        assert needle in variants, needle
    lines = [ln for ln in _run("import numpy as np\n" + _cell(path, "l07-x08")).splitlines() if ln.startswith("order")]
    ints = {ln.split(": ", 1)[1].split(", fp32")[0] for ln in lines}
    fp32 = {ln.split("fp32 add ")[1] for ln in lines}
    assert len(lines) == 2 and len(ints) == 1 and len(fp32) == 2, lines
    bridge = _cell(path, "l07-bridge") if any(c.get("id") == "l07-bridge" for c in _nb(path).cells) else text
    for name in ("WorkTileInfo", "k_tile_count", "k_tile_remaining", "sk_units_", "sk_tiles_", "big_units_",
                 "min_iters_per_sk_unit_", "divmod_sk_groups_", "max_sk_groups_", "reduction_workspace_"):
        assert name in bridge, name
    assert "the reverse order" in bridge and "whole tiles before the Stream-K waves" not in bridge


def test_not_every_cta_gets_the_same_work_and_nondeterministic_still_waits_for_the_first_split():
    from helpers.hopper import streamk

    lengths = [e - b for b, e in (streamk.stream_k_range(c, 66, 68 * 20) for c in range(66))]
    assert lengths[0] == max(lengths) and lengths[-1] < lengths[0]          # the remainder falls at the end
    assert 0 in [e - b for b, e in (streamk.stream_k_range(c, 66, 70) for c in range(66))]
    text = _text("lessons/07_sequence_barriers.ipynb")
    assert "Every CTA does the same amount of work" not in text and "`big_units_`" in text
    assert "drops the wait.\n" not in text and "*first* split has stored its partial sums" in text
    assert "66 equal, contiguous ranges" not in _text("solutions/lab9_streamk.ipynb")


def test_one_number_for_lab5s_shared_memory_and_causes_said_as_consistent_with():
    src = (ROOT / "bench/kernels/lab5_epilogue.cu").read_text()
    assert "SMEM_LIMIT = 227 * 1024, ALIGN_SLACK = 1024" in src and 4 * 48 + 32 + 1 == 225
    for path in ("solutions/lab5_epilogue.ipynb", "lessons/06_epilogue.ipynb"):
        assert "224 KiB of shared memory" not in _text(path), path
    assert "the kernel asks for 225 KiB" in _text("solutions/lab5_epilogue.ipynb")
    assert "consistent with the L2 (no hit rates were measured)" in _text("lessons/07_sequence_barriers.ipynb")
    assert "consistent with the\nbytes (not measured directly)" in _text("solutions/lab8_pingpong.ipynb")
    capture = "\n".join(json.loads((DATA / "streamk_h100.json").read_text())["summary"])
    assert "2× the co-resident clusters: completed" in capture and "relaxed flag: 0 of 20" in capture
    words = _cell("lessons/07_sequence_barriers.ipynb", "l07-45b")
    assert "did **not** reproduce two hazards" in words and "`__ldcg`" in words
    fixup = json.loads((DATA / "fixup_h100.json").read_text())["summary"]
    red, chain = (float(re.search(r"(\d+) TFLOP/s", next(s for s in fixup if s.startswith("1024×1024×16384, " + k)))
                        .group(1)) for k in ("ordered red", "ordered load-add-store"))
    assert red > chain and "the faster of the two ordered forms" in words


_VAGUE = re.compile(r"circulates|easy to meet|usual argument|usually summed up|often written|are both said|one meets",
                    re.IGNORECASE)


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("lessons/*.ipynb"),
                                                                            *ROOT.glob("solutions/*.ipynb")]))
def test_no_vague_attribution(path):
    for cell in _nb(path).cells:
        found = _VAGUE.search(cell.source)
        assert not found, f"{path} {cell.get('id')}: {found.group(0)!r}"


def test_lesson02_sentences_that_lost_their_subject_have_one_again():
    text = _text("lessons/02_mbarrier.ipynb")
    assert "```\nand says itself" not in text and "```\nand explains" not in text
    assert "which calls itself *conceptual*" in text and "Its comments explain the `+ 1`" in text


def test_the_empty_count_formula_holds_for_any_cluster_of_more_than_one_block():
    text = _text("lessons/05_kernel_design.ipynb")
    assert "(width + height − 1) blocks × the consumer warpgroups" in text
    for (w, h), count in (((2, 1), 4), ((2, 2), 6), ((4, 1), 8), ((1, 2), 4)):
        # the blocks whose loads land in block (0, 0): its row and its column, itself once
        senders = {(x, 0) for x in range(w)} | {(0, y) for y in range(h)}
        assert len(senders) * 2 == count == (w + h - 1) * 2
    assert "For 2×1 that is 2 × 2 = 4, for 2×2 it is 3 × 2 = 6" in text


def test_lesson01_says_loads_take_negative_coordinates_and_stores_fault():
    stores = json.loads((DATA / "tma_stores.json").read_text())["cases"]
    assert all(c["fault"] for c in stores if min(c["coords"]) < 0)
    assert "a store at negative\ncoordinates faults" in _text("lessons/01_tma.ipynb")
