"""Turn GPU failures into sentences: CUDA error codes, and the deadlock record hopper.cuh's bounded waits write.

The record lives in pinned host memory mapped into the GPU's address space, so it can still be read after the
kernel's `trap` has made the CUDA context unusable. Its layout matches ``hopper::StuckRecord``.
"""

from __future__ import annotations

import ctypes
from typing import Any

from helpers.hopper.faults import (  # noqa: F401 - the runtime's names for them
    FLAG_WAIT,
    MAGIC,
    RECORD_BYTES,
    STICKY,
    StuckRecord,
    describe_error,
    error_name,
)


class DiagBuffer:
    """One pinned, device-mapped StuckRecord per process."""

    def __init__(self) -> None:
        from cuda.bindings import driver

        from .device import check

        flags = driver.CU_MEMHOSTALLOC_DEVICEMAP | driver.CU_MEMHOSTALLOC_PORTABLE
        self.host = int(check(driver.cuMemHostAlloc(RECORD_BYTES, flags), "cuMemHostAlloc"))
        self.device = int(check(driver.cuMemHostGetDevicePointer(self.host, 0), "cuMemHostGetDevicePointer"))
        self.clear()

    def clear(self) -> None:
        ctypes.memset(self.host, 0, RECORD_BYTES)

    def read(self) -> StuckRecord | None:
        return StuckRecord.from_bytes(ctypes.string_at(self.host, RECORD_BYTES))


_buffer: DiagBuffer | None = None
last_attach_error: str | None = None


def buffer() -> DiagBuffer:
    """The process's diagnostics record (allocated on first use; needs a GPU)."""
    global _buffer
    if _buffer is None:
        _buffer = DiagBuffer()
    return _buffer


def attach(library: Any) -> bool:
    """Point a loaded module's ``hopper_diag_addr`` at the record; False when the module has none."""
    from cuda.bindings import driver

    global last_attach_error
    err, dptr, size = driver.cuLibraryGetGlobal(library, b"hopper_diag_addr")
    if err != driver.CUresult.CUDA_SUCCESS or size != 8:
        last_attach_error = f"cuLibraryGetGlobal: {error_name(err)}, size {size}"
        return False
    value = ctypes.c_uint64(buffer().device)
    (err,) = driver.cuMemcpyHtoD(dptr, ctypes.addressof(value), 8)
    last_attach_error = None if err == driver.CUresult.CUDA_SUCCESS else f"cuMemcpyHtoD: {error_name(err)}"
    return last_attach_error is None


def stuck_sentence() -> str | None:
    """The deadlock sentence if a bounded wait gave up since the record was cleared."""
    if _buffer is None:
        return None
    rec = _buffer.read()
    return rec.sentence() if rec else None
