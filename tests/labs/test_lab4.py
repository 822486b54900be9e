"""Lab 4 graders, both ways: the solution passes on every seed; the stub and named plausible wrong answers fail on
every one of 200 seeds, with a hint that names the mistake. The solution is read from solutions/lab4_pipeline.ipynb.

The CUDA graders are tested on the kernels as the solution writes them after the course's own wrappers of Labs 1 and
2, both ways: on the compile-only path (``no_gpu``: the compile report and the protocol read off the PTX are the
grade) and on the PTX executor (``executor``: the run is the grade, and rejects the wrong kernels only a run can
catch); the runs on an H100 are in tests/labs/gpu_lab4.py (tools/h100/run.sh lab4). Also here: the tiered hints
(the stubs show tier 0 only), and the diff the lab opens with (Lab 3's kernel, the student's own when it is there,
against this lab's, with Lab 3's speed from the course's ladder).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
from pathlib import Path

import nbformat
import pytest
from hinttools import notebook_exercises

from helpers.course import grading, hints, labgen
from helpers.course.checks import lab4
from helpers.hopper import pipeline as pl

ROOT = Path(__file__).resolve().parents[2]
SOL = labgen.solution_namespace(ROOT / "solutions" / "lab4_pipeline.ipynb")
STUB = labgen.solution_namespace(ROOT / "labs" / "lab4_pipeline.ipynb")
SEEDS = range(200)


def _quiet(grader, *args, **kw) -> str | None:
    """Run a grader without its printout; None when it passes, else its failure message."""
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            grader(*args, **kw)
        except grading.CheckFailed as exc:
            return str(exc)
    return None


def _rejected_on_every_seed(grader, args, *needles: str) -> None:
    for seed in SEEDS:
        msg = _quiet(grader, *args, seed=seed)
        assert msg is not None, f"seed {seed}: {grader.__name__} accepted a wrong answer"
        for needle in needles:
            assert re.search(needle, msg, re.S), f"seed {seed}: {needle!r} not in:\n{msg}"


# ------------------------------------------------------------------------------------------- the solution
PY_GRADERS = [
    (lab4.check_ring_slot, ("ring_slot",)),
    (lab4.check_init_counts, ("init_counts",)),
    (lab4.check_protocol, ("producer", "consumer", "init_counts")),
    (lab4.check_overlapped_consumer, ("producer", "overlapped_consumer", "init_counts")),
    (lab4.check_stages_for_budget, ("stages_for_budget",)),
    (lab4.check_setmaxnreg_budget, ("setmaxnreg_verdict",)),
]


@pytest.mark.parametrize("grader, names", PY_GRADERS, ids=lambda x: getattr(x, "__name__", ""))
def test_solution_passes_on_every_seed(grader, names):
    for seed in range(0, 200, 4 if "protocol" in grader.__name__ or "overlap" in grader.__name__ else 1):
        assert _quiet(grader, *(SOL[n] for n in names), seed=seed) is None, f"seed {seed}"


@pytest.mark.parametrize("grader, names", PY_GRADERS, ids=lambda x: getattr(x, "__name__", ""))
def test_stub_fails_with_its_hint(grader, names):
    msg = _quiet(grader, *(STUB[n] for n in names))
    assert msg and "not written yet" in msg and "hint" in msg, msg


def test_solutions_are_the_references():
    for k in range(40):
        for s in range(1, 9):
            assert SOL["ring_slot"](k, s) == lab4.reference_ring_slot(k, s)
    assert [SOL["init_counts"](c) for c in range(1, 5)] == [lab4.reference_init_counts(c) for c in range(1, 5)]
    assert SOL["stages_for_budget"](128, 256, 64, lab4.SMEM_LIMIT) == lab4.reference_stages(128, 256, 64) == 4
    assert lab4.reference_stages(128, 128, 64) == 7 and lab4.smem_bytes(4) == 197696
    assert lab4.dynamic_smem_bytes(4) == 1024 + 4 * 49152  # the barriers are static shared memory


# ------------------------------------------------------------------------------------------- 1 · ring slots
RING_WRONG = {
    "stage k % 2 (two stages only)": (lambda k, s: (k % 2, (k // s) & 1), "k % 2 only works"),
    "stage k & (S - 1) (powers of two only)": (lambda k, s: (k & (s - 1), (k // s) & 1), "power of two"),
    "parity not flipped on wrap": (lambda k, s: (k % s, 0), "never flips"),
    "parity flipped at every use": (lambda k, s: (k % s, k & 1), "not at every use"),
    "parity not masked": (lambda k, s: (k % s, k // s), "0 or 1"),
    "the producer's flipped parity": (lambda k, s: (k % s, ((k // s) & 1) ^ 1), "EMPTY"),
    "no wrap at all": (lambda k, s: (k, 0), "wraps around"),
    "a list instead of a pair of ints": (lambda k, s: [float(k % s), (k // s) & 1], "pair of ints"),
}


@pytest.mark.parametrize("name", RING_WRONG)
def test_ring_slot_wrong_answers(name):
    fn, needle = RING_WRONG[name]
    _rejected_on_every_seed(lab4.check_ring_slot, (fn,), needle)


# ------------------------------------------------------------------------------------------- 2 · counts
COUNTS_WRONG = {
    "EMPTY count 1 whatever the consumers": (lambda c: (1, 1), "first release"),
    "the TMA counted as an arrival on FULL": (lambda c: (2, c), "never arrive"),
    "every consumer thread arrives on EMPTY": (lambda c: (1, 128 * c), "elected thread"),
    "arrive-and-wait counts on both": (lambda c: (128 * c + 1, 128 * c + 1), "arrive-and-wait"),
    "the producer counted on EMPTY": (lambda c: (1, c + 1), "does not arrive"),
}


@pytest.mark.parametrize("name", COUNTS_WRONG)
def test_init_counts_wrong_answers(name):
    fn, needle = COUNTS_WRONG[name]
    _rejected_on_every_seed(lab4.check_init_counts, (fn,), needle)


# ------------------------------------------------------------------------------------------- 3 · protocol
def _producer(slot=pl.stage_and_phase, flip=True, waits=True, nbytes=lab4.A_BYTES + lab4.B_BYTES):
    def producer(ctx, k_tiles):
        for k in range(k_tiles):
            s, phase = slot(k, ctx.stages)
            if waits:
                yield ctx.wait(ctx.empty[s], phase ^ 1 if flip else phase)
            yield ctx.arrive_expect_tx(ctx.full[s], nbytes)
            yield ctx.tma_load(s, ctx.full[s], lab4.A_BYTES, "A")
            yield ctx.tma_load(s, ctx.full[s], lab4.B_BYTES, "B")
    return producer


def _consumer(slot=pl.stage_and_phase, early=False, release_last=True):
    def consumer(ctx, k_tiles):
        for k in range(k_tiles):
            s, phase = slot(k, ctx.stages)
            yield ctx.wait(ctx.full[s], phase)
            for _ in range(lab4.WGMMAS_PER_STAGE):
                yield ctx.wgmma_async(s)
            yield ctx.commit_group()
            if early:
                yield ctx.arrive(ctx.empty[s])
                yield ctx.wait_group(0)
                continue
            yield ctx.wait_group(0)
            if release_last or k < k_tiles - 1:
                yield ctx.arrive(ctx.empty[s])
    return consumer


def _no_flip(k, s):
    return k % s, 0


def _k_mod_2(k, s):
    return k % 2, (k // s) & 1


REF = (lab4.reference_producer, lab4.reference_consumer, lab4.reference_init_counts)
PROTOCOL_WRONG = {
    "parity not flipped on wrap (both roles)": ((_producer(_no_flip), _consumer(_no_flip), REF[2]), "parity"),
    "parity not flipped on wrap (consumer)": ((REF[0], _consumer(_no_flip), REF[2]), "parity"),
    "producer waits on EMPTY without flipping": ((_producer(flip=False), REF[1], REF[2]), "fresh empty"),
    "producer never waits on EMPTY": ((_producer(waits=False), REF[1], REF[2]), "never waits on empty"),
    "EMPTY initialised with count 1": ((REF[0], REF[1], lambda c: (1, 1)), "first release"),
    "EMPTY initialised with one arrival per thread": ((REF[0], REF[1], lambda c: (1, 128 * c)), "elected thread"),
    "FULL waiting for the TMA to arrive": ((REF[0], REF[1], lambda c: (2, c)), "never arrive"),
    "stage released before its wgmma retired": ((REF[0], _consumer(early=True), REF[2]), "wait_group\\(0\\) first"),
    "stage index k % 2 with S = 3": ((_producer(_k_mod_2), _consumer(_k_mod_2), REF[2]), "k % 2 only works"),
    "only one tile's bytes announced": ((_producer(nbytes=lab4.B_BYTES), REF[1], REF[2]), "both copies"),
    "last stage never released": ((REF[0], _consumer(release_last=False), REF[2]), "release every stage"),
}


@pytest.mark.parametrize("name", PROTOCOL_WRONG)
def test_protocol_wrong_answers(name):
    args, needle = PROTOCOL_WRONG[name]
    _rejected_on_every_seed(lab4.check_protocol, args, needle)


def test_protocol_errors_are_sentences_not_tracebacks():
    msg = _quiet(lab4.check_protocol, _producer(waits=False), REF[1], REF[2], seed=1)
    assert "Traceback" not in msg and "S=3, 1 consumer" in msg


def test_not_a_generator_is_explained():
    def forgot_yield(ctx, k_tiles):
        ctx.wait(ctx.empty[0], 1)

    msg = _quiet(lab4.check_protocol, forgot_yield, REF[1], REF[2], seed=0)
    assert "instead of yielding commands" in msg


def test_equivalent_protocols_pass():
    """Other correct programs pass too: consumers that pre-arrive on EMPTY (and a producer waiting on the plain
    parity), a producer issuing B before A, and a consumer using the synchronous wgmma."""
    def pre_arriving(ctx, k_tiles):
        for s in range(ctx.stages):
            yield ctx.arrive(ctx.empty[s])
        yield from lab4.reference_consumer(ctx, k_tiles)

    def b_first(ctx, k_tiles):
        for k in range(k_tiles):
            s, phase = pl.stage_and_phase(k, ctx.stages)
            yield ctx.wait(ctx.empty[s], phase ^ 1)
            yield ctx.arrive_expect_tx(ctx.full[s], lab4.A_BYTES + lab4.B_BYTES)
            yield ctx.tma_load(s, ctx.full[s], lab4.B_BYTES, "B")
            yield ctx.tma_load(s, ctx.full[s], lab4.A_BYTES, "A")

    def synchronous(ctx, k_tiles):
        for k in range(k_tiles):
            s, phase = pl.stage_and_phase(k, ctx.stages)
            yield ctx.wait(ctx.full[s], phase)
            for _ in range(lab4.WGMMAS_PER_STAGE):
                yield ctx.wgmma(s)
            yield ctx.arrive(ctx.empty[s])

    for seed in range(0, 200, 10):
        assert _quiet(lab4.check_protocol, _producer(flip=False), pre_arriving, REF[2], seed=seed) is None
        assert _quiet(lab4.check_protocol, b_first, synchronous, REF[2], seed=seed) is None


# ------------------------------------------------------------------------------------------- 4 · overlapped
def _overlapped(release_current=False, drain=True, arrive_first=False):
    def consumer(ctx, k_tiles):
        for k in range(k_tiles):
            s, phase = pl.stage_and_phase(k, ctx.stages)
            yield ctx.wait(ctx.full[s], phase)
            for _ in range(lab4.WGMMAS_PER_STAGE):
                yield ctx.wgmma_async(s)
            yield ctx.commit_group()
            if arrive_first and k > 0:
                yield ctx.arrive(ctx.empty[pl.stage_and_phase(k - 1, ctx.stages)[0]])
            yield ctx.wait_group(1)
            if release_current:
                yield ctx.arrive(ctx.empty[s])
            elif k > 0 and not arrive_first:
                yield ctx.arrive(ctx.empty[pl.stage_and_phase(k - 1, ctx.stages)[0]])
        if drain:
            yield ctx.wait_group(0)
            if not release_current:
                yield ctx.arrive(ctx.empty[pl.stage_and_phase(k_tiles - 1, ctx.stages)[0]])
    return consumer


OVERLAP_WRONG = {
    "wait_group(1), then the current stage released": (_overlapped(release_current=True), "PREVIOUS"),
    "previous stage released before wait_group(1)": (_overlapped(arrive_first=True), "group in flight|PREVIOUS"),
    "no drain": (_overlapped(drain=False), "drain"),
    "still waiting for every group": (lab4.reference_consumer, "wait_group\\(1\\)"),
}


@pytest.mark.parametrize("name", OVERLAP_WRONG)
def test_overlapped_consumer_wrong_answers(name):
    fn, needle = OVERLAP_WRONG[name]
    _rejected_on_every_seed(lab4.check_overlapped_consumer, (REF[0], fn, REF[2]), needle)


# ------------------------------------------------------------------------------------------- 5 · stages
STAGES_WRONG = {
    "no alignment slack, no barriers": (lambda bm, bn, bk, lim: lim // ((bm + bn) * bk * 2), "slack"),
    "barriers forgotten": (lambda bm, bn, bk, lim: (lim - 1024) // ((bm + bn) * bk * 2), "16 bytes"),
    "only the A tile": (lambda bm, bn, bk, lim: (lim - 1024) // (bm * bk * 2 + 16), "both tiles"),
    "4-byte elements": (lambda bm, bn, bk, lim: (lim - 1024) // ((bm + bn) * bk * 4 + 16), "2 bytes"),
    "elements, not bytes": (lambda bm, bn, bk, lim: (lim - 1024) // ((bm + bn) * bk + 16), "count bytes"),
    "rounded up": (lambda bm, bn, bk, lim: -(-(lim - 1024) // ((bm + bn) * bk * 2 + 16)), "round down"),
    "at least one stage": (lambda bm, bn, bk, lim: max(1, (lim - 1024) // ((bm + bn) * bk * 2 + 16)), "expected"),
}


@pytest.mark.parametrize("name", STAGES_WRONG)
def test_stages_wrong_answers(name):
    fn, needle = STAGES_WRONG[name]
    _rejected_on_every_seed(lab4.check_stages_for_budget, (fn,), needle)


# ------------------------------------------------------------------------------------------- 6 · setmaxnreg
def _verdict(order=("8", "range", "pool"), strict=False, per_warpgroup=False, pool_unit=1):
    def verdict(entry, counts):
        for rule in order:
            if rule == "8" and any(c % 8 for c in counts):
                return "not a multiple of 8"
            if rule == "range" and any(not 24 <= c <= 256 for c in counts):
                return "outside 24..256"
            if rule == "pool":
                if per_warpgroup and any(c > entry for c in counts[:1]):
                    return "over the pool"
                total = sum(counts)
                if (total >= entry * len(counts) * pool_unit) if strict else (total > entry * len(counts) * pool_unit):
                    return "over the pool"
        return "ok"
    return verdict


VERDICT_WRONG = {
    "always ok": (lambda e, c: "ok", "pool|multiples of 8|24"),
    "the pool never checked": (_verdict(order=("8", "range")), "setmaxnreg.inc would wait forever"),
    "range before multiples of 8": (_verdict(order=("range", "8", "pool")), "multiples of 8"),
    "a budget that exactly adds up refused": (_verdict(strict=True), "hand back|the registers the producer"),
    "each warpgroup against the entry count": (_verdict(order=("8", "range", "pool"), per_warpgroup=True,
                                                        pool_unit=10**6), "pool|wait forever"),
    "the register file instead of the pool": (lambda e, c: _verdict()(65536 // (128 * len(c)), c), "pool"),
}


@pytest.mark.parametrize("name", VERDICT_WRONG)
def test_setmaxnreg_wrong_answers(name):
    fn, needle = VERDICT_WRONG[name]
    _rejected_on_every_seed(lab4.check_setmaxnreg_budget, (fn,), needle)


def test_entry_registers_are_what_nvrtc_gave():
    """Measured with NVRTC 13 (sm_90a, __launch_bounds__(T, 1), a warpgroup raising to 256): see registers.py."""
    from helpers.course.widgets import registers

    assert [lab4.entry_registers(t) for t in (384, 512, 640)] == [168, 128, 96]
    assert registers.entry_registers(384, 2) == 80 and registers.entry_registers(384, None) is None


# ------------------------------------------------------------------------------------------- 7, 8 · CUDA
def _gpu_script():
    """tests/labs/gpu_lab4.py (the H100 script): the wrong kernels and the course's wrappers, shared with the GPU
    run."""
    spec = importlib.util.spec_from_file_location("gpu_lab4", Path(__file__).with_name("gpu_lab4.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GPU = _gpu_script()
COURSE = GPU.course_sources()
WRAPPERS = COURSE["WRAPPERS"]
PC_KERNEL, LAB4_CELL = SOL["PC_KERNEL"], SOL["LAB4_KERNEL"]
#: step 8's whole kernel: the step 8 cell with the solution's step 7 kernel carried into it (what its check grades)
LAB4_KERNEL = lab4.step8_kernel(PC_KERNEL, LAB4_CELL)
KERNELS = GPU.wrong_kernels(PC_KERNEL, LAB4_KERNEL)
GRADERS = {"PC": lab4.check_pc_kernel, "WS": lab4.check_ws_kernel}


def _kernel_check(step: str, kernel: str, wrappers: str = WRAPPERS) -> str | None:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            GRADERS[step](wrappers + kernel, kernel=kernel)
        except grading.CheckFailed as exc:
            return str(exc)
    return None


def _step8(pc: str, cell: str, wrappers: str = WRAPPERS) -> str | None:
    """Step 8's check (your step 7 kernel carried into the step 8 cell), quiet: None when it passes, else why."""
    return _quiet(lab4.check_step8_kernel, wrappers, pc, cell, benchmark=False)


