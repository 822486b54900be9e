"""Probe kernels for the executor's numerics: one kernel applies every ALU instruction the course cares about to
arrays of operands (raw 32-bit patterns), so the same run can be compared with brute-force references on the CPU
(tests/ptx) and with an H100 (tools/h100/executor_vs_h100.py)."""

from __future__ import annotations

import numpy as np

__all__ = ["ALU_OPS", "ALU_PROBE", "alu_inputs"]

# (name, asm template with %0 = result, %1..%3 = a, b, c, constraint letters (out, in))
ALU_OPS: list[tuple[str, str, str]] = [
    ("add.rn.f32", "add.rn.f32 %0, %1, %2;", "f"),
    ("sub.rn.f32", "sub.rn.f32 %0, %1, %2;", "f"),
    ("mul.rn.f32", "mul.rn.f32 %0, %1, %2;", "f"),
    ("add.rz.f32", "add.rz.f32 %0, %1, %2;", "f"),
    ("mul.rm.f32", "mul.rm.f32 %0, %1, %2;", "f"),
    ("mul.rp.f32", "mul.rp.f32 %0, %1, %2;", "f"),
    ("fma.rn.f32", "fma.rn.f32 %0, %1, %2, %3;", "f"),
    ("fma.rz.f32", "fma.rz.f32 %0, %1, %2, %3;", "f"),
    ("fma.rm.f32", "fma.rm.f32 %0, %1, %2, %3;", "f"),
    ("fma.rp.f32", "fma.rp.f32 %0, %1, %2, %3;", "f"),
    ("div.rn.f32", "div.rn.f32 %0, %1, %2;", "f"),
    ("div.rz.f32", "div.rz.f32 %0, %1, %2;", "f"),
    ("sqrt.rn.f32", "sqrt.rn.f32 %0, %1;", "f"),
    ("rcp.rn.f32", "rcp.rn.f32 %0, %1;", "f"),
    ("min.f32", "min.f32 %0, %1, %2;", "f"),
    ("max.f32", "max.f32 %0, %1, %2;", "f"),
    ("min.NaN.f32", "min.NaN.f32 %0, %1, %2;", "f"),
    ("abs.f32", "abs.f32 %0, %1;", "f"),
    ("neg.f32", "neg.f32 %0, %1;", "f"),
    ("add.ftz.f32", "add.ftz.f32 %0, %1, %2;", "f"),
    ("add.sat.f32", "add.sat.f32 %0, %1, %2;", "f"),
    ("fma.rn.sat.f32", "fma.rn.sat.f32 %0, %1, %2, %3;", "f"),
    ("copysign.f32", "copysign.f32 %0, %1, %2;", "f"),
    ("cvt.rzi.s32.f32", "cvt.rzi.s32.f32 %0, %1;", "rf"),
    ("cvt.rni.s32.f32", "cvt.rni.s32.f32 %0, %1;", "rf"),
    ("cvt.rmi.u32.f32", "cvt.rmi.u32.f32 %0, %1;", "rf"),
    ("cvt.rpi.s32.f32", "cvt.rpi.s32.f32 %0, %1;", "rf"),
    ("cvt.rni.f32.f32", "cvt.rni.f32.f32 %0, %1;", "f"),
    ("cvt.rn.f32.s32", "cvt.rn.f32.s32 %0, %1;", "fr"),
    ("cvt.rz.f32.u32", "cvt.rz.f32.u32 %0, %1;", "fr"),
    ("cvt.rn.bf16x2.f32", "cvt.rn.bf16x2.f32 %0, %1, %2;", "rf"),
    ("cvt.rn.f16x2.f32", "cvt.rn.f16x2.f32 %0, %1, %2;", "rf"),
    ("cvt.f32.bf16", "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.bf16 %0, lo; }", "fr"),
    ("cvt.f32.f16", "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, lo; }", "fr"),
    ("add.s32", "add.s32 %0, %1, %2;", "r"),
    ("sub.s32", "sub.s32 %0, %1, %2;", "r"),
    ("mul.lo.s32", "mul.lo.s32 %0, %1, %2;", "r"),
    ("mul.hi.s32", "mul.hi.s32 %0, %1, %2;", "r"),
    ("mul.hi.u32", "mul.hi.u32 %0, %1, %2;", "r"),
    ("mad.lo.s32", "mad.lo.s32 %0, %1, %2, %3;", "r"),
    ("div.s32", "div.s32 %0, %1, %2;", "r"),
    ("div.u32", "div.u32 %0, %1, %2;", "r"),
    ("rem.s32", "rem.s32 %0, %1, %2;", "r"),
    ("rem.u32", "rem.u32 %0, %1, %2;", "r"),
    ("min.s32", "min.s32 %0, %1, %2;", "r"),
    ("max.u32", "max.u32 %0, %1, %2;", "r"),
    ("shl.b32", "shl.b32 %0, %1, %2;", "r"),
    ("shr.u32", "shr.u32 %0, %1, %2;", "r"),
    ("shr.s32", "shr.s32 %0, %1, %2;", "r"),
    ("bfe.u32", "bfe.u32 %0, %1, %2, %3;", "r"),
    ("bfe.s32", "bfe.s32 %0, %1, %2, %3;", "r"),
    ("bfi.b32", "bfi.b32 %0, %1, %2, %3, 5;", "r"),
    ("prmt.b32", "prmt.b32 %0, %1, %2, %3;", "r"),
    ("popc.b32", "popc.b32 %0, %1;", "r"),
    ("clz.b32", "clz.b32 %0, %1;", "r"),
    ("brev.b32", "brev.b32 %0, %1;", "r"),
    ("bfind.u32", "bfind.u32 %0, %1;", "r"),
    ("bfind.s32", "bfind.s32 %0, %1;", "r"),
    ("bfind.shiftamt.u32", "bfind.shiftamt.u32 %0, %1;", "r"),
    ("lop3.b32", "lop3.b32 %0, %1, %2, %3, 0x96;", "r"),
    ("shf.l.wrap.b32", "shf.l.wrap.b32 %0, %1, %2, %3;", "r"),
    ("shf.r.clamp.b32", "shf.r.clamp.b32 %0, %1, %2, %3;", "r"),
    ("sad.u32", "sad.u32 %0, %1, %2, %3;", "r"),
    ("abs.s32", "abs.s32 %0, %1;", "r"),
    ("neg.s32", "neg.s32 %0, %1;", "r"),
    ("cnot.b32", "cnot.b32 %0, %1;", "r"),
    ("mul.wide.s32.lo", "{ .reg .b64 w; .reg .b32 h; mul.wide.s32 w, %1, %2; mov.b64 {%0, h}, w; }", "r"),
    ("mul.wide.s32.hi", "{ .reg .b64 w; .reg .b32 l; mul.wide.s32 w, %1, %2; mov.b64 {l, %0}, w; }", "r"),
    ("setp.lt.f32", "{ .reg .pred p; setp.lt.f32 p, %1, %2; selp.u32 %0, 1, 0, p; }", "rf"),
    ("setp.equ.f32", "{ .reg .pred p; setp.equ.f32 p, %1, %2; selp.u32 %0, 1, 0, p; }", "rf"),
    ("setp.neu.f32", "{ .reg .pred p; setp.neu.f32 p, %1, %2; selp.u32 %0, 1, 0, p; }", "rf"),
    ("setp.nan.f32", "{ .reg .pred p; setp.nan.f32 p, %1, %2; selp.u32 %0, 1, 0, p; }", "rf"),
    ("setp.lo.u32", "{ .reg .pred p; setp.lo.u32 p, %1, %2; selp.u32 %0, 1, 0, p; }", "r"),
    ("setp.gt.s32.and", "{ .reg .pred p, q; setp.ne.u32 q, %3, 0; setp.gt.and.s32 p, %1, %2, q; "
                        "selp.u32 %0, 1, 0, p; }", "r"),
]


