"""Control flow and the CTA's own machinery on the executor: divergence and reconvergence, warp collectives,
atomics, local memory, calls, printf and assert, named barriers, dynamic shared memory, 2-D/3-D indexing, and the
deadlocks the machine reports itself."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import gpu

DIVERGE = r"""
extern "C" __global__ void diverge(const int* in, int* out) {
  const int t = threadIdx.x;
  const int v = in[t];
  int acc = 0;
  if (t % 3 == 0) {
    for (int i = 0; i < v; ++i) acc += i * t;
  } else if (t % 3 == 1) {
    acc = -v;
    while (acc < 100) acc = acc * 3 + 50;
  } else {
    acc = v;
  }
  const int n = __syncthreads_count(acc > 5);
  out[t] = acc + 1000 * n;
}
"""


def _diverge_ref(v: np.ndarray) -> np.ndarray:
    out = []
    for t, x in enumerate(v.tolist()):
        if t % 3 == 0:
            acc = sum(i * t for i in range(x))
        elif t % 3 == 1:
            acc = -x
            while acc < 100:
                acc = acc * 3 + 50
        else:
            acc = x
        out.append(acc)
    acc = np.array(out)
    return acc + 1000 * int((acc > 5).sum())


def test_divergent_loops_reconverge_at_syncthreads_count() -> None:
    k = gpu.compile(DIVERGE, "diverge")
    v = np.random.default_rng(0).integers(0, 20, 96).astype(np.int32)
    out = gpu.poison(96, np.int32)
    gpu.launch(k, 1, 96, 0, gpu.to_device(v), out)
    assert np.array_equal(out.to_host(), _diverge_ref(v))


WARP = r"""
extern "C" __global__ void warp_ops(const int* in, int* out) {
  const int t = threadIdx.x, l = t % 32;
  const int v = in[t];
  int* o = out + 10 * t;
  o[0] = __shfl_sync(0xffffffffu, v, (l * 7) % 32);
  o[1] = __shfl_up_sync(0xffffffffu, v, 3);
  o[2] = __shfl_down_sync(0xffffffffu, v, 5);
  o[3] = __shfl_xor_sync(0xffffffffu, v, 6);
  o[4] = (int)__ballot_sync(0xffffffffu, v & 1);
  o[5] = __any_sync(0xffffffffu, v > 90) + 2 * __all_sync(0xffffffffu, v >= 0);
  o[6] = __reduce_add_sync(0xffffffffu, v);
  o[7] = (int)__match_any_sync(0xffffffffu, v % 4);
  int active = 0;
  if (l < 10) active = (int)__activemask();
  o[8] = active;
  unsigned leader;
  asm volatile("{ .reg .pred p; elect.sync %0|p, 0xffffffff; }" : "=r"(leader));
  o[9] = (int)leader + (l < 16 ? __shfl_sync(0x0000ffffu, v, 15, 16) : 0);
}
"""


def _warp_ref(v: np.ndarray) -> np.ndarray:
    out = np.zeros((len(v), 10), np.int64)
    for w0 in range(0, len(v), 32):
        x = v[w0:w0 + 32]
        for l in range(32):
            o = out[w0 + l]
            o[0] = x[(l * 7) % 32]
            o[1] = x[l - 3] if l >= 3 else x[l]
            o[2] = x[l + 5] if l + 5 < 32 else x[l]
            o[3] = x[l ^ 6]
            o[4] = sum(1 << i for i in range(32) if x[i] & 1)
            o[5] = int((x > 90).any()) + 2 * int((x >= 0).all())
            o[6] = x.sum()
            o[7] = sum(1 << i for i in range(32) if x[i] % 4 == x[l] % 4)
            o[8] = (1 << 10) - 1 if l < 10 else 0
            o[9] = (x[15] if l < 16 else 0)
    return (out & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def test_warp_collectives() -> None:
    k = gpu.compile(WARP, "warp_ops")
    v = np.random.default_rng(1).integers(0, 100, 64).astype(np.int32)
    out = gpu.poison(640, np.int32)
    gpu.launch(k, 1, 64, 0, gpu.to_device(v), out)
    assert np.array_equal(out.to_host().reshape(64, 10), _warp_ref(v))


ATOMICS = r"""
extern "C" __global__ void atomics(const float* in, float* fsum, int* counters, unsigned* order) {
  __shared__ int s_max;
  const int t = threadIdx.x + blockIdx.x * blockDim.x;
  if (threadIdx.x == 0) s_max = -1000;
  __syncthreads();
  atomicAdd(fsum, in[t]);
  const int ticket = atomicAdd(&counters[0], 1);
  order[ticket] = t;
  atomicMax(&counters[1], (t * 37) % 101);
  atomicMax(&s_max, (t * 13) % 97);
  int old = atomicCAS(&counters[2], 0, t + 1);
  (void)old;
  atomicExch(&counters[3], 7);
  atomicInc((unsigned*)&counters[4], 5u);
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(&counters[5], s_max);
}
"""


def test_atomics_in_thread_order() -> None:
    k = gpu.compile(ATOMICS, "atomics")
    n = 128
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    fsum, counters, order = gpu.zeros(1, np.float32), gpu.zeros(6, np.int32), gpu.poison(n, np.uint32)
    gpu.launch(k, 2, 64, 0, gpu.to_device(x), fsum, counters, order)
    c = counters.to_host()
    s = np.float32(0)
    for v in x:  # one thread after the other, as the executor orders them (the GPU's order varies)
        s = np.float32(s + v)
    assert fsum.to_host()[0] == s
    assert c[0] == n and sorted(order.to_host().tolist()) == list(range(n))
    assert c[1] == max((t * 37) % 101 for t in range(n)) and c[3] == 7
    assert c[2] in range(1, n + 1) and c[4] == n % 6
    assert c[5] == max((t * 13) % 97 for t in range(64)) + max((t * 13) % 97 for t in range(64, 128))


LOCAL_CALLS = r"""