@pytest.fixture()
def step7_passed(monkeypatch):
    """The solution's step 7 kernel passed step 7's check in this session (as its cell above step 8 does)."""
    monkeypatch.setattr(lab4, "_PC_PASSED", {lab4._digest(WRAPPERS + PC_KERNEL)})


def test_kernel_solutions_pass_without_a_gpu(capsys, no_gpu):
    lab4.check_pc_kernel(WRAPPERS + PC_KERNEL, kernel=PC_KERNEL)
    lab4.check_ws_kernel(WRAPPERS + LAB4_KERNEL, kernel=LAB4_KERNEL)
    out = capsys.readouterr().out
    assert out.count("run skipped") == 2 and "setmaxnreg" in out
    assert "arrival counts: full[s] 1 (the producer's arrival), empty[s] 2" in out


@pytest.mark.parametrize("which, step", [("PC_KERNEL", "PC"), ("LAB4_KERNEL", "WS")])
def test_kernel_stubs_fail_with_tier_0(which, step):
    msg = _kernel_check(step, STUB[which]) if step == "PC" else _step8(PC_KERNEL, STUB[which])
    assert msg and "not written yet" in msg and "(stuck? lab4.hint(" in msg, msg
    ex = hints.exercises()["lab4-pc" if step == "PC" else "lab4-ws"]
    assert ex.regions[0].hints[0] in msg.replace('\\"', '"')


