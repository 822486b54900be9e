"""Lab 4 graders, both ways: the solution passes on every seed; the stub and named plausible wrong answers fail on
every one of 200 seeds, with a hint that names the mistake. The solution is read from solutions/lab4_pipeline.ipynb.

The CUDA graders are tested without a GPU through what they check everywhere (compile report and PTX); the kernel
runs on an H100 are in tests/labs/gpu_lab4.py (tools/gpu_jobs/lab4/run.sh).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

from helpers import grading, labgen
from helpers import pipeline as pl
from helpers.checks import lab4

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
    assert lab4.reference_stages(128, 128, 64) == 7 and lab4.dynamic_smem_bytes(4) == 197696


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
    from helpers.widgets import registers

    assert [lab4.entry_registers(t) for t in (384, 512, 640)] == [168, 128, 96]
    assert registers.entry_registers(384, 2) == 80 and registers.entry_registers(384, None) is None


# ------------------------------------------------------------------------------------------- 7, 8 · CUDA
def _gpu_script():
    """tests/labs/gpu_lab4.py (the H100 script): the wrong kernels, shared with the GPU run."""
    spec = importlib.util.spec_from_file_location("gpu_lab4", Path(__file__).with_name("gpu_lab4.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KERNELS = _gpu_script().wrong_kernels(SOL["PC_SRC"], SOL["WS_SRC"])


def test_kernel_solutions_pass_without_a_gpu(capsys):
    lab4.check_pc_kernel(SOL["PC_SRC"])
    lab4.check_ws_kernel(SOL["WS_SRC"])
    out = capsys.readouterr().out
    assert out.count("run skipped") == 2 and "setmaxnreg" in out


@pytest.mark.parametrize("which", ["PC_SRC", "WS_SRC"])
def test_kernel_stubs_fail(which):
    grader = lab4.check_pc_kernel if which == "PC_SRC" else lab4.check_ws_kernel
    grading.assert_rejects(grader, STUB[which], "not written yet", "hint")


@pytest.mark.parametrize("name", KERNELS)
def test_wrong_kernels_are_rejected_without_a_gpu(name):
    step, src, pattern = KERNELS[name]
    grader = lab4.check_pc_kernel if step == "PC" else lab4.check_ws_kernel
    msg = _quiet(grader, src)
    assert msg is not None, f"{name}: accepted"
    assert re.search(pattern, msg, re.I | re.S), msg


def test_the_outline_diff_matches_the_kernels():
    """The hand-written outline at the top of the lab: '-' lines are Lab 3's kernel, '+' lines (but the ✎ ones)
    are step 8's."""
    nb = (ROOT / "solutions" / "lab4_pipeline.ipynb").read_text()
    import json

    cells = json.loads(nb)["cells"]
    text = next("".join(c["source"]) for c in cells if "```diff" in "".join(c["source"]))
    block = text.split("```diff\n", 1)[1].split("```", 1)[0]
    minus = [ln[1:] for ln in block.splitlines() if ln.startswith("-")]
    plus = [ln[1:] for ln in block.splitlines() if ln.startswith("+") and "✎" not in ln]
    assert minus and plus
    for ln in minus:
        assert ln in lab4.LAB3_KERNEL, ln
    for ln in plus:
        assert ln in SOL["WS_SRC"], ln


def test_ladder_reads_the_committed_measurements():
    from helpers import ladder

    rows = lab4.ladder_rows()
    assert [r["step"].split(" ·")[0] for r in rows[:3]] == ["Lab 3", "Lab 4", "Lab 4"]
    by_key = {r.key: r for r in ladder.rungs((4096, 4096, 4096))}
    assert [r["tflops"] for r in rows[:3]] == [by_key[k].tflops for k in ("lab3", "lab4a", "lab4b")]
    table = lab4.ladder_table()
    for r in rows[:3]:
        assert (f"{r['tflops']:.0f}" if r["tflops"] else "not measured yet") in table


def test_runtime_wrong_kernels_compile_and_pass_the_static_checks():
    """The wrong kernels only a run can catch (gpu_lab4.py runs them on the H100) really do get past everything
    checked without a GPU, so the GPU run is what rejects them."""
    for name, (step, src, _) in _gpu_script().runtime_wrong_kernels(SOL["PC_SRC"], SOL["WS_SRC"]).items():
        grader = lab4.check_pc_kernel if step == "PC" else lab4.check_ws_kernel
        assert _quiet(grader, src) is None, name


def test_gpu_script_reads_the_same_solution():
    ns = _gpu_script().solution_namespace()
    assert ns["PC_SRC"] == SOL["PC_SRC"] and ns["WS_SRC"] == SOL["WS_SRC"]
