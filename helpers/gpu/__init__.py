"""The runtime: compile a kernel (NVRTC, with a report), device arrays, tensor maps, launches, timing against
cuBLAS, the roofline, crash-proof child-process runs and the GPU queue. See docs/gpu.md.

A launch runs on one of two backends behind the same calls (``launch``, ``prepare``, ``run_isolated``): the H100
through cuda-python, or, with no sm_90 GPU (or ``HELPERS_EXECUTOR=force``), the PTX executor in
``helpers.gpu.executor``, which runs the same PTX on the CPU. ``run_on_executor`` asks for the executor by name
(hazard checker, timelines). The executor's own failures (``KernelOutcome``) become this package's errors
(``KernelFault``, ``KernelDeadlock``, ``HazardError``) in one place, ``launch.EmuLauncher``.

May import: ``helpers.hopper`` and its own modules (the executor among them). Never ``helpers.course``. The executor
imports only ``helpers.hopper`` and itself.

Importing this package is cheap and works on any machine: the CUDA libraries load on first use, and every call
that needs a Hopper GPU says so in one line when there is none.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import Any

from .errors import (
    CompileError,
    ExecutorLimit,
    GpuContextLost,
    GpuError,
    HazardError,
    KernelDeadlock,
    KernelFault,
    LaunchError,
    NoHopperError,
)

_EXPORTS = {
    "compiler": ("compile", "Kernel", "CompileReport", "nvrtc_version", "include_dirs", "cache_dir", "INCLUDE_DIR",
                 "read_cubin", "find_kernel_names"),
    "device": ("hopper_available", "no_hopper_reason", "skip_without_hopper", "require_hopper", "device_info",
               "executor_active", "can_run",
               "DeviceInfo", "context_lost", "H100_PEAK_BF16_TFLOPS", "H100_HBM_TBS"),
    "arrays": ("DeviceArray", "to_device", "to_host", "empty", "zeros", "poison", "random", "random_host",
               "bfloat16"),
    "tensormaps": ("encode_tiled", "tensor_map", "tensor_map_2d"),
    "launch": ("launch", "prepare", "Launcher", "wait"),
    "timing": ("time_kernel", "Timing", "gemm_benchmark", "GemmBenchmark", "check_gemm", "interleave", "Interleaved",
               "interleave_kernels", "time_runs"),
    "cublas": ("cublas_gemm", "cublas_version", "gemm_launcher", "CublasUnavailable"),
    "roofline": ("roofline_figure", "RooflinePoint", "gemm_point", "ridge_point", "attainable_tflops"),
    "isolate": ("run_isolated", "launch_isolated", "TensorMapArg", "IsolatedResult", "run_on_executor"),
    "diagnostics": ("StuckRecord", "describe_error"),
    "occupancy": ("max_active_clusters", "persistent_grid"),
    "clocks": ("sm_clock", "ClockSamples", "current_sm_clock_mhz", "current_power_watts", "Telemetry"),
    "gemm": ("matmul",),
    "hardware": ("this_gpu", "use_part", "where_name"),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}

__all__ = sorted(_WHERE) + ["CompileError", "ExecutorLimit", "GpuContextLost", "GpuError", "HazardError",
                            "KernelDeadlock", "KernelFault", "LaunchError", "NoHopperError"]


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'helpers.gpu' has no attribute {name!r}")
    value = getattr(import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """``gpu.launch`` is a function of the submodule ``helpers.gpu.launch``; importing that submodule makes it an
    attribute of the package, which would hide the function. Give the function back in that case."""

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if isinstance(value, types.ModuleType) and _WHERE.get(name) == name:
            value = getattr(value, name)
            globals()[name] = value
        return value


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    return __all__