def test_kernels_built_on_unwritten_wrappers_say_where(tmp_path, monkeypatch):
    """A student whose Lab 1 and 2 notebooks are not beside this one: the wrappers carried are #error lines, and the
    check says the wrappers of which lab are missing."""
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        wrappers = lab4.carry_wrappers()
    assert "lab1_tma.ipynb is not beside this notebook" in out.getvalue()
    msg = _kernel_check("PC", PC_KERNEL, wrappers)
    assert "not written yet in Lab 1" in msg and "lab1_tma.ipynb" in msg


@pytest.mark.parametrize("name", KERNELS)
def test_wrong_kernels_are_rejected_without_a_gpu(name, no_gpu):
    step, src, pattern = KERNELS[name]
    msg = _kernel_check(step, src)
    assert msg is not None, f"{name}: accepted"
    assert re.search(pattern, msg, re.I | re.S), msg
    assert "Traceback" not in msg


def test_kernel_failures_name_the_line(no_gpu):
    """The protocol's failures point at the student's own line of the kernel."""
    step, src, _ = KERNELS["stage released before its wgmma retired"]
    msg = _kernel_check(step, src)
    line = next(n for n, text in enumerate(src.split("\n"), 1) if "my_mbar_arrive(&empty[s])" in text)
    assert f"line {line} of the kernel" in msg and "my_mbar_arrive(&empty[s])" in msg


