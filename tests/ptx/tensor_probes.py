# ruff: noqa: E501  (CUDA templates are kept one statement a line)
"""Probe kernels for Hopper's tensor-core types and the instructions around them, and the inputs they run on.

The same CUDA sources run on an H200/H100 (tools/h100/tensor_types.py saves inputs and outputs) and on the executor
(tests/ptx/test_tensor_types.py compares the two bit for bit). Every probe reads raw 32-bit words and writes raw
32-bit words, so a case is (kernel, launch shape, input arrays, output array) and nothing else.

- ``wgmma_*``: one warpgroup copies A (64 rows x 128 bytes) and B (N rows x 128 bytes) from global memory into
  shared memory in the 128-byte swizzle a TMA load makes, then runs ``ksteps`` chained ``wgmma.mma_async`` (each
  K step advances the descriptors by 32 bytes, or by 16 rows of the tile when the operand is transposed); with A
  from registers, thread t's fragment for step s is words ``4*(128 s + t) ..`` of the A buffer;
- ``mma_*``: one warp, thread t's A, B, C registers are words ``t*S ..`` of the input; D registers are written out;
- ``ldm_*``/``stm_*``/``movm``: a 4 KiB shared image and per-lane row offsets;
- ``cpasync_probe``: Ampere's cp.async in three commit groups, read back after each wait;
- ``sfu_*``: special-function approximations on arrays of raw inputs, and ``sweep_*`` hashes over all 2**32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# --------------------------------------------------------------------------------------------- wgmma


@dataclass(frozen=True)
class WG:
    """One wgmma probe kernel: the instruction's types, N, where A comes from, and the immediates."""

    atype: str
    btype: str
    dtype: str
    n: int
    a_regs: bool = False
    neg_a: bool = False
    neg_b: bool = False
    trans_a: bool = False
    trans_b: bool = False

    @property
    def k(self) -> int:
        return {"f16": 16, "bf16": 16, "tf32": 8}.get(self.atype, 32)

    @property
    def dregs(self) -> int:
        return self.n // 4 if self.dtype == "f16" else self.n // 2

    @property
    def name(self) -> str:
        s = f"wgmma_{self.dtype}_{self.atype}_{self.btype}_n{self.n}_{'r' if self.a_regs else 's'}"
        for flag, tag in ((self.neg_a, "na"), (self.neg_b, "nb"), (self.trans_a, "ta"), (self.trans_b, "tb")):
            if flag:
                s += "_" + tag
        return s

    def instruction(self) -> str:
        """The PTX line with %-operands numbered for the kernel's asm statement."""
        r = self.dregs
        outs = ", ".join(f"%{j}" for j in range(r))
        ints = self.atype in ("s8", "u8")
        if self.a_regs:
            a = "{" + ", ".join(f"%{r + 2 + j}" for j in range(4)) + "}"
        else:
            a = f"%{r}"
        imm = ""
        if not ints:
            imm = f", {-1 if self.neg_a else 1}, {-1 if self.neg_b else 1}"
            if self.atype in ("f16", "bf16"):
                imm += (f", {int(self.trans_b)}" if self.a_regs else f", {int(self.trans_a)}, {int(self.trans_b)}")
        return (f"wgmma.mma_async.sync.aligned.m64n{self.n}k{self.k}.{self.dtype}.{self.atype}.{self.btype} "
                f"{{{outs}}}, {a}, %{r + 1}, p{imm};")


