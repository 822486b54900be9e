"""The SM clock while something runs: the H100 is power-bound, so every speed the course reports carries it.

Reads NVML (libnvidia-ml.so.1, installed with the driver) through ctypes in a background thread:
``with sm_clock() as clk: ...run...`` then ``clk.summary()`` → "SM clock 1755 MHz (1695–1980, 40 samples)".
Without NVML the sampler records nothing and says so.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import threading
import time
from dataclasses import dataclass, field

__all__ = ["ClockSamples", "sm_clock", "current_sm_clock_mhz"]

_NVML_CLOCK_SM = 1
_nvml: ctypes.CDLL | None = None
_handle = ctypes.c_void_p()


def _init() -> bool:
    global _nvml
    if _nvml is not None:
        return True
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        if lib.nvmlInit_v2() != 0:
            return False
        index = int(os.environ.get("HELPERS_DEVICE", "0"))
        if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(_handle)) != 0:
            return False
    except OSError:
        return False
    _nvml = lib
    return True


def current_sm_clock_mhz() -> int | None:
    """The SM clock now, in MHz (None without NVML)."""
    if not _init():
        return None
    mhz = ctypes.c_uint()
    if _nvml.nvmlDeviceGetClockInfo(_handle, _NVML_CLOCK_SM, ctypes.byref(mhz)) != 0:  # type: ignore[union-attr]
        return None
    return int(mhz.value)


@dataclass
class ClockSamples:
    """SM clock samples (MHz) taken while a block of code ran."""

    mhz: list[int] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.mhz) if self.mhz else None

    def summary(self) -> str:
        if not self.mhz:
            return "SM clock not available (no NVML)"
        return f"SM clock {self.median:.0f} MHz ({min(self.mhz)}–{max(self.mhz)}, {len(self.mhz)} samples)"


class sm_clock:  # noqa: N801 - used as a context manager, reads like a phrase
    """Sample the SM clock every `period` seconds while the with-block runs."""

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.samples = ClockSamples()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            v = current_sm_clock_mhz()
            if v is not None:
                self.samples.mhz.append(v)
            time.sleep(self.period)

    def __enter__(self) -> ClockSamples:
        if _init():
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self.samples

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