def test_runtime_wrong_kernels_compile_and_pass_the_static_checks(no_gpu):
    """The wrong kernels only a run can catch (gpu_lab4.py runs them on the H100) really do get past everything
    checked without a GPU, so the run is what rejects them."""
    for name, (step, src, _) in GPU.runtime_wrong_kernels(PC_KERNEL, LAB4_KERNEL).items():
        assert _kernel_check(step, src) is None, name


def test_kernel_runs_take_the_one_run_path(monkeypatch):
    """Where a run is possible, the kernel goes through _common.run (the one run path) on a shape with partial tiles in
    M and N, M ≠ N ≠ K, and a ring that wraps twice, into a NaN-poisoned C; a wrong C fails the check. Without an
    H100 the run is lab4.executor_runs (the launch with its work log): its grid and shared memory are those of the
    launch the H100 gets."""
    import numpy as np

    from helpers.course.checks import _common as C

    calls, launches = [], []

    def fake_run(target, *args, what, timeout, hint=""):
        assert target is lab4.executor_runs, target
        source, name, stages, cases = args
        calls.append((name, stages, [(a.shape, b.shape) for a, b in cases]))
        return {"c": [(a.astype(np.float64) @ b.astype(np.float64).T).astype(np.float32) for a, b in cases],
                "work": [type("Run", (), {"log": None})() for _ in cases]}

    def fake_prepare(kernel, grid, block, smem, ta, tb, c, m, n, k):
        launches.append((grid, block, smem, ta.box, tb.box, c.shape, int(m), int(n), int(k)))

    class Dev:
        def __init__(self, shape):
            self.shape = shape

    monkeypatch.setattr(C, "runnable", lambda kernel, checked: True)
    monkeypatch.setattr(C, "on_h100", lambda: False)
    monkeypatch.setattr(C, "run", fake_run)
    assert _kernel_check("WS", LAB4_KERNEL) is None
    ((name, stages, ((ashape, bshape),)),) = calls
    (m, k), n = ashape, bshape[0]
    assert name == "lab4_ws_gemm" and stages == lab4.source_stages(LAB4_KERNEL) == 4
    assert (m, n) == (128 + 64, 256 + 64) and k == 64 * (2 * stages + 1) and bshape[1] == k
    calls.clear()
    assert _kernel_check("PC", PC_KERNEL) is None
    ((name, stages, ((ashape, bshape),)),) = calls
    assert (ashape, bshape[0]) == ((192, 64 * (2 * lab4.source_stages(PC_KERNEL) + 1)), 320)

    from helpers import gpu

    monkeypatch.setattr(gpu, "tensor_map_2d", lambda a, rows, cols: type("Map", (), {"box": (rows, cols)})())
    monkeypatch.setattr(gpu, "prepare", fake_prepare)
    lab4._prepare(None, lab4.WS, lab4.dynamic_smem_bytes(4), Dev((192, 576)), Dev((320, 576)), Dev((192, 320)))
    ((grid, block, smem, abox, bbox, cshape, m, n, k),) = launches
    assert grid == (2, 2) and block == 384 and smem == lab4.dynamic_smem_bytes(4) and abox == (128, 64)
    assert bbox == (256, 64) and cshape == (192, 320) and (m, n, k) == (192, 320, 576)
    monkeypatch.setattr(C, "run", lambda *a, **kw: {"c": [np.zeros((192, 320), np.float32)], "work": [None]})
    assert "every element against fp64" in _kernel_check("WS", LAB4_KERNEL)


# ------------------------------------------------------------------------------------------- on the PTX executor
def test_kernel_solutions_run_on_the_emulator(capsys, executor):
    lab4.check_pc_kernel(WRAPPERS + PC_KERNEL, kernel=PC_KERNEL)
    lab4.check_ws_kernel(WRAPPERS + LAB4_KERNEL, kernel=LAB4_KERNEL)
    out = capsys.readouterr().out
    assert out.count("not timed: the emulator does not time kernels): M=192, N=320, K=576") == 2, out
    assert out.count("M=192, N=320, K=576: no stage released more times than it was filled") == 2, out
    assert "9 K steps through 4 stages" in out and "run skipped" not in out and "timed on" not in out


@pytest.mark.parametrize("name", GPU.runtime_wrong_kernels(PC_KERNEL, LAB4_KERNEL))
def test_runtime_wrong_kernels_are_rejected_by_the_run(name, executor):
    """The wrong kernels the PTX cannot show are rejected by the run on the emulator, "stage index k % 2 with 4
    stages" included (on the H100 it gave the right C by luck: here the ring's barriers get one arrival too many)."""
    step, src, pattern = GPU.runtime_wrong_kernels(PC_KERNEL, LAB4_KERNEL)[name]
    msg = _kernel_check(step, src)
    assert msg is not None, f"{name}: accepted"
    assert re.search(pattern, msg, re.I | re.S) and re.search("ran on the emulator", msg.split("\n", 1)[0]), msg
    assert "Traceback" not in msg


@pytest.mark.parametrize("name", ["stage released before its wgmma retired", "producer never waits on EMPTY",
                                  "consumers never wait on FULL", "no drain"])
def test_wrong_kernels_fail_the_run_or_the_ptx_on_the_emulator(name, executor):
    """The mistakes the PTX shows are still rejected where the kernel runs: by the run, with the PTX as the likely
    cause, or by the PTX after a run that passed by luck."""
    step, src, pattern = KERNELS[name]
    msg = _kernel_check(step, src)
    assert msg is not None and re.search(pattern, msg, re.I | re.S), msg
    first = msg.split("\n", 1)[0]
    assert ("ran on the emulator" in first and "what the PTX shows" in msg) or "the run above gave the right" in msg


def test_the_work_check_names_a_tile_computed_twice(executor):
    """Rows 64–127 computed by two blocks (the last row of blocks moved up to end at row M) leave C right; the work
    the executor recorded shows it, and names the tile and both blocks."""
    step, src, _ = GPU.runtime_wrong_kernels(PC_KERNEL, LAB4_KERNEL)["last row of tiles clamped to M - BM (rows "
                                                                      "computed twice)"]
    msg = _kernel_check(step, src)
    assert msg is not None and "all 61440 elements match" not in msg.split("\n", 1)[0]
    first = msg.split("\n", 1)[0]
    assert "ran on the emulator (" in first and "hazard mode" in first and "M=192, N=320, K=576" in first, msg
    assert ("the 128×128 tile of C at rows 0–127, columns 0–127 (block (0,0)'s) was computed and stored more than "
            "once: its rows 64–127 were stored 2 times, by block (0,0) and block (0,1)") in first, msg
    assert "m0 = blockIdx.y * BM" in msg


