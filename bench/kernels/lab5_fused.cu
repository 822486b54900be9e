// Lab 5 with a fused epilogue: D = act(α·A·Bᵀ + β·C + bias), bf16 D, and the hooks of a programmatic dependent
// launch.
//
// The mainloop is Lab 5's (bench/kernels/lab5_epilogue.cu): 128×256 tiles, one producer and two consumer
// warpgroups, setmaxnreg 24/240, a ring of 4 stages. The epilogue adds, per 64×64 sub-tile:
//   - the source C (bf16, M×N, its own tensor map, 128B swizzle): the TMA loads C's sub-tile into the very shared
//     buffer that D's sub-tile is then written into (C and D are both bf16, so the 128B-swizzled layouts match:
//     each thread reads its two C values from the 4 bytes it then overwrites with its two D values). The first two
//     sub-tiles of C are loaded before the mainloop, so those loads hide under it; the load of sub-tile s + 2 is
//     issued as soon as the store of sub-tile s has read the buffer. One mbarrier per buffer says C has landed
//     (phase 0 for sub-tiles 0 and 1, phase 1 for 2 and 3). With β = 0 C is never loaded.
//   - per element, one fp32 rounding a step (helpers/hopper/fused.py is the same computation in numpy):
//     x = α·acc; x = x + β·C; x = x + bias[n]; x = act(x); D = bf16(x) (nearest, ties to even).
//     __fmul_rn/__fadd_rn keep the compiler from fusing a multiply and an add into one fma.
//   - bias: one value per column, fp32 (FUSED_BIAS 1) or bf16 (FUSED_BIAS 2), or none (0); read from global
//     memory (it is small and every block of a column reads the same values, so it stays in L2 and L1).
//   - act: FUSED_ACT 0 none, 1 ReLU (max(x, 0)), 2 GELU in its tanh form, with a rational tanh (multiplies, adds,
//     one division: no tanh.approx).
// Edges: loads past M or N fill with zeros and stores clip there, as in Lab 5, so M and N need only be multiples
// of 8 (the tensor maps' 16-byte row strides); the bias is read only for columns below N.
//
// Programmatic dependent launch: every thread runs griddepcontrol.wait after the prologue (barrier init, tensor-map
// prefetch) and before the first global read, then griddepcontrol.launch_dependents. Launched with the attribute
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, the kernel may start while the previous kernel in the
// stream is still running; the wait holds it until that kernel has finished and its writes are visible. The
// trigger lets the next kernel start once every block of this one has issued it. Launched without the attribute,
// both instructions do nothing.
// Shared memory: 4 stages × 48 KiB + 2 warpgroups × 2 buffers × 8 KiB = 224 KiB (Lab 5's).
#include "hopper.cuh"
#include <cuda_bf16.h>

#ifndef FUSED_ACT
#define FUSED_ACT 2
#endif
#ifndef FUSED_BIAS
#define FUSED_BIAS 1
#endif
#if FUSED_BIAS == 2
typedef __nv_bfloat16 bias_t;
#else
typedef float bias_t;
#endif

namespace fused {
constexpr int BM = 128, BN = 256, BK = 64, CONSUMERS = 2;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int SUB = 64, SUBS = BN / SUB, SUB_BYTES = 64 * SUB * 2, CBUF_BYTES = CONSUMERS * 2 * SUB_BYTES;
constexpr int SMEM_LIMIT = 227 * 1024, ALIGN_SLACK = 1024;
constexpr int STAGES = (SMEM_LIMIT - ALIGN_SLACK - CBUF_BYTES) / STAGE_BYTES;  // 4
static_assert(STAGES >= 3, "a pipeline needs at least three stages here");
}  // namespace fused

