#include "hopper.cuh"
#include <cuda_bf16.h>
using namespace hopper;
extern "C" __global__ void __launch_bounds__(384, 1) every_wrapper(const __grid_constant__ CUtensorMap tm, float* out) {
  __shared__ alignas(1024) __nv_bfloat16 tile[64 * 64];
  __shared__ alignas(8) unsigned long long full[2];
  __shared__ alignas(8) unsigned long long one;
  if (threadIdx.x == 0) { mbar_init(&full[0], 1); mbar_init(&full[1], 1); mbar_init(&one, 1); mbar_fence_init(); }
  __syncthreads();
  tma_prefetch(&tm);
  mbar_arrive_expect_tx(&full[0], 8192);
  mbar_expect_tx(&full[1], 16);
  mbar_arrive(&one);
  mbar_arrive(&one, 2);
  named_bar_arrive(1, 64); named_bar_sync(2, 384);
  tma_load_1d(tile, &tm, &full[0], 0);
  tma_load_2d(tile, &tm, &full[0], 0, 1);
  tma_load_3d(tile, &tm, &full[0], 0, 1, 2);
  tma_load_4d(tile, &tm, &full[0], 0, 1, 2, 3);
  tma_load_5d(tile, &tm, &full[0], 0, 1, 2, 3, 4);
  tma_load_2d_multicast(tile, &tm, &full[0], 0, 1, 3);
  bulk_load(tile, out, 128, &full[1]);
  HOPPER_WAIT(full, 0, 0);
  HOPPER_WAIT1(one, 0);
  bool t = mbar_test_wait(&full[1], 1) && mbar_try_wait(&full[1], 0);
  mbar_arrive_cluster(&full[1], 0);
  mbar_arrive_cluster_release(&full[1], 0);
  fence_proxy_async(); fence_proxy_async_global(); fence_proxy_async_all();
  tma_store_1d(&tm, tile, 0); tma_store_2d(&tm, tile, 0, 1); tma_store_3d(&tm, tile, 0, 1, 2);
  tma_store_4d(&tm, tile, 0, 1, 2, 3); tma_store_5d(&tm, tile, 0, 1, 2, 3, 4);
  tma_store_commit(); tma_store_wait_read<1>(); tma_store_wait<0>();
  float d64[32] = {}; float d128[64] = {}; float d256[128] = {};
  unsigned long long da = make_smem_desc(tile, 16, 1024, 128), db = make_smem_desc(tile + 16, 16, 1024, 64);
  wgmma_fence();
  wgmma_m64n64k16_bf16(d64, da, db, t);
  wgmma_bf16<128>(d128, da, db, true);
  wgmma_bf16<256, 0, 1>(d256, da, db, true);
  wgmma_m64n8k16_bf16(*reinterpret_cast<float(*)[4]>(d64), da, db);
  wgmma_commit(); wgmma_wait<0>();
  wgmma_fence_operands(d64);
  if (warpgroup_id() == 0) setmaxnreg_inc<240>(); else setmaxnreg_dec<40>();
  cluster_arrive(); cluster_wait(); cluster_sync();
  mbar_inval(&one);
  unsigned* fl = reinterpret_cast<unsigned*>(out);
  flag_wait_geq(fl, 0u); flag_store_release(fl, flag_load_acquire(fl) + 1); flag_add_release(fl, 1);
  unsigned r = cluster_ctarank() + cluster_nctarank() + map_shared_rank(tile, 0);
  float s = r;
  for (int i = 0; i < 32; ++i) s += d64[i] + d128[i] + d256[i] + d128[i+32] + d256[i+96];
  out[threadIdx.x] = s;
}