def test_the_work_check_names_a_duplicated_product_and_a_foreign_store():
    """check_kernel_work on hand-made work logs: one wgmma product issued by two blocks, and a tile stored by a block
    the grid does not give it."""
    import numpy as np

    from helpers.course.checks._work import Launched
    from helpers.gpu.executor.work import Block, Mma, WorkLog

    A, B, CADDR, m, n = 0x1000, 0x2000, 0x10000, 128, 256  # PC: a 1×2 grid of 128×128 tiles

    def log(extra_mma=None, store_block=(1, 0)):
        w = WorkLog()
        for x in (0, 1):
            blk = Block((x, 0, 0))
            for wg in (1, 2):
                w.mmas.append(Mma(blk, wg, A, 64 * (wg - 1), B, 128 * x, 0, 128))
            cols = np.arange(128 * x, 128 * x + 128, 2)
            rows = np.arange(128)
            addr = CADDR + 4 * (rows[:, None] * n + cols[None, :]).ravel()
            w.global_stores[Block((store_block[0] if x == 1 else 0, 0, 0))].append(addr.astype(np.uint64))
        if extra_mma is not None:
            w.mmas.append(extra_mma)
        return w

    def grade(w):
        with grading.check("T") as c:
            lab4.check_kernel_work(c, lab4.PC, Launched(w, A, B, CADDR), m=m, n=n, label="M=128, N=256, K=16")

    with contextlib.redirect_stdout(io.StringIO()) as out:
        grade(log())
    assert "each of the 2 tiles of C stored by its own block, every element once, and each of the 4 wgmma" in \
        out.getvalue()
    grading.assert_rejects(grade, log(Mma(Block((1, 0, 0)), 1, A, 64, B, 0, 0, 128)),
                           "the product of A rows 64–127 and B rows 0–127", "computed 2 times",
                           "by block (0,0) and block (1,0)")
    grading.assert_rejects(grade, log(store_block=(0, 0)),
                           "the 128×128 tile of C at rows 0–127, columns 128–255 (block (1,0)'s) was stored (in part) "
                           "by block (0,0); the grid gives it to block (1,0)")


def _pretend_h100(monkeypatch) -> list:
    """The Lab 4 run path as on an H100 (as tests/labs/test_runpath.py does for Labs 5-6): the GPU's runs give the
    exact C (as the H100 did for the early release at k = 0), timing gives a fixed speed; the executor runs for real
    (inside _common.emulated). Returns the list the GPU runs are recorded in."""
    import os

    import numpy as np

    from helpers import gpu
    from helpers.course.checks import _common as C

    calls: list = []
    real = C.run

    def forced() -> bool:
        return os.environ.get("HELPERS_EXECUTOR") == "force"

    class Bench:
        tflops, cublas_tflops = 600.0, 700.0

        def summary(self) -> str:
            return "600 TFLOP/s, cuBLAS 700 TFLOP/s"

    def run(target, *args, **kw):
        if forced():
            return real(target, *args, **kw)
        if target is lab4.gpu_benchmark:
            return Bench()
        ta, tb = args[3], args[4]
        calls.append((ta.array.shape, tb.array.shape))
        return [(ta.array.astype(np.float64) @ tb.array.astype(np.float64).T).astype(np.float32)]

    monkeypatch.setenv("HELPERS_EXECUTOR", "auto")
    monkeypatch.setattr(C, "run", run)
    monkeypatch.setattr(C, "on_h100", lambda: not forced())
    monkeypatch.setattr(gpu, "hopper_available", lambda: True)
    monkeypatch.setattr(gpu, "device_info", lambda: type("I", (), {"name": "NVIDIA H100 80GB HBM3"})())
    return calls


def test_on_an_h100_the_kernel_also_runs_on_the_executor_in_hazard_mode(monkeypatch, capsys):
    """A student with a GPU gets the executor's verdict too: the GPU's large shapes, then the emulator's shape on the
    executor in hazard mode with the work checked, then the timing."""
    calls = _pretend_h100(monkeypatch)
    lab4.check_pc_kernel(WRAPPERS + PC_KERNEL, kernel=PC_KERNEL)
    out = capsys.readouterr().out
    from helpers import gpu

    here = gpu.where_name()  # how the check names the GPU it pretends to have
    assert len(calls) == 3 and out.count(f"✓ ran on {here}: M=") == 3, out
    beside = f"✓ ran on the emulator (beside {here}, the same kernel on a small shape; hazard mode): M=192, N=320"
    assert f"{beside}, K=576 (2×3 blocks, partial tiles at the edges" in out, out
    assert f"{beside}, K=576: the work, as the emulator recorded it: each of the 6 tiles" in out, out
    assert "timed on the H100 at 4096³ beside cuBLAS in the same run: 600 TFLOP/s" in out


def test_on_an_h100_the_release_at_k_0_is_rejected_beside_the_gpu(monkeypatch):
    """The consumer releasing empty[(k + STAGES - 1) % STAGES] at k = 0 gave the right C on the H100 (three large
    shapes, every element); the same kernel on the executor in hazard mode, beside the GPU, rejects it."""
    calls = _pretend_h100(monkeypatch)
    step, src, _ = GPU.runtime_wrong_kernels(PC_KERNEL, LAB4_KERNEL)[
        "stage k - 1 released as (k + STAGES - 1) % STAGES, at k = 0 too"]
    msg = _kernel_check(step, src)
    assert len(calls) == 3 and msg is not None
    first = msg.split("\n", 1)[0]
    assert ("your kernel on M=192, N=320, K=576 failed when it ran on the emulator (beside the H100, the same kernel "
            "on a small shape; hazard mode)") in first, msg
    assert "empty[3]" in first and "overwrites" in first


def test_gpu_script_reads_the_same_solution():
    ns = GPU.solution_namespace()
    assert ns["PC_KERNEL"] == PC_KERNEL and ns["LAB4_KERNEL"] == LAB4_KERNEL and ns["WRAPPERS"] == WRAPPERS
    assert ns["LAB4_CELL"] == LAB4_CELL


def test_lab4_builds_on_the_lab3_kernel_and_its_wrappers():
    """The Lab 4 kernels use the wrappers Lab 3's kernel used (my_*), Lab 3's kslice_desc, and nothing of a local
    copy of Lab 3."""
    assert not hasattr(lab4, "LAB3_KERNEL")
    for kernel in (PC_KERNEL, LAB4_KERNEL):
        for wrapper in ("my_mbar_init(", "my_mbar_wait(", "my_mbar_expect_tx(", "my_mbar_arrive(", "my_tma_load_2d("):
            assert wrapper in kernel, wrapper
        assert "HOPPER_WAIT" not in kernel and "hopper::mbar_init" not in kernel and "hopper::tma_load" not in kernel
    lab3 = COURSE["LAB3_KERNEL"]
    desc = lab3[lab3.index("__device__ __forceinline__ unsigned long long kslice_desc"):]
    desc = desc[:desc.index("\n}\n") + 3]
    assert labgen_code(desc) in LAB4_KERNEL and labgen_code(desc) in PC_KERNEL


def labgen_code(text: str) -> str:
    return "\n".join(ln for ln in text.split("\n") if "### " not in ln and hints.parse_hint(ln) is None)