// tanh(x) ≈ x·P(x²)/Q(x²) on [-7.905, 7.905] (beyond, ±1 in fp32), x itself for |x| < 0.0004.
__device__ __forceinline__ float tanh_rational(float x) {
  const float xc = fminf(fmaxf(x, -0x1.f9f09ep+2f), 0x1.f9f09ep+2f);
  const float x2 = __fmul_rn(xc, xc);
  float p = -0x1.3e4b80p-52f;
  p = __fadd_rn(__fmul_rn(x2, p), 0x1.c266fcp-43f);
  p = __fadd_rn(__fmul_rn(x2, p), -0x1.7a6ffep-34f);
  p = __fadd_rn(__fmul_rn(x2, p), 0x1.b80082p-25f);
  p = __fadd_rn(__fmul_rn(x2, p), 0x1.f28694p-17f);
  p = __fadd_rn(__fmul_rn(x2, p), 0x1.4e1bdap-11f);
  p = __fadd_rn(__fmul_rn(x2, p), 0x1.40b3b8p-8f);
  p = __fmul_rn(xc, p);
  float q = 0x1.41a7b0p-20f;
  q = __fadd_rn(__fmul_rn(x2, q), 0x1.f12bacp-14f);
  q = __fadd_rn(__fmul_rn(x2, q), 0x1.29540ap-9f);
  q = __fadd_rn(__fmul_rn(x2, q), 0x1.40b3bap-8f);
  return fabsf(x) < 0x1.a36e2ep-12f ? x : __fdiv_rn(p, q);
}

__device__ __forceinline__ float activate(float x) {
#if FUSED_ACT == 1
  return fmaxf(x, 0.0f);
#elif FUSED_ACT == 2
  const float x3 = __fmul_rn(__fmul_rn(x, x), x);
  const float u = __fmul_rn(0x1.988454p-1f, __fadd_rn(x, __fmul_rn(0x1.6e4e26p-5f, x3)));  // √(2/π), 0.044715
  return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanh_rational(u)));
#else
  return x;
#endif
}

// The bias of columns n and n + 1 (n even; N is a multiple of 8, so both are below N or neither is).
__device__ __forceinline__ float2 bias_pair(const bias_t* __restrict__ bias, int n, int N) {
  if (n >= N) return make_float2(0.0f, 0.0f);  // a clipped column: the store drops it
#if FUSED_BIAS == 2
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(bias + n));
#else
  return *reinterpret_cast<const float2*>(bias + n);
#endif
}

// This thread's 32 accumulators of sub-tile `d` through the fused epilogue, in place in the 128B-swizzled 64×64
// buffer: element (r, col) sits in row r (128 bytes), 16-byte chunk (col / 8) ^ (r % 8). With C, the buffer holds
// C's sub-tile on entry; each thread reads the two C values of a 4-byte word, then writes its two D values there.
__device__ __forceinline__ void fused_subtile(unsigned char* buf, const float* d, int tid, float alpha, float beta,
                                              bool with_c, const bias_t* __restrict__ bias, int col0, int N) {
  const int w = tid / 32, l = tid % 32;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int r = 16 * w + l / 4 + 8 * ((j / 2) % 2);
    const int chunk = (j / 4) ^ (r % 8);
    __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(buf + r * 128 + chunk * 16 + 4 * (l % 4));
    float x0 = __fmul_rn(alpha, d[j]), x1 = __fmul_rn(alpha, d[j + 1]);
    if (with_c) {
      const float2 cv = __bfloat1622float2(*p);
      x0 = __fadd_rn(x0, __fmul_rn(beta, cv.x));
      x1 = __fadd_rn(x1, __fmul_rn(beta, cv.y));
    }
#if FUSED_BIAS != 0
    const float2 bv = bias_pair(bias, col0 + 8 * (j / 4) + 2 * (l % 4), N);
    x0 = __fadd_rn(x0, bv.x);
    x1 = __fadd_rn(x1, bv.y);
#endif
    *p = __floats2bfloat162_rn(activate(x0), activate(x1));
  }
}

