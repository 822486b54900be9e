"""Lessons 00-03, second edition: how the notebooks are built (predict before run, no answer printed above its
quiz, corner cases in an appendix, no source files named), and the CPU-checkable facts the new sections state.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from helpers import gpu
from helpers.course.grading import Quiz
from helpers.course.quizzes import all_quizzes, lesson00, lesson01, lesson02, lesson03
from helpers.course.widgets import barrier
from helpers.gpu import libcudacxx
from helpers.hopper import mbarrier, wgmma
from helpers.hopper.tensormap import Swizzle

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "lessons").glob("0[0-3]_*.ipynb"))
NOTEBOOKS = {p.name[:2]: nbformat.read(p, as_version=4) for p in LESSONS}
REPLAY = {c["name"]: c for c in json.loads((ROOT / "tests" / "data" / "mbarrier_h100.json").read_text())["cases"]}


def _cells(lesson: str):
    return NOTEBOOKS[lesson].cells


def _quiz_of(cell) -> tuple[str, str] | None:
    m = re.fullmatch(r"\s*(lesson\d\d)\.(\w+)\s*", cell.source) if cell.cell_type == "code" else None
    return (m.group(1), m.group(2)) if m else None


def test_the_four_lessons_are_there():
    assert sorted(NOTEBOOKS) == ["00", "01", "02", "03"]


# -----------------------------------------------------------------------------------------------------------
# speaking to the student
# -----------------------------------------------------------------------------------------------------------
_SOURCE_NAMES = re.compile(r"source document|source \d{3}|\bthe seed\b|\bseeds?\b|study notes|\b00[0-4]_|\bgist\b|"
                           r"nihalpasham|hitchhiker", re.IGNORECASE)


@pytest.mark.parametrize("lesson", sorted(NOTEBOOKS))
def test_no_student_facing_text_names_the_source_documents(lesson):
    for cell in _cells(lesson):
        found = _SOURCE_NAMES.search(cell.source)
        assert not found, f"lesson {lesson}, cell {cell.id}: {found.group(0)!r}"


@pytest.mark.parametrize("lesson", sorted(NOTEBOOKS))
def test_every_gpu_cell_has_a_predict_prompt_before_it(lesson):
    cells = _cells(lesson)
    for i, cell in enumerate(cells):
        if cell.cell_type == "code" and re.search(r"skip_without_hopper|replay_on_gpu\(", cell.source):
            before = [c for c in cells[:i] if c.cell_type == "markdown"][-1]
            assert "predict" in before.source.lower(), f"lesson {lesson}: no predict prompt before {cell.id}"


def test_every_quiz_is_shown_exactly_once_in_its_lesson():
    shown = [q for lesson in NOTEBOOKS for q in map(_quiz_of, _cells(lesson)) if q]
    assert len(shown) == len(set(shown)), "a quiz is shown twice"
    mine = {k for k in all_quizzes() if k.split(".")[0][-2:] in NOTEBOOKS}  # lessons 04+ test their own
    assert {f"{m}.{n}" for m, n in shown} == mine, "a quiz defined but not shown, or vice versa"
    for lesson in NOTEBOOKS:
        assert all(m == f"lesson{lesson}" for m, _ in filter(None, map(_quiz_of, _cells(lesson))))


def test_the_duplicate_recall_quizzes_are_gone():
    assert not hasattr(lesson02, "tx_bytes") and not hasattr(lesson03, "per_k_step")
    questions = [q.question for q in all_quizzes().values()]
    assert len(questions) == len(set(questions))
    assert isinstance(lesson02.race_bits, Quiz) and isinstance(lesson03.element_n128, Quiz)
    assert lesson00.wgmma_per_step.right == 4 and lesson00.step_bytes.right == 16384


def _answer_spellings(quiz: Quiz) -> list[str]:
    """How a numeric answer of 10 or more would look when printed (plain and with thousands separators)."""
    value = quiz.right
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) >= 10:
        return [f"{value:g}", f"{value:,}"]
    if isinstance(value, str) and re.fullmatch(r"\d+, \d+", value):
        a, b = value.split(", ")
        return [f"({a}, {b})", f"{a}, {b}"]
    return []


@pytest.fixture(scope="module")
def executed():
    """The lessons run top to bottom on the CPU (as in `make validate`), outputs kept."""
    from nbclient import NotebookClient

    out = {}
    for path in LESSONS:
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
                       ).execute()
        out[path.name[:2]] = nb
    return out


def _text(cell) -> str:
    """What a cell printed or returned as text (a widget's model reply is not something the student reads)."""
    parts = []
    for o in cell.get("outputs", []):
        parts.append(o.get("text", ""))
        data = o.get("data", {})
        if "application/vnd.jupyter.widget-view+json" not in data:
            parts.append(str(data.get("text/plain", "")))
    return "".join(parts)


@pytest.mark.parametrize("lesson", ["00", "01", "02", "03"])
def test_no_quiz_answer_is_printed_in_the_cell_above_it(executed, lesson):
    quizzes = all_quizzes()
    cells = executed[lesson].cells
    for i, cell in enumerate(cells):
        q = _quiz_of(cell)
        if not q:
            continue
        above = next((c for c in reversed(cells[:i]) if c.cell_type == "code" and not _quiz_of(c)), None)
        if above is None:
            continue
        shown = _text(above)
        for spelling in _answer_spellings(quizzes[".".join(q)]):
            assert not re.search(rf"(?<![\d.]){re.escape(spelling)}(?![\d.])", shown), \
                f"lesson {lesson}: {'.'.join(q)}'s answer {spelling!r} is printed by cell {above.id} above it"


# -----------------------------------------------------------------------------------------------------------
# Lesson 00: the road ahead and the speed ladder
# -----------------------------------------------------------------------------------------------------------
def test_lesson00_lists_all_eight_lessons_and_seven_labs():
    road = next(c.source for c in _cells("00") if c.source.startswith("## The road ahead"))
    for n in range(8):
        assert re.search(rf"^\| 0{n} \|", road, re.M), f"lesson 0{n} missing"
    for n in range(1, 8):
        assert re.search(rf"^\| {n} \|", road, re.M), f"lab {n} missing"
    for word in ("TMA", "mbarrier", "WGMMA", "pipelines", "kernel design", "epilogue", "sequence barriers",
                 "Stream-K", "persistent", "multicast"):
        assert word.lower() in road.lower()


# -----------------------------------------------------------------------------------------------------------
# Lesson 01: appendix, tensor maps in the parameter space
# -----------------------------------------------------------------------------------------------------------
def test_lesson01_corner_cases_live_in_the_appendix():
    cells = _cells("01")
    appendix = next(i for i, c in enumerate(cells) if c.source.startswith("## Appendix"))
    main, tail = "\n".join(c.source for c in cells[:appendix]), "\n".join(c.source for c in cells[appendix:])
    for corner in ("global_strides=(stride,)", "element stride", "interleave", "16-byte chunk"):
        assert corner.lower() in tail.lower(), corner
    assert "(16384, 64, 0)" not in main and "padding columns" not in main
    assert "Summary" in cells[appendix - 1].source


def _probe():
    spec = importlib.util.spec_from_file_location("probe", ROOT / "tools" / "h100" / "lesson_probes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_by_value_tensor_map_is_copied_to_the_stack():
    probe = _probe()
    grid_constant = gpu.compile(probe.passing_source("grid_constant"), "load")
    by_value = gpu.compile(probe.passing_source("by_value"), "load")
    assert grid_constant.report.local_bytes == 0 and "cvta.param" in grid_constant.ptx
    assert by_value.report.local_bytes >= 128 and "st.local" in by_value.ptx and "cvta.local" in by_value.ptx
    assert lesson01.by_value_map.right.startswith("it copies the 128 bytes to the thread's stack")


def test_every_probe_kernel_compiles():
    probe = _probe()
    for kind in probe.PASSING:
        gpu.compile(probe.passing_source(kind), "load")
    for kind in probe.ALIGN:
        gpu.compile(probe.align_source(kind), "where")
    for kind in probe.WGMMA:
        assert gpu.compile(probe.wgmma_source(kind), "one").report.uses_wgmma
    assert "mbarrier.expect_tx" in gpu.compile(probe.OVERDELIVERY, "overdeliver").ptx
    assert set(probe.FIXTURES) == {"mbarrier_tma_overdelivery_h100.json", "tensormap_passing_h100.json",
                                   "dynamic_smem_alignment_h100.json", "wgmma_scale_h100.json"}


# -----------------------------------------------------------------------------------------------------------
# Lesson 02: named barriers, libcu++, the write-up's counts, over-delivery
# -----------------------------------------------------------------------------------------------------------
def test_the_handshake_compiles_to_named_barriers():
    src = next(c.source for c in _cells("02") if c.source.startswith("HANDSHAKE"))
    ns: dict = {"gpu": gpu}
    exec(src.split("k = gpu.compile")[0], ns)
    ptx = gpu.compile(ns["HANDSHAKE"], "handshake").ptx
    assert re.search(r"\bbar\.arrive\b", ptx) and re.search(r"\bbar\.sync\b", ptx)
    assert lesson02.named_barrier.right.startswith("only warpgroup 1 waits")


needs_cccl = pytest.mark.skipif(libcudacxx.cccl_dir() is None, reason="the CCCL headers (nvidia-cuda-cccl) are "
                                "not installed")


@needs_cccl
@pytest.mark.parametrize("row", libcudacxx.ROWS, ids=lambda r: r.libcudacxx)
def test_each_libcudacxx_call_exists_and_compiles_to_its_ptx(row):
    assert libcudacxx.defined_in_cccl(row.name), f"{row.name} is not in the CCCL headers"
    ptx = libcudacxx.ptx_of(row)
    assert ptx and ptx[0].startswith(row.opcode), ptx
    assert all(not line.startswith("bar.") for line in ptx)
    header = (ROOT / "helpers" / "include" / "hopper.cuh").read_text()
    assert re.search(rf"\b{re.escape(row.hopper.split('(')[0].split('<')[0])}\b", header), row.hopper


@needs_cccl
def test_barrier_arrive_tx_is_one_arrival_and_the_token_wait_is_not_a_parity_wait():
    by_call = {r.libcudacxx: r for r in libcudacxx.ROWS}
    tx = libcudacxx.ptx_of(by_call["cuda::device::barrier_arrive_tx(bar, 1, bytes)"])
    assert len(tx) == 1 and tx[0].startswith("mbarrier.arrive.expect_tx")
    wait = libcudacxx.ptx_of(by_call["bar.wait(std::move(token))"])
    assert all(".parity" not in line for line in wait) and all("try_wait" in line for line in wait)
    assert not libcudacxx.defined_in_cccl("no_such_barrier_function")


def test_the_write_ups_full_count_is_consumers_plus_the_producers_arrival():
    full = mbarrier.MBarrier("full")
    full.init(2 * 128 + 1)
    full.arrive(256)
    full.complete_tx(0)
    assert not full.completed(0)
    full.arrive_expect_tx(16384)
    full.complete_tx(8192)
    full.complete_tx(8192)
    assert full.completed(0)
    # read as "the TMA is the +1": the producer announces without arriving, and the phase never completes
    wrong = mbarrier.MBarrier("full")
    wrong.init(2 * 128 + 1)
    wrong.arrive(256)
    wrong.expect_tx(16384)
    wrong.complete_tx(16384)
    assert not wrong.completed(0) and wrong.pending_arrivals == 1


def test_pre_posted_empty_arrivals_equal_the_flipped_parity_wait():
    src = next(c.source for c in _cells("02") if c.source.startswith("def quoted_producer"))
    ns: dict = {"mbarrier": mbarrier}
    exec(src.split("\nfor forget in")[0], ns)
    for slots in (2, 3, 5):
        for forget in (None, 0, 1, 4):
            a = ns["quoted_producer"](12, slots=slots, forget=forget)
            b = ns["course_producer"](12, slots=slots, forget=forget)
            assert a == b
            if forget is not None:
                assert a[-1] is False and len(a) == forget + slots + 1


def test_overdelivery_quiz_and_lesson_follow_the_h100_replay():
    assert REPLAY["overshoot"]["wait_bits"][-1] == [0, 1]  # phase 0 not complete after 16384 on 8192
    assert REPLAY["overshoot_then_expect"]["wait_bits"][-1] == [1, 0]
    assert "fault" in REPLAY["early_then_arrive_expect_tx"]
    assert lesson02.overdelivery.right.startswith("it never completes")
    bar = mbarrier.MBarrier("full", allow_negative_tx=True)
    bar.init(1)
    bar.arrive_expect_tx(8192)
    bar.complete_tx(16384)
    assert bar.tx_count == -8192 and not bar.test_wait(0)
    with pytest.raises(mbarrier.MBarrierError):
        bar.arrive_expect_tx(8192)


def test_race_bits_quiz_is_what_the_h100_answered():
    assert REPLAY["race"]["script"][:3] == [["init", 1], ["arrive", 1], ["expect_tx", 8192]]
    p0, p1 = REPLAY["race"]["wait_bits"][2]
    assert lesson02.race_bits.judge(f"{p0}, {p1}")[0]
    assert barrier.wait_bits([("init", 1), ("arrive", 1), ("expect_tx", 8192)]).tolist()[-1] == [p0, p1]


# -----------------------------------------------------------------------------------------------------------
# Lesson 03: the instruction's operands
# -----------------------------------------------------------------------------------------------------------
def _wgmma_source() -> str:
    src = next(c.source for c in _cells("03") if c.source.startswith("REGS ="))
    ns: dict = {}
    exec(src.split("\nfor last in")[0], ns)
    return ns["WGMMA_ONE"]


@pytest.mark.parametrize("last, ok", [("p, 1, 1, 0, 0", True), ("1, 1, 1, 0, 0", True), ("0, 1, 1, 0, 0", True),
                                      ("p, -1, -1, 0, 0", True), ("p, 1, 1, 1, 1", True),
                                      ("p, 2, 1, 0, 0", False), ("p, 1, 0, 0, 0", False)])
def test_ptxas_takes_immediate_scale_d_and_only_plus_minus_one_scales(last, ok):
    src = _wgmma_source().replace("LAST", last)
    if ok:
        assert gpu.compile(src, "one").report.uses_wgmma
    else:
        with pytest.raises(gpu.CompileError, match="expected to be -1 or 1"):
            gpu.compile(src, "one")


def test_scale_d_zero_ignores_the_old_accumulators():
    rng = np.random.default_rng()
    a = rng.integers(-8, 9, size=(64, 64)).astype(np.float32)
    bt = rng.integers(-8, 9, size=(64, 64)).astype(np.float32)
    smem = np.zeros(2 * 8192, np.uint8)
    wgmma.write_kmajor_tile(smem, 0, a, Swizzle.B128)
    wgmma.write_kmajor_tile(smem, 8192, bt, Swizzle.B128)
    old = rng.integers(-99, 99, size=(128, 32)).astype(np.float32)
    da, db = wgmma.make_descriptor(0, 16, 1024, Swizzle.B128), wgmma.make_descriptor(8192, 16, 1024, Swizzle.B128)
    product = a[:, :16] @ bt[:, :16].T
    assert np.array_equal(wgmma.fragments_to_tile(wgmma.mma_async(smem, da, db, 64, old, scale_d=0), 64), product)
    assert np.array_equal(wgmma.fragments_to_tile(wgmma.mma_async(smem, da, db, 64, old, scale_d=1), 64),
                          product + wgmma.fragments_to_tile(old, 64))
    assert lesson03.template_args.right.startswith("scale-d = 1 (D = A·B + D)")


def test_lesson03_no_longer_says_wgmma_fence_orders_shared_memory():
    text = "\n".join(c.source for c in _cells("03") if c.cell_type == "markdown")
    assert "register (and shared\nmemory)" not in text and "(and shared memory)" not in text
    assert "register** accesses only" in text
    header = (ROOT / "helpers" / "include" / "hopper.cuh").read_text()
    fence_doc = header[header.index("wgmma_fence()") - 600: header.index("wgmma_fence()")]
    assert "does not order shared memory" in fence_doc
    assert lesson03.operand_fence.right.startswith("fence.proxy.async.shared::cta")