# ------------------------------------------------------------------------------------------- 8 · step 7 carried
CARRIED_ANSWERS = ("my_mbar_init(&full[s], 1);", "my_mbar_init(&empty[s], CONSUMERS);", GPU.EMPTY_WAIT,
                   "my_mbar_expect_tx(&full[s], STAGE_BYTES);", GPU.RELEASE, GPU.DRAIN_RELEASE,
                   "hopper::wgmma_wait<0>();")


_STUB_REGION = r"( *)// YOUR CODE HERE\n#error \"not written yet[^\n]*\n"


def _written(text: str, codes: list[str]) -> str:
    """A student's copy of a kernel (no solution markers, a stub per region) with ``codes`` written in its regions,
    in order."""
    assert len(re.findall(_STUB_REGION, text)) == len(codes)
    for code in codes:
        text = re.sub(_STUB_REGION, lambda m, code=code: "".join(m.group(1) + ln + "\n" for ln in code.split("\n")),
                      text, count=1)
    return text


def _labs_step7(**regions: str) -> str:
    """The student's copy of step 7 with their code in each region (init, producer, kstep, release, drain)."""
    return _written(STUB["PC_KERNEL"], list(regions.values()))


def _solution_regions(kernel: str = PC_KERNEL) -> list[str]:
    """The solution's regions of a kernel, code only."""
    found = re.findall(r"// ### BEGIN SOLUTION\n(.*?)\n *// ### END SOLUTION", kernel, re.S)
    return ["\n".join(ln.strip() for ln in r.split("\n") if hints.parse_hint(ln) is None) for r in found]


MINE = dict(zip(("init", "producer", "kstep", "release", "drain"), _solution_regions(), strict=True))
MINE["init"] = "my_mbar_init(&empty[s], CONSUMERS);  // mine: empty first\nmy_mbar_init(&full[s], 1);"
MINE["drain"] = "hopper::wgmma_wait<0>();  // mine: nothing in flight\nif (nk > 0 && t == 0) {\n" \
                "  my_mbar_arrive(&empty[(nk - 1) % STAGES]);\n}"


def test_step8_kernel_is_the_course_kernel_for_the_solution():
    from helpers.course.checks._common import course_kernel

    assert LAB4_KERNEL == course_kernel("lab4") and "carried" not in LAB4_KERNEL
    assert "// carried: your barrier initialisation" in LAB4_CELL and LAB4_CELL.count("// carried:") == 4


def test_step8_kernel_fills_each_carried_line_with_the_students_step7_code():
    whole = lab4.step8_kernel(_labs_step7(**MINE), STUB["LAB4_KERNEL"])
    assert "carried" not in whole and "YOUR CODE HERE" not in whole
    lines = whole.split("\n")
    at = {key: next(i for i, ln in enumerate(lines) if key in ln) for key in
          ("for (int s = 0; s < STAGES; ++s)", "// mine: empty first", "hopper::mbar_fence_init();",
           "const int s = j % STAGES;", GPU.EMPTY_WAIT, "// step k - 1's group has retired (wait_group 1 above)",
           GPU.RELEASE, "// mine: nothing in flight", "// ---- the store")}
    order = sorted(at, key=at.get)
    assert order == list(at), order
    assert whole.count("my_mbar_init(") == 2 and "  my_mbar_arrive(&empty[(nk - 1) % STAGES]);" in whole
    # step 8's own regions stay the cell's (the student's step 8 regions; here still stubs)
    assert whole.count('#error "not written yet') == 4 and "wgmma_m64n128k16" not in whole


def test_step8_kernel_keeps_the_students_other_step7_edits_and_names_what_step8_rewrites():
    from helpers.course import carry
    from helpers.course.checks._common import course_kernel

    mine = PC_KERNEL.replace("  __syncthreads();\n", "  __syncthreads();  // everyone sees the barriers\n")
    mine = mine.replace("    float d[64];  // this", "    float d[64];  // (mine) this")
    made = carry.assemble(lab4._step7_skeleton(), mine, LAB4_CELL, step="step 7")
    assert "__syncthreads();  // everyone sees the barriers" in made.text  # kept: step 8 leaves that line alone
    assert "(mine)" not in made.text and "float d[128];" in made.text  # step 8 rewrote that line: its version
    assert len(made.report) == 1 and "float d[64];  // (mine)" in made.report[0] and "step rewrites" in made.report[0]
    assert [line.strip() for line, _ in made.regions][0].startswith("// carried: your barrier initialisation")
    assert made.text.replace("  // everyone sees the barriers", "") == course_kernel("lab4")


def test_step8_kernel_with_a_step7_stub_says_so_and_gives_nothing_away():
    from helpers.course import carry

    with pytest.raises(carry.NotCarried, match="your barrier initialisation is not written yet in your step 7 "
                                              "kernel: step 7 must pass its check first"):
        lab4.step8_kernel(STUB["PC_KERNEL"], STUB["LAB4_KERNEL"])
    half = _labs_step7(**MINE).replace(GPU.RELEASE, '#error "not written yet"')
    with pytest.raises(carry.NotCarried, match="your release of step k - 1's stage is not written yet"):
        lab4.step8_kernel(half, LAB4_CELL)
    # the student's step 8 cell shows none of step 7's answers
    for answer in CARRIED_ANSWERS:
        assert answer not in STUB["LAB4_KERNEL"], answer


def test_step8_kernel_when_the_lines_around_a_region_are_gone():
    from helpers.course import carry

    mine = _labs_step7(**MINE).replace("      // step k - 1's group has retired (wait_group 1 above): its stage can go "
                                       "back to the producer\n", "")
    with pytest.raises(carry.NotCarried, match="could not find your release of step k - 1's stage in your step 7 "
                                              "kernel: the lines around it differ"):
        lab4.step8_kernel(mine, LAB4_CELL)


def test_step8_a_cell_without_carried_lines_is_whole():
    assert lab4.step8_kernel("anything", LAB4_KERNEL) == LAB4_KERNEL


def test_step8_check_passes_the_solution(capsys, no_gpu, step7_passed):
    lab4.check_step8_kernel(WRAPPERS, PC_KERNEL, LAB4_CELL)
    out = capsys.readouterr().out
    assert "✓ Lab 4 · step 8: your step 7 kernel carried" in out
    assert "✓ Lab 4 · 128×256 · m64n256k16 + setmaxnreg kernel" in out


def test_step8_check_names_a_step7_edit_that_step8_rewrites(capsys, no_gpu, monkeypatch):
    mine = PC_KERNEL.replace("    float d[64];  // this", "    float d[64];  // (mine) this")
    monkeypatch.setattr(lab4, "_PC_PASSED", {lab4._digest(WRAPPERS + mine)})
    lab4.check_step8_kernel(WRAPPERS, mine, LAB4_CELL)
    out = capsys.readouterr().out
    assert "⚠ your step 7 code (float d[64];  // (mine) this" in out and "step rewrites it; its version is used" in out


