"""The PTX reader behind the static CUDA checks: parsing, control flow, data flow, instruction forms, the protocol
rules; on hand-written PTX (every branch exact) and on NVRTC's PTX of the labs' kernels."""

from __future__ import annotations

from helpers.course.checks._protocol import Protocol
from helpers.course.checks._ptxflow import Flow, Slot, form_problem, split_operands

PTX = r"""
.version 8.5
.target sm_90a
.file	1 "/x/helpers/include/hopper.cuh"
.file	2 "/x/cell.cu"
.visible .entry k(
	.param .u64 k_param_0
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<20>;
	.shared .align 1024 .b8 tile[8192];
	.shared .align 8 .u64 full;
	.shared .align 8 .b8 empty[16];
	mov.u32 	%r1, tile;
	mov.u32 	%r2, full;
	mov.u32 	%r9, 0;
	.loc	2 10 3
	// begin inline asm
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r3, %r4}], [%r2];
	// end inline asm
$L__BB0_1:
	.loc	1 5 3, function_name $L__info_string0, inlined_at 2 12 5
	// begin inline asm
	{
	.reg .pred p;
	mbarrier.try_wait.parity.shared::cta.b64 p, [%r2], %r9;
	selp.u32 %r5, 1, 0, p;
	}
	// end inline asm
	setp.eq.s32 	%p1, %r5, 0;
	@%p1 bra 	$L__BB0_1;
	.loc	2 14 3
	ld.shared.u16 	%rs1, [%r1+16];
	shl.b32 	%r6, %r9, 3;
	mov.u32 	%r7, empty;
	add.s32 	%r8, %r7, %r6;
	// begin inline asm
	mbarrier.arrive.shared::cta.b64 %rd2, [%r8];
	// end inline asm
	ret;
}
"""


def test_parse_instructions_labels_and_lines():
    f = Flow(PTX, "k")
    ops = [i.opcode for i in f.ins]
    assert ops[:3] == ["mov.u32", "mov.u32", "mov.u32"]
    assert "mbarrier.try_wait.parity.shared::cta.b64" in ops and "selp.u32" in ops and ops[-1] == "ret"
    wait = next(i for i in f.ins if i.opcode.startswith("mbarrier.try_wait"))
    assert wait.asm and wait.line == 12  # inlined from the header (file 1) at line 12 of the cell (file 2)
    assert f.ins[f.labels["$L__BB0_1"]] is wait
    assert f.shared == {"tile", "full", "empty"} and "k_param_0" in f.params
    branch = next(i for i in f.ins if i.opcode == "bra")
    assert branch.guard == "%p1" and set(f.successors(branch.index)) == {wait.index, branch.index + 1}


def test_symbols_values_and_evaluation():
    f = Flow(PTX, "k")
    arrive = next(i for i in f.ins if i.opcode.startswith("mbarrier.arrive"))
    assert f.symbols(arrive.ops()[1]) == {"empty"}
    assert f.symbols("[%r1+16]") == {"tile"}
    assert f.value("%r9") == 0
    assert f.evaluate("[%r8]", {}) == 0 and f.evaluate("[%r1+16]", {}) == 16
    assert "%r9" in f.registers("[%r8]")


def test_reach_avoid_and_forward():
    f = Flow(PTX, "k")
    read = next(i for i in f.ins if i.opcode.startswith("ld.shared"))
    is_wait = lambda i: i.opcode.startswith("mbarrier.try_wait")  # noqa: E731
    assert f.reach([None], lambda i: i is read, is_wait) is None  # every path to the read passes the wait
    assert f.reach([None], lambda i: i is read) is read
    wait = next(i for i in f.ins if is_wait(i))
    assert f.reach([wait.index], lambda i: i is wait) is wait  # the wait loop
    assert f.reach([wait.index], lambda i: i is wait, forward=True) is None  # not without its back edge


def test_protocol_roles_from_the_code():
    p = Protocol(Flow(PTX, "k"), "")
    assert p.tiles == {"tile"} and p.full == {"full"} and p.empty == {"empty"}
    assert p.read_before_wait() is None
    assert [k for k, _ in p.consumer_violations()] == []


def test_form_problem_names_the_qualifier():
    slots = [Slot("dimension", ("2d",)), Slot("destination state space", ("shared::cluster", "shared::cta")),
             Slot("source state space", ("global",)), Slot("load mode", ("tile", None)),
             Slot("completion mechanism", ("mbarrier::complete_tx::bytes",))]
    ok = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    assert form_problem(ok, "cp.async.bulk.tensor", slots) is None
    assert form_problem(ok.replace(".tile", ""), "cp.async.bulk.tensor", slots) is None
    assert "destination state space" in form_problem(ok.replace("shared::cluster.global", "global.shared::cluster"),
                                                      "cp.async.bulk.tensor", slots)
    assert "lacks the completion mechanism" in form_problem(ok.replace(".mbarrier::complete_tx::bytes", ""),
                                                             "cp.async.bulk.tensor", slots)
    assert "unexpected qualifier .multicast::cluster" in form_problem(ok + ".multicast::cluster",
                                                                       "cp.async.bulk.tensor", slots)
    assert "not a cp.async.bulk.tensor" in form_problem("mbarrier.init.b64", "cp.async.bulk.tensor", slots)


def test_split_operands():
    assert split_operands("[%r1], [%rd1, {%r2, %r3}], [%r4]") == ["[%r1]", "[%rd1, {%r2, %r3}]", "[%r4]"]
    assert split_operands("{%f1, %f2}, %rd1, p, 1") == ["{%f1, %f2}", "%rd1", "p", "1"]