def _operands(kinds: str, n_in: int) -> tuple[str, str]:
    out_k, in_k = (kinds[0], kinds[1]) if len(kinds) == 2 else (kinds, kinds)
    ins = ", ".join(f'"{in_k}"({v})' for v in ("fa", "fb", "fc")[:n_in]) if in_k == "f" else \
        ", ".join(f'"r"({v})' for v in ("a", "b", "c")[:n_in])
    return f'"={out_k}"(' + ("fr" if out_k == "f" else "r") + ")", ins


def _body() -> str:
    lines = []
    for k, (_name, asm, kinds) in enumerate(ALU_OPS):
        n_in = max(int(x) for x in __import__("re").findall(r"%(\d)", asm))
        out, ins = _operands(kinds, n_in)
        store = "__float_as_uint(fr)" if out.startswith('"=f"') else "r"
        lines.append(f'  {{ float fr; unsigned r; asm volatile("{asm}" : {out} : {ins}); '
                     f'out[{k} * n + i] = {store}; (void)fr; (void)r; }}')
    return "\n".join(lines)


#: out[k * n + i] = ALU_OPS[k] applied to (a[i], b[i], c[i]) (raw 32-bit patterns, floats by bits).
ALU_PROBE = r"""
extern "C" __global__ void alu_probe(const unsigned* A, const unsigned* B, const unsigned* C, unsigned* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned a = A[i], b = B[i], c = C[i];
  const float fa = __uint_as_float(a), fb = __uint_as_float(b), fc = __uint_as_float(c);
""" + _body() + "\n}\n"