def test_step8_check_with_the_students_own_step7(capsys, no_gpu):
    """A student's step 7 and step 8 in their copy, with their own (right) code: step 7's check runs first (quietly),
    then step 8's on the kernel put together."""
    cell = _written(STUB["LAB4_KERNEL"], _solution_regions(LAB4_CELL))
    assert "YOUR CODE HERE" not in cell and "// carried:" in cell
    assert _step8(_labs_step7(**MINE), cell) is None


def test_step8_check_runs_the_students_whole_kernel_on_the_emulator(capsys, executor):
    cell = _written(STUB["LAB4_KERNEL"], _solution_regions(LAB4_CELL))
    lab4.check_step8_kernel(WRAPPERS, _labs_step7(**MINE), cell, benchmark=False)
    out = capsys.readouterr().out
    assert "✓ Lab 4 · step 8: your step 7 kernel carried" in out and "M=192, N=320, K=576" in out, out
    assert "run skipped" not in out and "✓ Lab 4 · 128×256 · m64n256k16 + setmaxnreg kernel" in out


def test_step8_check_says_step7_must_pass_first():
    msg = _step8(STUB["PC_KERNEL"], LAB4_CELL)
    assert msg and "step 8 is built on your step 7 kernel (PC_KERNEL)" in msg and "step 7 must pass" in msg, msg
    for answer in CARRIED_ANSWERS:
        assert answer not in msg
    _, wrong, _ = KERNELS["FULL and EMPTY counts swapped"]
    msg = _step8(wrong, LAB4_CELL)
    assert msg and msg.startswith("✗ Lab 4 · step 8: your step 7 kernel carried: step 7 must pass its check first: "
                                  "step 8 is your step 7 kernel with step 8's change (Lab 4 · 128×128 · producer + 2 "
                                  "consumers over a ring kernel: your kernel on M=192"), msg


#: wrong answers in step 8's own regions of the cell: (the solution's text, the wrong one, what the check says)
STEP8_WRONG = {
    "3 stages instead of the budget's 4": ("constexpr int STAGES = 4;", "constexpr int STAGES = 3;", "STAGES = 4"),
    "setmaxnreg budget that does not add up (248)": ("setmaxnreg_inc<240>", "setmaxnreg_inc<248>",
                                                     "over the pool|wait forever"),
    "no setmaxnreg_dec in the producer": ("    hopper::setmaxnreg_dec<24>();\n", "", "setmaxnreg"),
    "m64n128k16 in the 256-wide step": (
        "hopper::wgmma_m64n256k16_bf16(d, kslice_desc(a, kk), kslice_desc(b, kk));",
        "hopper::wgmma_m64n128k16_bf16(*reinterpret_cast<float(*)[64]>(d), kslice_desc(a, kk), kslice_desc(b, kk));",
        "m64n256k16"),
    "step 7's K step kept (no group left in flight)": ("hopper::wgmma_wait<1>();  // step k - 1's",
                                                       "hopper::wgmma_wait<0>();  // step k - 1's", "wait_group 1"),
}


@pytest.mark.parametrize("name", STEP8_WRONG)
def test_step8_wrong_regions_are_rejected(name, no_gpu, step7_passed):
    old, new, pattern = STEP8_WRONG[name]
    assert LAB4_CELL.count(old) == 1
    msg = _step8(PC_KERNEL, LAB4_CELL.replace(old, new))
    assert msg is not None, f"{name}: accepted"
    assert re.search(pattern, msg, re.I | re.S) and "Traceback" not in msg, msg


#: right answers in other spellings of the ring's depth: the check asks the compiler what STAGES is
RIGHT_STAGES = {
    "brace initialiser": "constexpr int STAGES{4};",
    "a macro": "#define STAGES 4",
    "static constexpr of an expression": "static constexpr unsigned STAGES = 2 * 2;",
}


@pytest.mark.parametrize("name", RIGHT_STAGES)
def test_stages_in_other_spellings_pass(name, no_gpu, step7_passed):
    spelled = RIGHT_STAGES[name]
    pc = PC_KERNEL.replace(" STAGES = 4,", "", 1).replace("CONSUMERS = 2;\n", f"CONSUMERS = 2;\n{spelled}\n", 1)
    assert pc.count(spelled) == 1 and "STAGES = 4" not in pc
    assert _kernel_check("PC", pc) is None, name
    assert lab4.source_stages(lab4.HEADER + WRAPPERS + pc) == 4
    assert LAB4_CELL.count("constexpr int STAGES = 4;") == 1
    assert _step8(PC_KERNEL, LAB4_CELL.replace("constexpr int STAGES = 4;", spelled)) is None, name


def test_stages_inside_the_kernel_body_pass(no_gpu, step7_passed):
    """STAGES declared inside the kernel's body (the compiler cannot see it from outside): read from the kernel's
    declarations, a right answer too."""
    cell = LAB4_CELL.replace("constexpr int STAGES = 4;", "")
    cell = re.sub(r"(lab4_ws_gemm\([^{]*\{)", lambda m: m.group(1) + "\n  constexpr int STAGES{4};", cell, count=1)
    assert "STAGES{4}" in cell
    assert _step8(PC_KERNEL, cell) is None


def test_no_stages_constant_is_named_in_words(no_gpu):
    """No constant named STAGES at all (the ring's depth written as 4 everywhere): the check says what to name, in
    words (not 'your STAGES: None')."""
    pc = PC_KERNEL.replace(" STAGES = 4,", "", 1).replace("STAGES", "4")
    msg = _kernel_check("PC", pc)
    assert msg is not None and "name the ring's depth STAGES" in msg and "None" not in msg, msg


# ------------------------------------------------------------------------------------------- the opening diff
def test_labs_json_holds_the_lab4_kernel():
    data = json.loads(hints.DATA.read_text())["kernels"]["lab4"]
    assert data["variable"] == "LAB4_KERNEL" and data["notebook"] == "lab4_pipeline.ipynb"
    assert hints.decode(data["solved"]) == labgen_code(LAB4_KERNEL).strip("\n") + "\n"
    assert "// ✎ " in data["source"] and "setmaxnreg_dec<24>" not in data["source"]
    assert "carried" not in data["source"] and data["source"].count("// ✎ ") == 8  # step 7's regions are ✎ too
    assert data["carries"]["variable"] == "PC_KERNEL" and data["carries"]["skeleton"].count("// ✎ ") == 5