__device__ __noinline__ float weigh(const float* w, int n, float scale) {
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += w[i] * scale;
  return s;
}
extern "C" __global__ void local_calls(const int* idx, float* out) {
  float w[12];
  for (int i = 0; i < 12; ++i) w[i] = i * 0.5f + threadIdx.x;
  const int j = idx[threadIdx.x];
  out[threadIdx.x] = w[j] + weigh(w, j, 2.0f);
  if (threadIdx.x == 3) printf("thread %d: j=%d w=%.2f %s\n", threadIdx.x, j, w[j], "ok");
}
"""


def test_local_arrays_calls_and_printf(capsys: pytest.CaptureFixture[str]) -> None:
    k = gpu.compile(LOCAL_CALLS, "local_calls")
    idx = np.random.default_rng(3).integers(0, 12, 32).astype(np.int32)
    out = gpu.poison(32, np.float32)
    gpu.launch(k, 1, 32, 0, gpu.to_device(idx), out)
    want = []
    for t, j in enumerate(idx.tolist()):
        w = [np.float32(i * 0.5 + t) for i in range(12)]
        s = np.float32(0)
        for i in range(j):
            s = np.float32(s + np.float32(w[i] * np.float32(2.0)))
        want.append(np.float32(w[j] + s))
    assert np.array_equal(out.to_host(), np.array(want, np.float32))
    assert capsys.readouterr().out == f"thread 3: j={idx[3]} w={3 + idx[3] * 0.5:.2f} ok\n"


ASSERT = r"""

