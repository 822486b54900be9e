"""The SM clock and the power draw while something runs: the H100 is power-bound, so every speed the course
reports carries its clock.

Reads NVML (libnvidia-ml.so.1, installed with the driver) through ctypes in a background thread:
``with sm_clock() as clk: ...run...`` then ``clk.summary()`` → "SM clock 1755 MHz (1695–1980, 40 samples)".
:class:`Telemetry` samples clock and power together and labels each sample with the side of a comparison that
was running (``with tel.side("kernel"): ...``), so an interleaved measurement can say what each side ran at.
Without NVML the samplers record nothing and say so.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["ClockSamples", "sm_clock", "current_sm_clock_mhz", "current_power_watts", "power_limit_watts",
           "max_sm_clock_mhz", "Telemetry", "SideTelemetry"]

_NVML_CLOCK_SM = 1
_NVML_FI_DEV_POWER_INSTANT = 186  # nvmlFieldValue_t field id: power now, not NVML's default 1 s average


class _FieldValue(ctypes.Structure):
    """nvmlFieldValue_t (nvml.h): id, scope, timestamp, latency, value type, return code, an 8-byte value."""

    _fields_ = [("field_id", ctypes.c_uint), ("scope_id", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latency_usec", ctypes.c_longlong), ("value_type", ctypes.c_int), ("nvml_return", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]
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


def max_sm_clock_mhz() -> int | None:
    """The SM clock's maximum, in MHz (None without NVML)."""
    if not _init():
        return None
    mhz = ctypes.c_uint()
    if _nvml.nvmlDeviceGetMaxClockInfo(_handle, _NVML_CLOCK_SM, ctypes.byref(mhz)) != 0:  # type: ignore[union-attr]
        return None
    return int(mhz.value)


def power_limit_watts() -> float | None:
    """The power limit the board enforces now, in watts (None without NVML)."""
    if not _init():
        return None
    mw = ctypes.c_uint()
    if _nvml.nvmlDeviceGetEnforcedPowerLimit(_handle, ctypes.byref(mw)) != 0:  # type: ignore[union-attr]
        return None
    return mw.value / 1000.0


#: where the power figures came from: "instant" (NVML_FI_DEV_POWER_INSTANT) or "1 s average"
#: (nvmlDeviceGetPowerUsage, which averages over a second on Hopper); None until read
power_source: str | None = None


def current_power_watts() -> float | None:
    """The board's power draw now, in watts: NVML's instantaneous field where the driver has it, else its 1-second
    average (:data:`power_source` says which). None without NVML."""
    global power_source
    if not _init():
        return None
    fv = _FieldValue(field_id=_NVML_FI_DEV_POWER_INSTANT)
    if (power_source in (None, "instant") and _nvml.nvmlDeviceGetFieldValues(_handle, 1, ctypes.byref(fv)) == 0  # type: ignore[union-attr]
            and fv.nvml_return == 0):
        power_source = "instant"
        return (fv.value & 0xFFFFFFFF) / 1000.0 if fv.value_type in (1, 2) else fv.value / 1000.0
    mw = ctypes.c_uint()
    if _nvml.nvmlDeviceGetPowerUsage(_handle, ctypes.byref(mw)) != 0:  # type: ignore[union-attr]
        return None
    power_source = "1 s average"
    return mw.value / 1000.0


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


Reading = Callable[[], tuple[int | None, float | None]]


def _nvml_reading() -> tuple[int | None, float | None]:
    return current_sm_clock_mhz(), current_power_watts()


@dataclass
class SideTelemetry:
    """The SM clock (MHz) and power (W) samples taken while one side of a comparison ran."""

    mhz: list[int] = field(default_factory=list)
    watts: list[float] = field(default_factory=list)

    @property
    def mhz_median(self) -> float | None:
        return statistics.median(self.mhz) if self.mhz else None

    @property
    def watts_median(self) -> float | None:
        return statistics.median(self.watts) if self.watts else None

    def summary(self) -> str:
        if not self.mhz and not self.watts:
            return "clock and power not available (no NVML)"
        clk = f"{self.mhz_median:.0f} MHz ({min(self.mhz)}–{max(self.mhz)})" if self.mhz else "clock ?"
        pw = f"{self.watts_median:.0f} W" if self.watts else "power ?"
        return f"{clk}, {pw}, {max(len(self.mhz), len(self.watts))} samples"


class Telemetry:
    """SM clock and power sampled every `period` seconds while the with-block runs; samples taken inside
    ``with tel.side(label):`` count for that label (one more is read on entering and on leaving the side, so a side
    shorter than the period still has two). ``read`` replaces NVML (tests pass a fake)."""

    def __init__(self, period: float = 0.005, read: Reading | None = None) -> None:
        self.period = period
        self._read = read or _nvml_reading
        self._available = read is not None or _init()
        self.sides: dict[str, SideTelemetry] = {}
        self._label: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self._available

    def _sample(self) -> None:
        mhz, watts = self._read()
        with self._lock:
            if self._label is None:
                return
            side = self.sides.setdefault(self._label, SideTelemetry())
            if mhz is not None:
                side.mhz.append(int(mhz))
            if watts is not None:
                side.watts.append(float(watts))

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    @contextmanager
    def side(self, label: str) -> Iterator[SideTelemetry]:
        """Label the samples taken while the block runs (the block should wait for its GPU work)."""
        with self._lock:
            self._label = label
            self.sides.setdefault(label, SideTelemetry())
        if self._available:
            self._sample()
        try:
            yield self.sides[label]
        finally:
            if self._available:
                self._sample()
            with self._lock:
                self._label = None

    def __enter__(self) -> Telemetry:
        if self._available:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