extern "C" __global__ void __launch_bounds__(384, 1)
lab5_fused(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
           const __grid_constant__ CUtensorMap tmap_c, const __grid_constant__ CUtensorMap tmap_d, int M, int N,
           int K, float alpha, float beta, const bias_t* __restrict__ bias) {
  using namespace fused;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (hopper::smem_u32(smem_raw) & 1023)) & 1023);
  unsigned char* cbuf = smem + STAGES * STAGE_BYTES;
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES], cfull[CONSUMERS * 2];

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int steps = (K + BK - 1) / BK;
  const bool with_c = beta != 0.0f;
  if (threadIdx.x == 0) {
    hopper::tma_prefetch(&tmap_a);
    hopper::tma_prefetch(&tmap_b);
    hopper::tma_prefetch(&tmap_c);
    hopper::tma_prefetch(&tmap_d);
    for (int s = 0; s < STAGES; ++s) {
      hopper::mbar_init(&full[s], 1);
      hopper::mbar_init(&empty[s], CONSUMERS);
    }
    for (int b = 0; b < CONSUMERS * 2; ++b) hopper::mbar_init(&cfull[b], 1);
    hopper::mbar_fence_init();
  }
  __syncthreads();
  // The previous kernel's writes (A, B, C, the bias) are complete and visible past this point.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (wg == 0) {  // ---------------------------------------------------------------- producer
    hopper::setmaxnreg_dec<24>();
    if (tid == 0) {
      for (int k = 0; k < steps; ++k) {
        const int s = k % STAGES;
        HOPPER_WAIT(empty, s, ((k / STAGES) & 1) ^ 1);
        unsigned char* a = smem + s * STAGE_BYTES;
        hopper::mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
        hopper::tma_load_2d(a, &tmap_a, &full[s], k * BK, m0);
        hopper::tma_load_2d(a + A_BYTES, &tmap_b, &full[s], k * BK, n0);
      }
    }
    return;
  }

  // ------------------------------------------------------------------------------- consumers
  hopper::setmaxnreg_inc<240>();
  const int c = wg - 1;
  unsigned char* mine = cbuf + c * 2 * SUB_BYTES;
  unsigned long long* cbar = cfull + c * 2;
  if (with_c && tid == 0) {  // C's first two sub-tiles, under the mainloop
    for (int b = 0; b < 2; ++b) {
      hopper::mbar_arrive_expect_tx(&cbar[b], SUB_BYTES);
      hopper::tma_load_2d(mine + b * SUB_BYTES, &tmap_c, &cbar[b], n0 + b * SUB, m0 + 64 * c);
    }
  }
  float d[BN / 2];
#pragma unroll
  for (int j = 0; j < BN / 2; ++j) d[j] = 0.0f;
  for (int k = 0; k < steps; ++k) {
    const int s = k % STAGES;
    HOPPER_WAIT(full, s, (k / STAGES) & 1);
    const unsigned char* a = smem + s * STAGE_BYTES + c * (64 * BK * 2);
    const unsigned char* b = smem + s * STAGE_BYTES + A_BYTES;
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)
      hopper::wgmma_m64n256k16_bf16(d, hopper::make_smem_desc(a + 32 * kk, 16, 1024),
                                    hopper::make_smem_desc(b + 32 * kk, 16, 1024));
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();
    if (k > 0 && tid == 0) hopper::mbar_arrive(&empty[(k - 1) % STAGES]);
  }
  hopper::wgmma_wait<0>();
  hopper::wgmma_fence_operands(d);

  // ------------------------------------------------- epilogue: C → smem, registers ⊕ C → D in place → TMA store
#pragma unroll
  for (int sub = 0; sub < SUBS; ++sub) {
    unsigned char* buf = mine + (sub % 2) * SUB_BYTES;
    if (with_c) {
      hopper::mbar_wait(&cbar[sub % 2], (sub / 2) & 1, "cfull", 2 * c + sub % 2);  // C's sub-tile has landed
    } else if (sub >= 2) {  // Lab 5's rule: the store issued from this buffer two sub-tiles ago must have read it
      if (tid == 0) hopper::tma_store_wait_read<1>();
      hopper::named_bar_sync(1 + c, 128);
    }
    fused_subtile(buf, d + 32 * sub, tid, alpha, beta, with_c, bias, n0 + sub * SUB, N);
    hopper::fence_proxy_async();        // these generic stores, before the TMA (async proxy) reads them
    hopper::named_bar_sync(1 + c, 128);  // every thread of the warpgroup has written and fenced
    if (tid == 0) {
      hopper::tma_store_2d(&tmap_d, buf, n0 + sub * SUB, m0 + 64 * c);
      hopper::tma_store_commit();
      if (with_c && sub + 2 < SUBS) {  // the buffer's next C sub-tile, once this store has read the buffer
        hopper::tma_store_wait_read<0>();
        hopper::mbar_arrive_expect_tx(&cbar[sub % 2], SUB_BYTES);
        hopper::tma_load_2d(buf, &tmap_c, &cbar[sub % 2], n0 + (sub + 2) * SUB, m0 + 64 * c);
      }
    }
  }
  if (tid == 0) hopper::tma_store_wait<0>();  // shared memory must outlive the stores' reads
}