def test_kernel_changes_diffs_the_course_lab3_kernel_when_the_student_has_none(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    diff = lab4.kernel_changes()
    assert "lab3_wgmma.ipynb is not beside this notebook" in capsys.readouterr().out
    text = repr(diff)
    assert text.startswith("Lab 3's kernel (the course's: yours is not beside this notebook, or not written "
                           "yet) -> Lab 4's kernel")
    assert "-lab3_gemm(" in text and "+lab4_ws_gemm(" in text and "+      // ✎ " in text
    assert "-    my_mbar_arrive(&empty[s]);" in text  # Lab 3's release, as solved
    assert lab4.lab3_speed_note() in html_of(diff)


def html_of(diff) -> str:
    import html

    return html.unescape(diff._repr_html_())


def test_kernel_changes_diffs_the_students_own_lab3_kernel(tmp_path, monkeypatch):
    mine = COURSE["LAB3_KERNEL"].replace("// C (M x N, fp32)", "// my very own kernel\n// C (M x N, fp32)")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"LAB3_KERNEL = r\"\"\"{mine}\"\"\"")]
    nbformat.write(nb, tmp_path / "lab3_wgmma.ipynb")
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()):
        text = repr(lab4.kernel_changes())
    assert text.startswith("your Lab 3 kernel -> Lab 4's kernel") and "-// my very own kernel" in text
    assert "### BEGIN SOLUTION" not in text and "HINT" not in text


def test_kernel_changes_with_a_lab3_stub_uses_the_course_kernel(tmp_path, monkeypatch):
    (tmp_path / "lab3_wgmma.ipynb").write_text((ROOT / "labs" / "lab3_wgmma.ipynb").read_text())
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        text = repr(lab4.kernel_changes())
    assert "not written yet there" in out.getvalue()
    assert text.startswith("Lab 3's kernel (the course's") and "-    hopper::wgmma_wait<0>();" in text


def test_lab3_speed_comes_from_the_ladder_or_says_not_measured(monkeypatch):
    from helpers.course import ladder

    rung = next(r for r in ladder.rungs() if r.key == "lab3")
    note = lab4.lab3_speed_note()
    if rung.tflops is None:
        assert "not measured yet" in note
    else:
        assert f"{rung.tflops:.0f} TFLOP/s" in note and f"{rung.ratio:.2f}× cuBLAS" in note
        assert ladder.load()["rungs"]["lab3"].get("title", rung.kernel) in note  # says what was measured
    monkeypatch.setattr(ladder, "load", lambda path=None: {"rungs": {}})
    assert lab4.lab3_speed_note() == "Lab 3's kernel on the H100 at 4096³: not measured yet"


def test_step_changes_leave_out_markers_and_hints():
    text = repr(lab4.step_changes(PC_KERNEL, LAB4_CELL, "step 7", "step 8"))
    assert text.startswith("step 7 -> step 8") and "+lab4_ws_gemm(" in text and "-lab4_pc_gemm(" in text
    assert "### " not in text and "HINT" not in text and "+    hopper::setmaxnreg_inc<240>();" in text
    # the cell's carried lines are the student's step 7 code: the diff is between the two whole kernels
    assert "carried" not in text and "my_mbar_init(&empty[s], CONSUMERS)" not in text


def test_ladder_reads_the_committed_measurements():
    from helpers.course import ladder

    rows = lab4.ladder_rows()
    assert [r["step"].split(" ·")[0] for r in rows[:3]] == ["Lab 3", "Lab 4", "Lab 4"]
    by_key = {r.key: r for r in ladder.rungs((4096, 4096, 4096))}
    assert [r["tflops"] for r in rows[:3]] == [by_key[k].tflops for k in ("lab3", "lab4a", "lab4b")]
    table = lab4.ladder_table()
    for r in rows[:3]:
        assert (f"{r['tflops']:.0f}" if r["tflops"] else "not measured yet") in table


# ------------------------------------------------------------------------------------------- tiered hints
def test_every_exercise_has_tiered_hints():
    table = {k: v for k, v in hints.exercises().items() if v.lab == "lab4"}
    assert sorted(table) == sorted(notebook_exercises("lab4_pipeline.ipynb"))
    for ex in table.values():
        assert ex.tiers >= 2, f"{ex.id}: no first hint"
        for region in ex.regions:
            assert len(region.hints) >= 2, (ex.id, region.hints[0])
            for tier in region.hints[:2]:  # the generator's rule, asserted on the data the students read
                assert not hints.leaked_lines(tier, region.answer), (ex.id, tier)
    assert len(table["lab4-pc"].regions) == 5 and len(table["lab4-ws"].regions) == 4  # step 7's other four carried


def _stub_texts(cell_source: str) -> list[str]:
    found = re.findall(r'raise NotImplementedError\((.*)\)\s*$', cell_source, re.M)
    texts = [eval(t) for t in found]  # noqa: S307 - the generator's own repr() of a string
    texts += [t.replace('\\"', '"') for t in re.findall(r'#error "not written yet: (.*)"\s*$', cell_source, re.M)]
    return texts


def test_the_stubs_show_tier_0_only():
    """Every region of the student notebook shows exactly its tier-0 hint and how to ask for more; no tier 1 or 2,
    no line of an answer, anywhere in the notebook."""
    lab = nbformat.read(ROOT / "labs" / "lab4_pipeline.ipynb", as_version=4)
    text = (ROOT / "labs" / "lab4_pipeline.ipynb").read_text()
    table = hints.exercises()
    for cell in lab.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if not gid.endswith("-answer"):
            continue
        ex = table[hints.exercise_id(gid)]
        assert _stub_texts(cell.source) == [f"{r.hints[0]} (stuck? lab4.hint('{ex.id}', 1))" for r in ex.regions]
        for region in ex.regions:
            for later in region.hints[1:]:
                assert later not in text and json.dumps(later)[1:-1] not in text, (ex.id, later)
            for line in region.answer.split("\n"):
                if len(line.strip()) >= 20 and not line.strip().startswith(("//", "#")):
                    assert json.dumps(line.strip())[1:-1] not in text, (ex.id, line)


def test_hint_and_answer_entry_points(capsys):
    lab4.hint("lab4-ring")
    lab4.hint("lab4-ring", 1)
    lab4.hint("lab4-pc", 1)
    lab4.answer("lab4-ring")
    lab4.answer("lab4-ring", sure=True)
    out = capsys.readouterr().out
    ring = hints.exercises()["lab4-ring"].regions[0]
    assert f"What to do · lab4-ring\n  {ring.hints[0]}\nMore: lab4.hint('lab4-ring', 1)" in out
    assert f"Hint 1 · lab4-ring\n  {ring.hints[1]}\nMore: lab4.hint('lab4-ring', 2)" in out
    assert "part 5 of 5" in out and "sure=True" in out
    assert "return k % S, (k // S) & 1" in out.split("The answer · lab4-ring")[1]
    assert "there is no exercise" in hints.hint_text("lab4-kernel", 1)


def test_show_timeline_draws_the_students_own_kernel(capsys):
    """The cell after the 128×128 check: the kernel recorded on the executor, drawn by the trace widget."""
    box = lab4.show_timeline(WRAPPERS + PC_KERNEL)
    out = capsys.readouterr().out
    assert "lab4_pc_gemm at M=256, N=256, K=512 on the emulator" in out and "C right" in out and box is not None
    with pytest.raises(ValueError, match="STAGES"):
        lab4.show_timeline(WRAPPERS + PC_KERNEL.replace("STAGES = 4,", "STAGES = N,"))
