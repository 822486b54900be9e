"""Which GPU is here, if any; the one-line 'needs a Hopper GPU' messages; the process-wide context and stream."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from helpers.hopper import parts as _parts

from .errors import GpuContextLost, NoHopperError

#: Datasheet figures of the H100 SXM (every part's: ``helpers.hopper.parts``; the GPU here: ``hardware.this_gpu``).
H100_PEAK_BF16_TFLOPS = _parts.PROFILES["h100-sxm"].peak_bf16_tflops
H100_HBM_TBS = _parts.PROFILES["h100-sxm"].hbm_tbs


@dataclass(frozen=True)
class DeviceInfo:
    """What the course reads off the GPU."""

    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    max_smem_optin: int
    driver_version: tuple[int, int]
    clock_khz: int


def _driver_error_name(err: Any) -> str:
    return getattr(err, "name", str(err))


@lru_cache(maxsize=1)
def _probe() -> tuple[str | None, DeviceInfo | None]:
    """(reason there is no usable Hopper GPU or None, device info or None). Cached per process."""
    if os.environ.get("HELPERS_NO_GPU"):
        return "HELPERS_NO_GPU is set", None
    try:
        from cuda.bindings import driver
    except Exception as e:  # pragma: no cover - the course always installs cuda-bindings
        return f"cuda-bindings cannot be imported ({e})", None
    try:
        (err,) = driver.cuInit(0)
    except Exception:  # libcuda.so.1 missing
        return "no NVIDIA driver (libcuda.so.1 not found)", None
    if err != driver.CUresult.CUDA_SUCCESS:
        if err == driver.CUresult.CUDA_ERROR_NO_DEVICE:
            return "the NVIDIA driver sees no GPU", None
        if err in (driver.CUresult.CUDA_ERROR_NO_DEVICE, driver.CUresult.CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
                   driver.CUresult.CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE):
            return f"the NVIDIA driver does not work with this toolkit ({_driver_error_name(err)})", None
        return f"cuInit failed ({_driver_error_name(err)})", None
    err, ver = driver.cuDriverGetVersion()
    drv = (ver // 1000, (ver % 1000) // 10)
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return "the NVIDIA driver sees no GPU", None
    ordinal = int(os.environ.get("HELPERS_DEVICE", "0"))
    err, dev = driver.cuDeviceGet(ordinal)
    a = driver.CUdevice_attribute

    def attr(x: Any) -> int:
        return int(driver.cuDeviceGetAttribute(x, dev)[1])

    err, raw = driver.cuDeviceGetName(256, dev)
    name = raw.split(b"\0", 1)[0].decode(errors="replace")
    cc = (attr(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), attr(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
    info = DeviceInfo(
        name=name,
        compute_capability=cc,
        sm_count=attr(a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        l2_bytes=attr(a.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
        max_smem_optin=attr(a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        driver_version=drv,
        clock_khz=attr(a.CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
    )
    if cc != (9, 0):
        return f"GPU {ordinal} is an {name} (sm_{cc[0]}{cc[1]}), not an sm_90 Hopper", info
    from .compiler import nvrtc_version

    nv = nvrtc_version()
    if drv[0] < 12 or (nv is not None and drv < (nv[0], 0)):
        return (f"the driver supports CUDA {drv[0]}.{drv[1]}, too old for code compiled by NVRTC "
                f"{nv[0]}.{nv[1]} (needs a CUDA {nv[0]}.x driver)"), info
    return None, info


def hopper_available() -> bool:
    """True when an sm_90 GPU and a recent enough driver are present."""
    return _probe()[0] is None


def no_hopper_reason() -> str | None:
    """Why GPU work cannot run here (one short phrase), or None when it can."""
    return _probe()[0]


def device_info() -> DeviceInfo | None:
    """Facts read off GPU 0 (None without a driver or GPU)."""
    return _probe()[1]


def executor_active() -> bool:
    """True when kernels run on the PTX executor (helpers.gpu.executor) instead of a GPU: there is no usable Hopper GPU
    and ``HELPERS_EXECUTOR`` is not ``off``, or ``HELPERS_EXECUTOR=force`` (tests, comparisons)."""
    mode = os.environ.get("HELPERS_EXECUTOR", "auto").strip().lower()
    if mode == "force":
        return True
    if mode == "off":
        return False
    return no_hopper_reason() is not None


def can_run() -> bool:
    """True when kernels can run here: on a Hopper GPU, or on the emulator (see executor_active)."""
    return hopper_available() or executor_active()


def require_hopper(what: str) -> None:
    """Raise NoHopperError('<what> needs an sm_90 GPU: <reason>') when there is none."""
    reason = no_hopper_reason()
    if reason is not None:
        raise NoHopperError(f"{what} needs an sm_90 (Hopper) GPU: {reason}.")
    if _lost is not None:
        raise GpuContextLost(_lost)


def skip_without_hopper(report_or_kernel: Any = None, checked: str = "", *, timing: bool = False) -> bool:
    """Notebook use: ``if not gpu.skip_without_hopper(k): ...run...``. With a Hopper GPU: False. Without one the
    kernel runs on the emulator (helpers.gpu.executor): print one line (compile summary; "ran on the emulator") and
    return
    False. Cells that time kernels pass ``timing=True``: timings need the H100, so without one print the compile
    summary, why the run is skipped and what was checked, and return True."""
    reason = no_hopper_reason()
    report = getattr(report_or_kernel, "report", report_or_kernel)
    parts = []
    if report is not None and hasattr(report, "summary"):
        parts.append(report.summary())
    if executor_active() and not timing:
        why = "HELPERS_EXECUTOR=force" if reason is None else "no sm_90 GPU"
        parts.append(f"ran on the emulator ({why})")
        print("; ".join(parts))
        return False
    if reason is None:
        return False
    parts.append(f"run skipped: no sm_90 GPU ({reason})")
    if checked:
        parts.append(f"checked: {checked}")
    print("; ".join(parts))
    return True


# ------------------------------------------------------------------------------------------- context & stream
_lost: str | None = None
_ctx: dict[str, Any] = {}


def mark_context_lost(sentence: str) -> None:
    """Remember that a sticky fault broke this process's context; later GPU calls fail fast with this."""
    global _lost
    _lost = (f"an earlier kernel broke this process's GPU context ({sentence}). Restart the notebook's "
             "kernel to use the GPU here again; gpu.run_isolated runs a kernel in a child process so this cannot "
             "happen.")


def context_lost() -> str | None:
    """The sentence explaining why the context is unusable, or None."""
    return _lost


def current() -> dict[str, Any]:
    """Make GPU 0's primary context current; return {'device', 'stream', 'stream_handle'} (created once)."""
    require_hopper("this call")
    if not _ctx:
        from cuda.bindings import driver
        from cuda.core import Device

        dev = Device(int(os.environ.get("HELPERS_DEVICE", "0")))
        dev.set_current()
        stream = dev.create_stream()
        _ctx.update(device=dev, stream=stream, stream_handle=driver.CUstream(int(stream.handle)))
    else:
        _ctx["device"].set_current()
    return _ctx


def check(result: Any, what: str) -> Any:
    """Unpack a cuda.bindings (err, *values) tuple; raise a plain-words error when err is not success."""
    from cuda.bindings import driver

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        from helpers.hopper.faults import describe_error

        raise RuntimeError(f"{what} failed: {describe_error(err)}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)