extern "C" __global__ void checked(const int* in) { assert(in[threadIdx.x] < 5); }
"""


def test_device_assert_is_a_fault_with_the_condition() -> None:
    k = gpu.compile(ASSERT, "checked")
    with pytest.raises(gpu.KernelFault, match=r"a device-side assert\(\) failed \[CUDA_ERROR_ASSERT\]\. On the "
                                              r"emulator: assert\(in\[threadIdx.x\] < 5\) failed"):
        gpu.launch(k, 1, 32, 0, gpu.to_device(np.arange(32, dtype=np.int32)))


NAMED = r"""
#include "hopper.cuh"
extern "C" __global__ void named(int* out) {
  __shared__ int box[64];
  const int t = threadIdx.x;
  if (t < 64) {                 // producers: fill, then signal barrier 1 without waiting
    box[t] = t * t;
    hopper::named_bar_arrive(1, 128);
  } else {                      // consumers: wait at barrier 1 for all 128, then read
    hopper::named_bar_sync(1, 128);
    out[t - 64] = box[127 - t];
  }
}
"""


def test_named_barriers_arrive_and_sync() -> None:
    k = gpu.compile(NAMED, "named")
    out = gpu.poison(64, np.int32)
    gpu.launch(k, 1, 128, 0, out)
    assert out.to_host().tolist() == [(63 - i) ** 2 for i in range(64)]


def test_named_barrier_that_never_fills_is_a_deadlock() -> None:
    k = gpu.compile(NAMED.replace("named_bar_sync(1, 128)", "named_bar_sync(1, 160)").replace(
        "named_bar_arrive(1, 128)", "named_bar_arrive(1, 160)"), "named")
    with pytest.raises(gpu.KernelDeadlock, match=r"waits at named barrier 1 \(bar.sync\) for 160 threads, but only "
                                                  r"128 ever arrive"):
        gpu.launch(k, 1, 128, 0, gpu.poison(64, np.int32))


DYN = r"""
extern "C" __global__ void big_smem(const float* in, float* out, int n) {
  extern __shared__ float buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[n - 1 - i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[i] + blockIdx.y * 1000 + threadIdx.y;
}
"""


def test_dynamic_shared_memory_above_48k_and_2d_indices() -> None:
    k = gpu.compile(DYN, "big_smem")
    n = 50000
    x = np.arange(n, dtype=np.float32)
    out = gpu.poison(n, np.float32)
    gpu.launch(k, (1, 1), (64, 1), n * 4, gpu.to_device(x), out, np.int32(n))
    assert np.array_equal(out.to_host(), x[::-1])
    with pytest.raises(gpu.LaunchError, match="dynamic shared memory"):
        gpu.launch(k, 1, 64, 240000, gpu.to_device(x), out, np.int32(n))


SPIN = r"""
extern "C" __global__ void spin(volatile int* flag) {
  if (threadIdx.x == 0) while (flag[0] == 0) {}
}
"""


def test_spinning_on_memory_nobody_writes_is_a_deadlock() -> None:
    from helpers.gpu.executor import machine

    k = gpu.compile(SPIN, "spin")
    old = machine.Options.livelock_blocks
    machine.Options.livelock_blocks = 3000
    try:
        with pytest.raises(gpu.KernelDeadlock, match=r"spins forever at line 3 of the CUDA source"):
            gpu.launch(k, 1, 32, 0, gpu.zeros(1, np.int32))
    finally:
        machine.Options.livelock_blocks = old


def test_a_spin_is_caught_within_a_few_thousand_blocks() -> None:
    """With the default options: a warp whose whole state repeats, memory unchanged and nothing in flight, is proved
    to spin after a few thousand blocks (it took 200,000 and about a minute: stall mode first, then the watch), far
    under a step limit of 100,000 warp instructions."""
    from helpers.gpu.executor import executor_options

    k = gpu.compile(SPIN, "spin")
    with executor_options(step_limit=100_000), pytest.raises(gpu.KernelDeadlock, match=r"spins forever"):
        gpu.launch(k, 4, 128, 0, gpu.zeros(1, np.int32))


COUNTING_SPIN = r"""
extern "C" __global__ void count_spin(volatile int* flag, int* out) {
  int i = 0;
  while (flag[0] == 0) ++i;
  out[threadIdx.x] = i;
}
"""
LONG_LOOP = r"""
extern "C" __global__ void long_loop(int* out, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += i ^ threadIdx.x;
  out[threadIdx.x] = s;
}
"""


def test_a_loop_that_never_ends_meets_the_step_limit_as_the_executors_own_limit() -> None:
    """A spin whose registers change (it counts) is no provable deadlock: the step limit, counted in warp
    instructions, stops it, with a sentence that says it is the executor's limit, the same on every machine."""
    from helpers.gpu.executor import executor_options, machine

    k = gpu.compile(COUNTING_SPIN, "count_spin")
    old = machine.Options.livelock_blocks
    machine.Options.livelock_blocks = 3000
    try:
        with executor_options(step_limit=60_000), pytest.raises(gpu.ExecutorLimit) as err:
            gpu.launch(k, 1, 32, 0, gpu.zeros(1, np.int32), gpu.zeros(32, np.int32), timeout=0.001)
    finally:
        machine.Options.livelock_blocks = old
    text = str(err.value)
    assert "without finishing" in text and "The executor's limit is 60,000 warp instructions" in text
    assert "deadlock" not in text.split(":")[0] and not isinstance(err.value, gpu.KernelFault)


def test_a_long_loop_without_stores_is_no_deadlock() -> None:
    """Many blocks without a store or a barrier, registers changing all along: it runs to the end (and the GPU's
    wall-clock ``timeout`` does not decide anything on the executor)."""
    from helpers.gpu.executor import machine

    k = gpu.compile(LONG_LOOP, "long_loop")
    old = machine.Options.livelock_blocks
    machine.Options.livelock_blocks = 500
    try:
        out = gpu.zeros(32, np.int32)
        gpu.launch(k, 1, 32, 0, out, np.int32(4000), timeout=0.001)
    finally:
        machine.Options.livelock_blocks = old
    t = np.arange(32)
    want = np.array([sum(i ^ x for i in range(4000)) for x in t], np.int64).astype(np.int32)
    assert np.array_equal(out.to_host(), want)


def test_the_wall_clock_net_speaks_as_the_executors_limit() -> None:
    from helpers.gpu.executor import executor_options

    k = gpu.compile(LONG_LOOP, "long_loop")
    with executor_options(time_limit=0.05), pytest.raises(gpu.ExecutorLimit, match="the executor's own safety net"):
        gpu.launch(k, 1, 32, 0, gpu.zeros(32, np.int32), np.int32(10**7))


MATRIX = r"""
#include "hopper.cuh"
extern "C" __global__ void matrix_ops(const unsigned short* in, unsigned* regs, unsigned short* out) {
  __shared__ alignas(16) unsigned short a[4][8][8], b[4][8][8];
  const int l = threadIdx.x;
  for (int i = l; i < 256; i += 32) (&a[0][0][0])[i] = in[i];
  __syncwarp();
  unsigned r[4], t[4];
  const unsigned pa = hopper::smem_u32(&a[l / 8][l % 8][0]);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(pa));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(t[0]), "=r"(t[1]), "=r"(t[2]), "=r"(t[3]) : "r"(pa));
  for (int i = 0; i < 4; ++i) { regs[8 * l + i] = r[i]; regs[8 * l + 4 + i] = t[i]; }
  const unsigned pb = hopper::smem_u32(&b[l / 8][l % 8][0]);
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(pb), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]));
  __syncwarp();
  for (int i = l; i < 256; i += 32) out[i] = (&b[0][0][0])[i];
}
"""


def test_ldmatrix_and_stmatrix() -> None:
    k = gpu.compile(MATRIX, "matrix_ops")
    a = np.random.default_rng(4).integers(0, 1 << 16, (4, 8, 8)).astype(np.uint16)
    regs, out = gpu.poison(256, np.uint32), gpu.poison(256, np.uint16)
    gpu.launch(k, 1, 32, 0, gpu.to_device(a), regs, out)
    got = regs.to_host().reshape(32, 8)
    lane = np.arange(32)
    row, col = lane // 4, 2 * (lane % 4)
    for i in range(4):
        want = a[i, row, col].astype(np.uint32) | (a[i, row, col + 1].astype(np.uint32) << 16)
        want_t = a[i, col, row].astype(np.uint32) | (a[i, col + 1, row].astype(np.uint32) << 16)
        assert np.array_equal(got[:, i], want) and np.array_equal(got[:, 4 + i], want_t)
    assert np.array_equal(out.to_host().reshape(4, 8, 8), a.transpose(0, 2, 1))


FLAGS = r"""
extern "C" __global__ void handoff(float* data, unsigned* flag, float* out) {
  // block 1 produces, block 0 spins on an acquire load until the release store says the data is there
  if (blockIdx.x == 1) {
    if (threadIdx.x < 32) data[threadIdx.x] = threadIdx.x * 1.5f;
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(flag), "r"(1u) : "memory");
  } else {
    if (threadIdx.x == 0) {
      unsigned seen = 0;
      while (seen == 0) asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
    }
    __syncthreads();
    if (threadIdx.x < 32) out[threadIdx.x] = data[threadIdx.x] + 1.0f;
  }
}
"""


def test_acquire_release_handoff_between_blocks() -> None:
    k = gpu.compile(FLAGS, "handoff")
    data, flag, out = gpu.zeros(32), gpu.zeros(1, np.uint32), gpu.poison(32, np.float32)
    gpu.launch(k, 2, 64, 0, data, flag, out)
    assert np.array_equal(out.to_host(), np.arange(32, dtype=np.float32) * 1.5 + 1)


WARP_FLAG = r"""
extern "C" __global__ void warp_flag(int* out) {
  __shared__ volatile int flag;
  __shared__ int data;
  if (threadIdx.x == 0) flag = 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    while (flag == 0) {
    }
    out[0] = data;
  } else if (threadIdx.x == 32) {
    data = 42;
    __threadfence_block();
    flag = 1;
  }
}
"""


def test_a_warp_spinning_on_a_flag_lets_the_writer_run() -> None:
    import time

    k = gpu.compile(WARP_FLAG, "warp_flag")
    out = gpu.poison(1, np.int32)
    t0 = time.process_time()
    gpu.launch(k, 1, 64, 0, out)
    assert out.to_host()[0] == 42 and time.process_time() - t0 < 1.0