def alu_inputs(n: int = 1024, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Operand bit patterns: special floats (zeros, infinities, NaNs, subnormals, extremes), fma ties, random
    normals, integer edge cases (0, ±1, INT_MIN, shift counts past 32), mixed at random."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    special = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40,
                        1.1754944e-38, 3.4028235e38, -3.4028235e38, 1e30, 1e-30, 65504.0, 65520.0, 3.0e9, -3.0e9,
                        4.3e9, 2.0 ** 31, -(2.0 ** 31), 16777217.0, 0.49999997, 2.0 ** -126, 3.389531e38],
                       np.float32).view(np.uint32)
    special = np.concatenate([special, np.array([0x7FC00001, 0xFFFFFFFF, 0x7F800001], np.uint32)])
    ints = np.array([0, 1, 2, 3, 5, 7, 31, 32, 33, 64, 255, 256, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE,
                     0x12345678, 0xDEADBEEF, 0x00FF00FF, 0x3210, 0x7654, 0x8421], np.uint32)
    pool = np.concatenate([special, ints, (rng.standard_normal(64) * 10).astype(f32).view(np.uint32)])
    a = pool[rng.integers(0, len(pool), n)]
    b = pool[rng.integers(0, len(pool), n)]
    c = pool[rng.integers(0, len(pool), n)]
    # fma near-ties: c cancels most of a*b, leaving a result close to a rounding boundary
    k = n // 4
    x = (1 + rng.integers(0, 1 << 12, k) / 2.0 ** 12).astype(f32)
    y = (1 + rng.integers(0, 1 << 12, k) / 2.0 ** 12).astype(f32)
    z = (rng.choice([-1, 1], k) * 2.0 ** rng.integers(-60, -20, k)).astype(f32)
    a[:k], b[:k], c[:k] = x.view(np.uint32), y.view(np.uint32), z.view(np.uint32)
    # small integers for shift counts and bit-field positions
    c[k:2 * k] = rng.integers(0, 40, k).astype(np.uint32)
    b[2 * k:3 * k] = rng.integers(0, 40, k).astype(np.uint32)
    return a, b, c


#: Where a kernel's shared variables, its dynamic shared memory and its cluster rank land (run with a cluster of
#: two and 256 bytes of dynamic shared memory): out[8 * block + k].
SMEM_LAYOUT_PROBE = r"""
#include "hopper.cuh"
extern "C" __global__ void smem_layout(unsigned* out) {
  __shared__ unsigned char a[12];
  __shared__ alignas(1024) unsigned char b[1200];
  __shared__ alignas(8) unsigned long long c;
  __shared__ alignas(128) float d[3];
  extern __shared__ __align__(16) unsigned char dyn[];
  if (threadIdx.x == 0) {
    a[threadIdx.y] = 1;
    b[threadIdx.y] = 2;
    c = 3;
    d[threadIdx.y] = 4.0f;
    dyn[threadIdx.y] = 5;
    unsigned* o = out + 8 * blockIdx.x;
    o[0] = hopper::smem_u32(a);
    o[1] = hopper::smem_u32(b);
    o[2] = hopper::smem_u32(&c);
    o[3] = hopper::smem_u32(d);
    o[4] = hopper::smem_u32(dyn);
    unsigned x;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(x));
    o[5] = x;
    o[6] = hopper::cluster_ctarank();
    o[7] = hopper::map_shared_rank(&c, 0);
  }
}
"""
