"""helpers.gpu without a Hopper GPU: arrays, tensor maps, launches, prepare, run_isolated and the notices all go
through the executor, with the GPU path's arguments, results and failure sentences; timings refuse; and
HELPERS_EXECUTOR=off restores the one-line refusals."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import gpu
from helpers.gpu import examples


@pytest.fixture(scope="module")
def vadd() -> gpu.Kernel:
    return gpu.compile(examples.VECTOR_ADD, "vadd")


def test_arrays_live_in_emulated_memory() -> None:
    x = np.arange(10, dtype=np.float32)
    d = gpu.to_device(x)
    assert d.emulated and "emulated" in repr(d) and d.ptr % 256 == 0
    assert np.array_equal(d.to_host(), x) and np.array_equal(gpu.to_host(d), x)
    assert (gpu.zeros((3, 4), np.int32).to_host() == 0).all()
    assert np.isnan(gpu.poison(5, np.float32).to_host()).all()
    assert (gpu.poison(5, np.int32).to_host() == -1).all()
    r = gpu.random((4, 8), gpu.bfloat16, seed=3)
    assert np.array_equal(r.to_host(), gpu.random_host((4, 8), gpu.bfloat16, seed=3))
    assert gpu.empty(7, np.uint8).nbytes == 7


def test_tensor_maps_are_the_emulators(vadd: gpu.Kernel) -> None:
    a = gpu.to_device(np.zeros((128, 64), np.float32))
    for via in ("driver", "core"):
        t = gpu.tensor_map(a, (64, 32), swizzle=128, via=via)
        assert type(t).__name__ == "EmuTensorMap" and t.tmap.box_dim == (32, 64)
        assert t.tmap.global_address == a.ptr and len(t.param_bytes()) == 128
    t = gpu.encode_tiled(np.float32, a.ptr, [64, 128], [256], [32, 64], swizzle=128)
    assert t.tmap.global_dim == (64, 128)
    with pytest.raises(gpu.LaunchError, match="at most 128 bytes"):
        gpu.tensor_map_2d(a, 64, 64)


def test_launch_and_prepare(vadd: gpu.Kernel) -> None:
    n = 300
    a, b = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    da, db, dc = gpu.to_device(a), gpu.to_device(b), gpu.poison(n, np.float32)
    run = gpu.prepare(vadd, 3, 128, 0, da, db, dc, np.int32(n), np.float32(0.5))
    run()
    gpu.wait()
    assert np.array_equal(dc.to_host(), a + 0.5)


@pytest.mark.parametrize("args, match", [
    ((5,), "argument 0 is a plain Python int"),
    ((np.zeros(3, np.float32),), "argument 0 is a numpy array in host memory"),
    ((1.5,), "argument 0 is a plain Python float"),
])
def test_argument_mistakes_get_the_gpu_sentences(vadd: gpu.Kernel, args: tuple, match: str) -> None:
    d = gpu.zeros(4)
    full = list(args) + [d, d, np.int32(4), np.float32(1)]
    with pytest.raises(gpu.LaunchError, match=match):
        gpu.launch(vadd, 1, 32, 0, *full)


def test_argument_count_and_width(vadd: gpu.Kernel) -> None:
    d = gpu.zeros(4)
    with pytest.raises(gpu.LaunchError, match="kernel vadd takes 5 arguments, the launch passes 4"):
        gpu.launch(vadd, 1, 32, 0, d, d, d, np.int32(4))
    with pytest.raises(gpu.LaunchError, match="argument 3 of kernel vadd is 4 bytes wide but the value passed is 8"):
        gpu.launch(vadd, 1, 32, 0, d, d, d, np.int64(4), np.float32(1))
    with pytest.raises(gpu.LaunchError, match="at most 1024 threads"):
        gpu.launch(vadd, 1, 2048, 0, d, d, d, np.int32(4), np.float32(1))


def test_skip_without_hopper_runs_on_the_emulator(vadd: gpu.Kernel, capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu.skip_without_hopper(vadd, checked="x") is False
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("compiled for sm_90a: ") and "; ran on the emulator (" in out


def test_timings_need_the_h100(vadd: gpu.Kernel) -> None:
    with pytest.raises(gpu.NoHopperError, match="needs"):
        gpu.time_kernel(lambda: None)
    with pytest.raises(gpu.NoHopperError, match="needs"):
        gpu.gemm_benchmark(lambda a, b, c: None, 64, 64, 64)


def test_timing_cells_skip(vadd: gpu.Kernel, capsys: pytest.CaptureFixture[str]) -> None:
    if gpu.hopper_available():
        pytest.skip("this machine has an H100: timing cells run")
    assert gpu.skip_without_hopper(vadd, checked="the benchmark", timing=True) is True
    assert "run skipped: no sm_90 GPU" in capsys.readouterr().out


def test_run_isolated_in_process(vadd: gpu.Kernel) -> None:
    n = 200
    a, b = np.arange(n, dtype=np.float32), np.full(n, 2, np.float32)
    res = gpu.run_isolated(vadd, 2, 128, 0, a, b, np.zeros(n, np.float32), np.int32(n), np.float32(3), timeout=20)
    assert np.array_equal(res.arrays[2], a + 6) and np.array_equal(res.arrays[0], a)
    k = gpu.compile(examples.OUT_OF_BOUNDS, "oob")
    with pytest.raises(gpu.KernelFault) as e:
        gpu.run_isolated(k, 1, 32, 0, np.zeros(4, np.float32), np.int64(1 << 40), timeout=20)
    assert "[CUDA_ERROR_ILLEGAL_ADDRESS]" in str(e.value) and str(e.value).endswith("This notebook is unaffected.")


def test_run_isolated_tensor_map_arg() -> None:
    from helpers.gpu.isolate import TensorMapArg

    src = r'''
#include "hopper.cuh"
extern "C" __global__ void one_tile(const __grid_constant__ CUtensorMap tmap, unsigned short* out) {
  __shared__ alignas(1024) unsigned short tile[64 * 64];
  __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x == 0) { hopper::mbar_init(&bar, 1); hopper::mbar_fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbar_arrive_expect_tx(&bar, sizeof(tile));
    hopper::tma_load_2d(tile, &tmap, &bar, 64, 0);
  }
  HOPPER_WAIT1(bar, 0);
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) out[i] = tile[i];
}'''
    k = gpu.compile(src, "one_tile")
    x = np.arange(64 * 128, dtype=np.uint16).reshape(64, 128)
    res = gpu.run_isolated(k, 1, 128, 0, TensorMapArg(x, (64, 64), swizzle=0), np.zeros(64 * 64, np.uint16))
    assert np.array_equal(res.arrays[0].reshape(64, 64), x[:, 64:])


def test_executor_off_restores_the_refusal(monkeypatch: pytest.MonkeyPatch, vadd: gpu.Kernel) -> None:
    if gpu.hopper_available():
        pytest.skip("this machine has an H100")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")
    assert not gpu.executor_active()
    with pytest.raises(gpu.NoHopperError):
        gpu.to_device(np.zeros(3, np.float32))
    monkeypatch.setenv("HELPERS_EXECUTOR", "auto")
    assert gpu.executor_active()


def test_unsupported_instruction_names_it_and_the_line() -> None:
    src = r'''
extern "C" __global__ void fast_rcp(double* x) {
  double r;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(x[threadIdx.x]));
  x[threadIdx.x] = r;
}'''
    k = gpu.compile(src, "fast_rcp")
    with pytest.raises(gpu.LaunchError) as e:
        gpu.launch(k, 1, 32, 0, gpu.zeros(32, np.float64))
    msg = str(e.value)
    assert "cannot run on the executor: the executor does not support `rcp.approx.ftz.f64`" in msg
    assert "a limit of the executor, not a mistake in the kernel" in msg and isinstance(e.value, gpu.ExecutorLimit)
    assert "is not emulated" in msg and "at line 4 of the CUDA source" in msg and "PTX line" in msg


def test_trace_records_per_warp_events() -> None:
    from kernels import LAB2_GEMM

    from helpers.gpu.executor.machine import Options
    from helpers.gpu.executor.runtime import run_kernel

    k = gpu.compile(LAB2_GEMM, "lab2_gemm")
    a = gpu.to_device(gpu.random_host((64, 128), gpu.bfloat16, seed=1))
    b = gpu.to_device(gpu.random_host((64, 128), gpu.bfloat16, seed=2))
    info = run_kernel(k.ptx, "lab2_gemm", (1, 1, 1), (128, 1, 1), 0,
                      [gpu.tensor_map_2d(a, 64, 64), gpu.tensor_map_2d(b, 64, 64), gpu.poison((64, 64)),
                       np.int32(64), np.int32(64), np.int32(128)], options=Options(trace=True))
    kinds = {e.kind for e in info.machine.trace}
    assert {"arrive_expect_tx", "arrive", "wait", "tma_issue", "tma_landed", "phase_complete"} <= kinds
    full0 = [e for e in info.machine.trace if e.kind == "phase_complete" and e.barrier == "full[0]"]
    assert [e.phase for e in full0] == [0] and all(e.cta == (0, 0, 0) for e in info.machine.trace)
    times = [e.time for e in info.machine.trace]
    assert times == sorted(times) and times[-1] > times[0]  # one CTA: its clock only moves on