def wgmma_kernel(w: WG) -> str:
    r = w.dregs
    cons = ", ".join(f'"+r"(d[{j}])' for j in range(r))
    a_step = 2048 if w.trans_a else 32
    b_step = 2048 if w.trans_b else 32
    lbo_a = 1024 if w.trans_a else 16
    lbo_b = 1024 if w.trans_b else 16
    ins = w.instruction()
    sd = r + 6 if w.a_regs else r + 2
    ins_args = '"l"(da), "l"(db), ' + ('"r"(a4.x), "r"(a4.y), "r"(a4.z), "r"(a4.w), ' if w.a_regs else "") + '"r"(sd)'
    return f"""
extern "C" __global__ void __launch_bounds__(128) {w.name}(const uint4* __restrict__ ag, const uint4* __restrict__ bg,
    const unsigned* __restrict__ cg, unsigned* __restrict__ dg, int scale_d, int ksteps) {{
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned raw = (unsigned)__cvta_generic_to_shared(smem_raw);
  unsigned base = (raw + 1023u) & ~1023u;
  unsigned char* sm = smem_raw + (base - raw);
  const int tid = threadIdx.x;
  for (int i = tid; i < 64 * 8; i += 128) {{
    int row = i >> 3, c = i & 7;
    *reinterpret_cast<uint4*>(sm + row * 128 + ((c ^ (row & 7)) << 4)) = ag[i];
  }}
  for (int i = tid; i < {w.n if not w.trans_b else 64} * 8; i += 128) {{
    int row = i >> 3, c = i & 7;
    *reinterpret_cast<uint4*>(sm + 8192 + row * 128 + ((c ^ (row & 7)) << 4)) = bg[i];
  }}
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  unsigned d[{r}];
  #pragma unroll
  for (int j = 0; j < {r}; ++j) d[j] = cg[tid * {r} + j];
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  #pragma unroll 1
  for (int ks = 0; ks < ksteps; ++ks) {{
    unsigned sa = base + ks * {a_step}, sb = base + 8192 + ks * {b_step};
    unsigned long long da = ((sa >> 4) & 0x3FFF) | ((unsigned long long)({lbo_a} >> 4) << 16)
                            | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
    unsigned long long db = ((sb >> 4) & 0x3FFF) | ((unsigned long long)({lbo_b} >> 4) << 16)
                            | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
    uint4 a4 = ag[(ks * 128 + tid) & 511];
    int sd = ks == 0 ? scale_d : 1;
    asm volatile("{{ .reg .pred p; setp.ne.b32 p, %{sd}, 0;\\n"
                 "{ins} }}"
                 : {cons} : {ins_args} : "memory");
  }}
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  #pragma unroll
  for (int j = 0; j < {r}; ++j) dg[tid * {r} + j] = d[j];
}}
"""


def _wg_list() -> list[WG]:
    out: list[WG] = []
    all_n = list(range(8, 257, 8))
    few = [8, 16, 24, 64, 128, 256]
    for n in all_n:
        out.append(WG("f16", "f16", "f32", n))
    for n in few:
        out.append(WG("f16", "f16", "f16", n))
        out.append(WG("bf16", "bf16", "f32", n, a_regs=True)) if n in (8, 64, 256) else None
        out.append(WG("tf32", "tf32", "f32", n))
        for at in ("e4m3", "e5m2"):
            for bt in ("e4m3", "e5m2"):
                if at == bt or n in (64,):
                    out.append(WG(at, bt, "f32", n))
                    out.append(WG(at, bt, "f16", n))
    for n in (8, 64, 256):
        out.append(WG("bf16", "bf16", "f32", n))
        out.append(WG("f16", "f16", "f32", n, a_regs=True))
        out.append(WG("f16", "f16", "f16", n, a_regs=True))
        out.append(WG("tf32", "tf32", "f32", n, a_regs=True))
        out.append(WG("e4m3", "e4m3", "f32", n, a_regs=True))
        out.append(WG("e5m2", "e5m2", "f16", n, a_regs=True))
    for n in (16, 64):
        out.append(WG("s8", "s8", "s32", n))
        out.append(WG("u8", "s8", "s32", n))
        out.append(WG("s8", "u8", "s32", n, a_regs=True))
    for at, dt in (("f16", "f32"), ("f16", "f16"), ("bf16", "f32"), ("tf32", "f32"), ("e4m3", "f32"),
                   ("e5m2", "f16")):
        out.append(WG(at, at, dt, 64, neg_a=True))
        out.append(WG(at, at, dt, 64, neg_b=True))
        out.append(WG(at, at, dt, 64, neg_a=True, neg_b=True))
    out.append(WG("f16", "f16", "f32", 64, a_regs=True, neg_a=True, neg_b=True))
    for at in ("f16", "bf16"):
        out.append(WG(at, at, "f32", 64, trans_a=True))
        out.append(WG(at, at, "f32", 64, trans_b=True))
        out.append(WG(at, at, "f32", 64, trans_a=True, trans_b=True))
        out.append(WG(at, at, "f32", 64, a_regs=True, trans_b=True))
    out.append(WG("f16", "f16", "f16", 64, trans_b=True))
    return list(dict.fromkeys(out))


WGMMA: list[WG] = _wg_list()


def wgmma_source() -> str:
    return "".join(wgmma_kernel(w) for w in WGMMA)


def wgmma_smem(w: WG) -> int:
    return 1024 + 8192 + 128 * max(w.n, 64)


# --------------------------------------------------------------------------------------------- mma.sync


