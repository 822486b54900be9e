"""The PTX reader: declarations, register ranges, scoped inline-asm names, labels, guards, operands of every
shape, initialisers, parameter attributes and the line mapping to the CUDA source."""

from __future__ import annotations

import pytest

from helpers.gpu.executor.errors import ParseError
from helpers.gpu.executor.parser import Addr, FImm, Imm, Neg, Pair, Paren, Reg, Sink, Sym, Vec, parse
from helpers.gpu.executor.program import load_program

PTX = r"""
//
// a hand-written module in NVRTC's style
//
.version 9.5
.target sm_90a
.address_size 64

.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
.global .align 8 .u64 hopper_diag_addr;
.global .align 4 .u32 BM = 64;
.global .align 1 .b8 $str[5] = {102, 117, 108, 108};
.global .align 8 .u64 ptr = generic($str);
.shared .align 8 .b8 _ZZ5stuckE4full[32];
.extern .shared .align 16 .b8 dyn[];

.visible .entry k(
	.param .align 64 .b8 k_param_0[128],
	.param .u64 .ptr .global .align 4 k_param_1,
	.param .u32 k_param_2
)
.maxntid 128, 1, 1
{
	.local .align 16 .b8 	__local_depot0[16];
	.reg .pred 	%p<3>;
	.reg .b32 	%r<10>;
	.reg .b64 	%rd<4>;
	.reg .f32 	%f<2>;
	.loc	1 7 0
	/* a block
 comment */
	ld.param.u32 	%r1, [k_param_2];
	.loc	1 9 3
	mov.u32 	%r2, %tid.x;  // a trailing comment
	setp.ne.s32 	%p1, %r2, 0;
	@%p1 bra 	$L__BB0_2;
	.loc	2 104 3, function_name $L__info_string0, inlined_at 1 12 5
	// begin inline asm
	{
.reg .pred p;
mbarrier.try_wait.parity.shared::cta.b64 p, [%r1+-8], %r2;
selp.u32 %r3, 1, 0, p;
}
	// end inline asm
	{  cvt.rn.f32.s32 %f1, %r3;}
$L__BB0_2:
	mov.b64 	{%r4, %r5}, %rd1;
	shfl.sync.idx.b32 	%r6|%p2, %r4, 3, 31, -1;
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r7], [%rd2, {%r8, %r9}], [%r7];
	@!%p2 mov.f32 	%f1, 0fBF800000;
	{ // callseq 0, 0
	.reg .b32 temp_param_reg;
	.param .b64 param0;
	st.param.b64 	[param0+0], %rd3;
	.param .b64 param1;
	st.param.b64 	[param1+0], %rd3;
	.param .b32 retval0;
	call.uni (retval0),
	vprintf,
	(
	param0,
	param1
	);
	} // callseq 0
	st.shared.u64 	[_ZZ5stuckE4full+16], %rd1;
	ret;

}
	.file	1 "/tmp/cell.cu"
	.file	2 "/tmp/hopper.cuh"
	.section	.debug_str
	{
$L__info_string0:
.b8 95,90,0
	}
"""


def test_module_declarations() -> None:
    m = parse(PTX)
    assert m.version == "9.5" and m.target == "sm_90a" and m.address_size == 64
    assert m.files == {1: "/tmp/cell.cu", 2: "/tmp/hopper.cuh"}
    assert m.entries == ["k"] and not m.functions["vprintf"].defined
    bm = m.variable("BM")
    assert bm.space == "global" and bm.size == 4 and bm.init == b"\x40\0\0\0"
    assert m.variable("$str").init == b"full\0" and m.variable("ptr").relocs == [(0, "$str", 0, True)]
    full = m.variable("_ZZ5stuckE4full")
    assert (full.space, full.size, full.align) == ("shared", 32, 8)
    assert m.variable("dyn").extern and m.variable("dyn").size == 0
    k = m.functions["k"]
    assert [(p.name, p.size, p.align, p.ptr_space) for p in k.params] == [
        ("k_param_0", 128, 64, None), ("k_param_1", 8, 4, "global"), ("k_param_2", 4, 4, None)]
    assert k.directives == {"maxntid": (128, 1, 1)}
    assert [v.name for v in k.locals] == ["__local_depot0"]
    assert "%r9" in k.regs and "%r10" not in k.regs and k.regs["%p2"] == "pred"