@dataclass(frozen=True)
class MMA:
    """One mma.sync probe: the instruction text (without operands) and its register counts in 32-bit words."""

    ptx: str
    na: int
    nb: int
    nc: int
    wide: bool = False  # f64: 64-bit registers (counts are of 64-bit registers)

    @property
    def name(self) -> str:
        return "mma_" + self.ptx.replace("mma.sync.aligned.", "").replace(".", "_").replace(":", "")

    @property
    def words(self) -> int:
        return (self.na + self.nb + self.nc) * (2 if self.wide else 1)

    @property
    def types(self) -> tuple[str, str, str, str]:
        """(d, a, b, c) element types from the instruction text."""
        q = [x for x in self.ptx.split(".") if x in TYPES]
        if len(q) == 2:  # mma.m8n8k4.f64 / .s32.b1... forms with one or two types
            return (q[0], q[1], q[1], q[0])
        if len(q) == 1:
            return (q[0],) * 4
        return (q[0], q[1], q[2], q[3])


TYPES = ("f16", "bf16", "tf32", "f32", "f64", "e4m3", "e5m2", "s8", "u8", "s4", "u4", "b1", "s32")

MMAS: list[MMA] = [
    MMA("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 4, 2, 4),
    MMA("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 4, 2, 4),
    MMA("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", 4, 2, 2),
    MMA("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32", 2, 1, 4),
    MMA("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32", 2, 1, 4),
    MMA("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16", 2, 1, 2),
    MMA("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 4, 2, 4),
    MMA("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32", 2, 1, 4),
    MMA("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32", 2, 2, 8),
    MMA("mma.sync.aligned.m8n8k4.row.col.f16.f16.f16.f16", 2, 2, 4),
    MMA("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", 4, 2, 4),
    MMA("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32", 4, 2, 4),
    MMA("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32", 4, 2, 4),
    MMA("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", 4, 2, 4),
    MMA("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.u8.s32", 4, 2, 4),
    MMA("mma.sync.aligned.m16n8k16.row.col.s32.u8.u8.s32", 2, 1, 4),
    MMA("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32", 1, 1, 2),
    MMA("mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32", 4, 2, 4),
    MMA("mma.sync.aligned.m8n8k32.row.col.s32.u4.s4.s32", 1, 1, 2),
    MMA("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.xor.popc", 4, 2, 4),
    MMA("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc", 4, 2, 4),
    MMA("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64", 1, 1, 2, wide=True),
    MMA("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64", 2, 1, 4, wide=True),
    MMA("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64", 4, 2, 4, wide=True),
    MMA("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64", 8, 4, 4, wide=True),
]


def mma_kernel(m: MMA) -> str:
    if m.wide:
        t, c, load = "unsigned long long", "l", "const unsigned long long* p = reinterpret_cast<const unsigned long long*>(in) + threadIdx.x * {w};"
    else:
        t, c, load = "unsigned", "r", "const unsigned* p = in + threadIdx.x * {w};"
    w = m.na + m.nb + m.nc
    nd = m.nc
    k = 0
    groups = []
    for cnt in (nd, m.na, m.nb, m.nc):
        groups.append("{" + ", ".join(f"%{k + j}" for j in range(cnt)) + "}")
        k += cnt
    outs = ", ".join(f'"={c}"(d[{j}])' for j in range(nd))
    ins = ", ".join(f'"{c}"(p[{j}])' for j in range(w))
    return f"""
extern "C" __global__ void {m.name}(const unsigned* __restrict__ in, unsigned* __restrict__ out) {{
  {load.format(w=w)}
  {t} d[{nd}];
  asm volatile("{m.ptx} {", ".join(groups)};" : {outs} : {ins});
  {t}* o = reinterpret_cast<{t}*>(out) + threadIdx.x * {nd};
  #pragma unroll
  for (int j = 0; j < {nd}; ++j) o[j] = d[j];
}}
"""


def mma_source() -> str:
    return "".join(mma_kernel(m) for m in MMAS)


# --------------------------------------------------------------------------------------------- ldmatrix & co

LDM = [(x, t) for x in (1, 2, 4) for t in (False, True)]


def _ldm_name(kind: str, x: int, trans: bool) -> str:
    return f"{kind}_x{x}{'_t' if trans else ''}"


def ldmatrix_source() -> str:
    parts = []
    for x, trans in LDM:
        regs = ", ".join(f"%{j}" for j in range(x))
        outs = ", ".join(f'"=r"(r[{j}])' for j in range(x))
        tq = ".trans" if trans else ""
        parts.append(f"""
extern "C" __global__ void {_ldm_name("ldm", x, trans)}(const unsigned* __restrict__ img, const unsigned* __restrict__ offs,
                                             unsigned* __restrict__ out) {{
  __shared__ __align__(128) unsigned sm[1024];
  const int t = threadIdx.x;
  for (int i = t; i < 1024; i += 32) sm[i] = img[i];
  __syncwarp();
  unsigned a = (unsigned)__cvta_generic_to_shared(sm) + offs[t];
  unsigned r[{x}];
  asm volatile("ldmatrix.sync.aligned.m8n8.x{x}{tq}.shared.b16 {{{regs}}}, [%{x}];" : {outs} : "r"(a));
  #pragma unroll
  for (int j = 0; j < {x}; ++j) out[t * {x} + j] = r[j];
}}
""")
        ins = ", ".join(f'"r"(v[{j}])' for j in range(x))
        regs1 = ", ".join(f"%{j + 1}" for j in range(x))
        parts.append(f"""
extern "C" __global__ void {_ldm_name("stm", x, trans)}(const unsigned* __restrict__ img, const unsigned* __restrict__ offs,
                                             const unsigned* __restrict__ vals, unsigned* __restrict__ out) {{
  __shared__ __align__(128) unsigned sm[1024];
  const int t = threadIdx.x;
  for (int i = t; i < 1024; i += 32) sm[i] = img[i];
  __syncwarp();
  unsigned a = (unsigned)__cvta_generic_to_shared(sm) + offs[t];
  unsigned v[{x}];
  #pragma unroll
  for (int j = 0; j < {x}; ++j) v[j] = vals[t * {x} + j];
  asm volatile("stmatrix.sync.aligned.m8n8.x{x}{tq}.shared.b16 [%0], {{{regs1}}};" :: "r"(a), {ins} : "memory");
  __syncwarp();
  for (int i = t; i < 1024; i += 32) out[i] = sm[i];
}}
""")
    parts.append("""
extern "C" __global__ void movm(const unsigned* __restrict__ in, unsigned* __restrict__ out) {
  unsigned r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(in[threadIdx.x]));
  out[threadIdx.x] = r;
}
""")
    return "".join(parts)


CPASYNC_SOURCE = r"""
extern "C" __global__ void cpasync_probe(const unsigned char* __restrict__ src, unsigned* __restrict__ out) {
  __shared__ __align__(128) unsigned char sm[4096];
  const int t = threadIdx.x;
  for (int i = t; i < 1024; i += 32) reinterpret_cast<unsigned*>(sm)[i] = 0xEEEEEEEEu;
  __syncwarp();
  unsigned s = (unsigned)__cvta_generic_to_shared(sm);
  // group 0: 4- and 8-byte copies through L1
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(s + t * 4), "l"(src + t * 4) : "memory");
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" :: "r"(s + 128 + t * 8), "l"(src + 128 + t * 8) : "memory");
  asm volatile("cp.async.commit_group;" ::: "memory");
  // group 1: 16-byte copies around L1, one with a smaller source size (the rest zero-filled), one with an L2 hint
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s + 512 + t * 16), "l"(src + 512 + t * 16) : "memory");
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" :: "r"(s + 1024 + t * 16), "l"(src + 1024 + t * 16),
               "r"(t % 17) : "memory");
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" :: "r"(s + 1536 + t * 16),
               "l"(src + 1536 + t * 16) : "memory");
  asm volatile("cp.async.commit_group;" ::: "memory");
  // group 2: the ignore-src predicate (odd lanes write zeros)
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %2, 0;\n"
               "cp.async.cg.shared.global [%0], [%1], 16, p; }" :: "r"(s + 2048 + t * 16), "l"(src + 2048 + t * 16),
               "r"(t & 1) : "memory");
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" :: "r"(s + 2560 + t * 8), "l"(src + 2560 + t * 8),
               "r"((t * 3) % 9) : "memory");
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_group 2;" ::: "memory");
  __syncwarp();
  for (int i = t; i < 96; i += 32) out[i] = reinterpret_cast<unsigned*>(sm)[i];            // group 0's bytes
  asm volatile("cp.async.wait_group 1;" ::: "memory");
  __syncwarp();
  for (int i = t; i < 384; i += 32) out[96 + i] = reinterpret_cast<unsigned*>(sm + 512)[i];  // group 1's bytes
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncwarp();
  for (int i = t; i < 1024; i += 32) out[480 + i] = reinterpret_cast<unsigned*>(sm)[i];      // everything
}
"""

# --------------------------------------------------------------------------------------------- special functions

#: name -> (PTX instruction, register constraint letter: f = .f32, h = .b16 (f16/bf16 in 16 bits))
SFU: dict[str, tuple[str, str]] = {
    "ex2.approx.ftz.f32": ("ex2.approx.ftz.f32", "f"),
    "ex2.approx.f32": ("ex2.approx.f32", "f"),
    "rcp.approx.ftz.f32": ("rcp.approx.ftz.f32", "f"),
    "rcp.approx.f32": ("rcp.approx.f32", "f"),
    "rsqrt.approx.ftz.f32": ("rsqrt.approx.ftz.f32", "f"),
    "rsqrt.approx.f32": ("rsqrt.approx.f32", "f"),
    "sqrt.approx.ftz.f32": ("sqrt.approx.ftz.f32", "f"),
    "tanh.approx.f32": ("tanh.approx.f32", "f"),
    "lg2.approx.ftz.f32": ("lg2.approx.ftz.f32", "f"),
    "lg2.approx.f32": ("lg2.approx.f32", "f"),
    "sin.approx.ftz.f32": ("sin.approx.ftz.f32", "f"),
    "sin.approx.f32": ("sin.approx.f32", "f"),
    "cos.approx.ftz.f32": ("cos.approx.ftz.f32", "f"),
    "cos.approx.f32": ("cos.approx.f32", "f"),
    "ex2.approx.f16": ("ex2.approx.f16", "h"),
    "ex2.approx.ftz.bf16": ("ex2.approx.ftz.bf16", "h"),
    "tanh.approx.f16": ("tanh.approx.f16", "h"),
    "tanh.approx.bf16": ("tanh.approx.bf16", "h"),
}


def sfu_name(fn: str) -> str:
    return fn.replace(".", "_")


def sfu_source() -> str:
    parts = []
    for fn, (ins, c) in SFU.items():
        n = sfu_name(fn)
        if c == "f":
            body = (f'float y; asm("{ins} %0, %1;" : "=f"(y) : "f"(__uint_as_float(x))); '
                    "return __float_as_uint(y);")
        else:
            body = (f'unsigned short y; asm("{ins} %0, %1;" : "=h"(y) : "h"((unsigned short)x)); return y;')
        parts.append(f"""
__device__ __forceinline__ unsigned f_{n}(unsigned x) {{ {body} }}
extern "C" __global__ void sfu_{n}(const unsigned* __restrict__ x, unsigned* __restrict__ y, int count) {{
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) y[i] = f_{n}(x[i]);
}}
extern "C" __global__ void __launch_bounds__(1024) sweep_{n}(unsigned long long* __restrict__ hashes) {{
  __shared__ unsigned long long part[32];
  unsigned long long h = 0;
  for (unsigned i = threadIdx.x; i < (1u << SWEEP_CHUNK_LOG); i += blockDim.x) {{
    unsigned x = (blockIdx.x << SWEEP_CHUNK_LOG) | i;
    h += mix64(((unsigned long long)f_{n}(x) << 32) | x);
  }}
  for (int o = 16; o > 0; o >>= 1) h += __shfl_xor_sync(0xffffffffu, h, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = h;
  __syncthreads();
  if (threadIdx.x < 32) {{
    h = part[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) h += __shfl_xor_sync(0xffffffffu, h, o);
    if (threadIdx.x == 0) hashes[blockIdx.x] = h;
  }}
}}
""")
    head = f"#define SWEEP_CHUNK_LOG {SWEEP_CHUNK_LOG}\n" + """
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
"""
    return head + "".join(parts)


#: the sweeps hash chunks of 2**SWEEP_CHUNK_LOG consecutive input patterns (1024 chunks cover all 2**32)
SWEEP_CHUNK_LOG = 22


def mix64(z: np.ndarray) -> np.ndarray:
    """The sweep's per-input hash (splitmix64's finaliser), on uint64 arrays."""
    z = np.asarray(z, np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def chunk_hash(x: np.ndarray, y: np.ndarray) -> int:
    """The sweep's hash of one chunk: the sum (mod 2**64) of mix64(y << 32 | x) over its inputs."""
    z = (np.asarray(y, np.uint64) << np.uint64(32)) | np.asarray(x, np.uint64)
    return int(mix64(z).sum(dtype=np.uint64))


#: the stratified sample of 32-bit inputs: in every (sign, exponent) binade, its first and last RUN patterns and RUNS
#: more runs of RUN consecutive patterns
RUN = 256
RUNS = 1


def sample_starts(seed: int = 38) -> np.ndarray:
    """First pattern of each run of the sample (sorted), 512 binades x (RUNS + 2) runs."""
    rng = np.random.default_rng(seed)
    starts = []
    for se in range(512):
        base = se << 23
        offs = [0, (1 << 23) - RUN]  # the binade's first and last runs, and RUNS more at random
        offs += list(rng.integers(0, (1 << 23) - RUN, RUNS))
        starts += [base + int(o) for o in offs]
    return np.array(sorted(starts), np.uint32)


def sample_inputs(starts: np.ndarray) -> np.ndarray:
    return (starts[:, None].astype(np.uint64) + np.arange(RUN, dtype=np.uint64)[None, :]).astype(np.uint32).ravel()


def delta_encode(y: np.ndarray, run: int) -> np.ndarray:
    """Runs of outputs -> first value then differences (mod 2**32), as byte planes (compresses well)."""
    y = np.asarray(y, np.uint32).reshape(-1, run)
    d = y.copy()
    d[:, 1:] = y[:, 1:] - y[:, :-1]
    return np.ascontiguousarray(d.ravel().view(np.uint8).reshape(-1, 4).T)


def delta_decode(planes: np.ndarray, run: int) -> np.ndarray:
    d = np.ascontiguousarray(np.asarray(planes, np.uint8).T).view(np.uint32).ravel().reshape(-1, run)
    return np.cumsum(d, axis=1, dtype=np.uint32).ravel()


# --------------------------------------------------------------------------------------------- input values

F16_SPECIAL = [0x7E00, 0x7E01, 0xFE3F, 0x7C01, 0x7D55, 0x7C00, 0xFC00, 0x0001, 0x8001, 0x03FF, 0x0200, 0x7BFF,
               0xFBFF, 0x0000, 0x8000, 0x0400, 0x3C00, 0xBC00]
BF16_SPECIAL = [0x7FC0, 0x7FC1, 0xFFA5, 0x7F81, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x007F, 0x0040, 0x7F7F, 0xFF7F,
                0x0000, 0x8000, 0x0080, 0x3F80, 0xBF80]
F32_SPECIAL = [0x7FC00000, 0x7FC00001, 0xFFC12345, 0x7F800001, 0x7FA00000, 0x7F800000, 0xFF800000, 0x00000001,
               0x80000001, 0x007FFFFF, 0x00400000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000000, 0x80000000, 0x00800000,
               0x3F800000, 0xBF800000, 0x00001FFF, 0x3F801FFF, 0x3F800FFF, 0x3F801000]
E4M3_SPECIAL = [0x7F, 0xFF, 0x7E, 0xFE, 0x01, 0x81, 0x07, 0x08, 0x00, 0x80, 0x38, 0xB8]
E5M2_SPECIAL = [0x7C, 0xFC, 0x7D, 0x7E, 0xFF, 0x7B, 0xFB, 0x01, 0x81, 0x03, 0x00, 0x80, 0x3C, 0xBC]
I8_SPECIAL = [0x7F, 0x80, 0xFF, 0x00, 0x01]


def _f16_bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).astype(np.float16).view(np.uint16)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _fp8_bits(x: np.ndarray, kind: str) -> np.ndarray:
    """float -> e4m3/e5m2 bits by search over the 256 codes (nearest, ties to even code; saturating)."""
    table = fp8_values(kind)
    finite = np.isfinite(table)
    codes = np.nonzero(finite)[0]
    vals = table[finite]
    x = np.asarray(x, np.float64).ravel()
    idx = np.abs(x[:, None] - vals[None, :]).argmin(axis=1)
    return codes[idx].astype(np.uint8)


def fp8_values(kind: str) -> np.ndarray:
    """The 256 values of e4m3 (no infinities, NaN = S.1111.111) or e5m2 (IEEE-like) codes, as float64."""
    out = np.empty(256)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        if kind == "e4m3":
            e, m = (c >> 3) & 15, c & 7
            if e == 15 and m == 7:
                out[c] = np.nan
            elif e == 0:
                out[c] = s * m / 8 * 2.0 ** -6
            else:
                out[c] = s * (1 + m / 8) * 2.0 ** (e - 7)
        else:
            e, m = (c >> 2) & 31, c & 3
            if e == 31:
                out[c] = s * np.inf if m == 0 else np.nan
            elif e == 0:
                out[c] = s * m / 4 * 2.0 ** -14
            else:
                out[c] = s * (1 + m / 4) * 2.0 ** (e - 15)
    return out


def elements(kind: str, etype: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` elements of ``etype`` as their bit patterns (uint8/16/32) for a case of ``kind``:
    rand (ordinary values), ints (small integers: exact sums), special (a sprinkling of NaN payloads, infinities, subnormals), tiny (values whose
    products are subnormal in the accumulator), cancel (large terms that cancel, with small ones)."""
    x = rng.standard_normal(count) * np.exp2(rng.integers(-3, 4, count))
    if kind == "ints":
        x = rng.integers(-4, 5, count).astype(np.float64)
    if kind == "tiny":
        x = rng.standard_normal(count) * {"f16": 2.0 ** -9, "bf16": 2.0 ** -66, "tf32": 2.0 ** -66, "f32": 2.0 ** -132,
                                          "f64": 2.0 ** -530, "e4m3": 2.0 ** -5, "e5m2": 2.0 ** -9}.get(etype, 1.0)
    if kind == "cancel":
        big = {"f16": 2.0 ** 7, "e4m3": 2.0 ** 5, "e5m2": 2.0 ** 8}.get(etype, 2.0 ** 20)
        x = rng.standard_normal(count) * 2.0 ** -4
        pick = rng.random(count) < 0.25
        x[pick] = np.where(rng.random(pick.sum()) < 0.5, big, -big) * (1 + rng.integers(0, 4, pick.sum()) / 8)
    if etype in ("s8", "u8", "s4", "u4", "b1"):
        return rng.integers(0, 256, count).astype(np.uint8)
    if etype == "f16":
        bits = _f16_bits(x)
        spec = F16_SPECIAL
    elif etype == "bf16":
        bits = _bf16_bits(x)
        spec = BF16_SPECIAL
    elif etype in ("tf32", "f32"):
        bits = np.asarray(x, np.float32).view(np.uint32).copy()
        if etype == "tf32" and kind != "ints":  # the 13 low bits tf32 does not have: random garbage
            bits ^= rng.integers(0, 1 << 13, count).astype(np.uint32)
        spec = F32_SPECIAL
    elif etype == "f64":
        bits = np.asarray(x, np.float64).view(np.uint64).copy()
        spec = [0x7FF8000000000001, 0xFFF0000000000000, 0x7FF0000000000000, 0x0000000000000001,
                0x8000000000000000, 0x000FFFFFFFFFFFFF, 0x7FF4000000000000]
    elif etype in ("e4m3", "e5m2"):
        bits = _fp8_bits(x, etype)
        spec = E4M3_SPECIAL if etype == "e4m3" else E5M2_SPECIAL
    else:
        raise ValueError(etype)
    if kind == "special":
        pick = rng.random(count) < 0.04
        bits[pick] = np.asarray(spec, bits.dtype)[rng.integers(0, len(spec), pick.sum())]
    return bits


def words(bits: np.ndarray) -> np.ndarray:
    """Element bit patterns packed little-endian into 32-bit words."""
    b = np.ascontiguousarray(bits)
    return b.view(np.uint8).view(np.uint32).copy()


ETYPE_BYTES = {"f16": 2, "bf16": 2, "tf32": 4, "f32": 4, "f64": 8, "e4m3": 1, "e5m2": 1, "s8": 1, "u8": 1, "s4": 1,
               "u4": 1, "b1": 1, "s32": 4}


def typed_words(kind: str, etype: str, nwords: int, rng: np.random.Generator) -> np.ndarray:
    """``nwords`` 32-bit words full of ``etype`` elements of a ``kind`` case (s32 accumulators: small integers)."""
    if etype == "s32":
        return rng.integers(-1 << 20, 1 << 20, nwords).astype(np.int32).view(np.uint32) if kind != "special" else \
            rng.choice(np.array([0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0, 1, 0x7FFFFF00], np.uint32), nwords)
    per = 4 // ETYPE_BYTES[etype] if ETYPE_BYTES[etype] <= 4 else 1
    if etype == "f64":
        return words(elements(kind, etype, nwords // 2, rng))
    return words(elements(kind, etype, nwords * per, rng))


# --------------------------------------------------------------------------------------------- wmma (PTX)


@dataclass(frozen=True)
class WMMA:
    """One wmma probe (the PTX <mma.h> compiles to): shape, layouts, types and register counts."""

    shape: str
    alay: str
    blay: str
    atype: str
    dtype: str
    na: int
    nb: int
    nd: int

    @property
    def name(self) -> str:
        return f"wmma_{self.shape}_{self.alay}_{self.blay}_{self.atype}_{self.dtype}"

    @property
    def dims(self) -> tuple[int, int, int]:
        m, rest = self.shape[1:].split("n")
        n, k = rest.split("k")
        return int(m), int(n), int(k)

    def mma(self) -> str:
        base = f"wmma.mma.sync.aligned.{self.alay}.{self.blay}.{self.shape}"
        if self.atype == "f16":
            return f"{base}.{self.dtype}.{self.dtype}"
        return f"{base}.{self.dtype}.{self.atype}.{self.atype}.{self.dtype}"


WMMAS: list[WMMA] = [
    WMMA("m16n16k16", "row", "col", "f16", "f32", 8, 8, 8),
    WMMA("m16n16k16", "row", "col", "f16", "f16", 8, 8, 4),
    WMMA("m16n16k16", "col", "row", "f16", "f32", 8, 8, 8),
    WMMA("m32n8k16", "row", "col", "f16", "f32", 8, 8, 8),
    WMMA("m8n32k16", "row", "row", "f16", "f32", 8, 8, 8),
    WMMA("m16n16k16", "row", "col", "bf16", "f32", 4, 4, 8),
    WMMA("m16n16k8", "row", "col", "tf32", "f32", 4, 4, 8),
    WMMA("m16n16k16", "row", "col", "s8", "s32", 2, 2, 8),
]


def wmma_kernel(w: WMMA) -> str:
    m, n, k = w.dims
    lda = k if w.alay == "row" else m
    ldb = k if w.blay == "col" else n

    def regs(start: int, cnt: int) -> str:
        return "{" + ", ".join(f"%{start + j}" for j in range(cnt)) + "}"

    return f"""
extern "C" __global__ void {w.name}(const unsigned* __restrict__ a, const unsigned* __restrict__ b,
                                    const unsigned* __restrict__ c, unsigned* __restrict__ d) {{
  unsigned ra[{w.na}], rb[{w.nb}], rc[{w.nd}], rd[{w.nd}];
  asm volatile("wmma.load.a.sync.aligned.{w.alay}.{w.shape}.global.{w.atype} {regs(0, w.na)}, [%{w.na}], %{w.na + 1};"
               : {", ".join(f'"=r"(ra[{j}])' for j in range(w.na))} : "l"(a), "r"({lda}));
  asm volatile("wmma.load.b.sync.aligned.{w.blay}.{w.shape}.global.{w.atype} {regs(0, w.nb)}, [%{w.nb}], %{w.nb + 1};"
               : {", ".join(f'"=r"(rb[{j}])' for j in range(w.nb))} : "l"(b), "r"({ldb}));
  asm volatile("wmma.load.c.sync.aligned.row.{w.shape}.global.{w.dtype} {regs(0, w.nd)}, [%{w.nd}], %{w.nd + 1};"
               : {", ".join(f'"=r"(rc[{j}])' for j in range(w.nd))} : "l"(c), "r"({n}));
  asm volatile("{w.mma()} {regs(0, w.nd)}, {regs(w.nd, w.na)}, {regs(w.nd + w.na, w.nb)}, {regs(w.nd + w.na + w.nb, w.nd)};"
               : {", ".join(f'"=r"(rd[{j}])' for j in range(w.nd))}
               : {", ".join([f'"r"(ra[{j}])' for j in range(w.na)] + [f'"r"(rb[{j}])' for j in range(w.nb)] + [f'"r"(rc[{j}])' for j in range(w.nd)])});
  asm volatile("wmma.store.d.sync.aligned.row.{w.shape}.global.{w.dtype} [%0], {regs(1, w.nd)}, %{w.nd + 1};"
               :: "l"(d), {", ".join(f'"r"(rd[{j}])' for j in range(w.nd))}, "r"({n}) : "memory");
}}
"""


def wmma_source() -> str:
    return "".join(wmma_kernel(w) for w in WMMAS)


# --------------------------------------------------------------------------------------------- compiling

SOURCES = {"wgmma": wgmma_source, "mma": mma_source, "wmma": wmma_source, "ldmatrix": ldmatrix_source,
           "cpasync": lambda: CPASYNC_SOURCE, "sfu": sfu_source}


def kernels_of(source: str) -> dict:
    """Every ``extern "C"`` kernel of ``source`` as a helpers.gpu Kernel, from one NVRTC compilation."""
    import dataclasses
    import re

    from helpers import gpu
    from helpers.gpu import compiler

    names = re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', source)
    first = gpu.compile(source, names[0])
    ptx = first.ptx
    starts = [m.start() for m in re.finditer(r"^\.visible \.entry ", ptx, re.M)]
    parts: dict[str, str] = {}
    if starts and ".func" not in ptx:  # one entry's PTX each: the executor then reads only the kernel it runs
        head = ptx[:starts[0]]
        for i, st in enumerate(starts):
            block = ptx[st:starts[i + 1] if i + 1 < len(starts) else len(ptx)]
            parts[re.match(r"\.visible \.entry (\w+)", block).group(1)] = head + block
    out = {}
    for n in names:
        rep = dataclasses.replace(first.report, name=n, lowered_name=n,
                                  static_smem=compiler.read_cubin(first.cubin, n).static_smem)
        out[n] = compiler.Kernel(source, n, first.options, first.arch, first.cubin, parts.get(n, ptx), rep)
    return out