def test_instructions_operands_and_scopes() -> None:
    body = parse(PTX).functions["k"].body
    ops = {i.opcode: i for i in body}
    assert ops["ld.param.u32"].operands == (Reg("%r1"), Addr(Sym("k_param_2"), 0))
    assert ops["bra"].guard == ("%p1", False) and ops["bra"].operands == (Sym("$L__BB0_2"),)
    wait = ops["mbarrier.try_wait.parity.shared::cta.b64"]
    scoped = wait.operands[0]
    assert isinstance(scoped, Reg) and scoped.name.startswith("p@") and wait.operands[1] == Addr(Reg("%r1"), -8)
    assert ops["selp.u32"].operands[3] == scoped  # the same scope's p
    assert ops["mov.b64"].operands == (Vec((Reg("%r4"), Reg("%r5"))), Reg("%rd1"))
    assert ops["shfl.sync.idx.b32"].operands == (Pair(Reg("%r6"), Reg("%p2")), Reg("%r4"), Imm(3), Imm(31), Imm(-1))
    tma = ops["cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"]
    assert tma.operands[1] == Addr(Reg("%rd2"), 0, Vec((Reg("%r8"), Reg("%r9"))))
    mov = ops["mov.f32"]
    assert mov.guard == ("%p2", True) and mov.operands[1] == FImm(0xBF800000, 32)
    call = ops["call.uni"]
    assert isinstance(call.operands[0], Paren) and call.operands[1] == Sym("vprintf")
    assert [o.name for o in call.operands[2].items][0].startswith("param0@")
    assert ops["st.shared.u64"].operands[0] == Addr(Sym("_ZZ5stuckE4full"), 16)


def test_lines_follow_inlined_at_into_the_cell() -> None:
    body = parse(PTX).functions["k"].body
    by = {i.opcode: i for i in body}
    assert by["ld.param.u32"].cell_line == 7 and by["mov.u32"].cell_line == 9
    wait = by["mbarrier.try_wait.parity.shared::cta.b64"]
    assert (wait.src_file, wait.src_line, wait.cell_line) == (2, 104, 12)
    assert wait.text.startswith("mbarrier.try_wait")
    assert by["mov.u32"].text == "mov.u32 \t%r2, %tid.x;  // a trailing comment"


def test_labels_and_layout() -> None:
    prog = load_program(PTX, "k")
    f = prog.module.functions["k"]
    assert f.labels["$L__BB0_2"] == [i.opcode for i in f.body].index("mov.b64")
    assert prog.symbol("k", "_ZZ5stuckE4full").offset == 1024  # static shared memory starts after the reserved 1 KB
    assert prog.dyn_offset() == 1024 + 32 and prog.kparams[1][1] == 128 and prog.kparam_bytes == 140
    assert prog.symbol("k", "__local_depot0").kind == "local"


def test_unreadable_ptx_names_the_line() -> None:
    with pytest.raises(ParseError, match="PTX line 3"):
        parse(".version 9.5\n.target sm_90a\n.visible .entry k( { }")
    with pytest.raises(ParseError, match="no kernel 'nope'"):
        load_program(PTX, "nope")


def test_other_operand_kinds() -> None:
    src = ".version 9.5\n.target sm_90a\n.address_size 64\n.visible .entry e()\n{\n.reg .b32 %r<3>;\n" \
          "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], %r2;\nsetp.gt.and.s32 %p1, %r1, 0x10, !%p2;\n" \
          "ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1+16];\nelect.sync _|%p1, -1;\nret;\n}\n"
    body = parse(src).functions["e"].body
    assert body[0].operands[0] == Sink()
    assert body[1].operands[2] == Imm(16) and body[1].operands[3] == Neg(Reg("%p2"))
    assert body[2].operands[1] == Addr(Reg("%rd1"), 16)
    assert body[3].operands[0] == Pair(Sink(), Reg("%p1"))  # the elected lane's id discarded
