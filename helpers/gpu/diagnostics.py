"""Turn GPU failures into sentences: CUDA error codes, and the deadlock record hopper.cuh's bounded waits write.

The record lives in pinned host memory mapped into the GPU's address space, so it can still be read after the
kernel's `trap` has made the CUDA context unusable. Its layout matches ``hopper::StuckRecord``.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Any

MAGIC = 0x48505752
RECORD_BYTES = 112
FLAG_WAIT = 0xFFFFFFFF  # bar_smem of a flag_wait_geq record (no barrier)
_FMT = "<IIiI3IIIIq64s"  # magic parity index bar_smem block[3] thread cluster_rank pad cycles label

_SENTENCES = {
    "CUDA_ERROR_ILLEGAL_ADDRESS": "the kernel read or wrote memory outside every allocation (illegal address): "
                                  "an index past the end of an array, or a bad pointer",
    "CUDA_ERROR_MISALIGNED_ADDRESS": "the kernel accessed memory at a misaligned address (e.g. a 16-byte vector "
                                     "load from an address that is not a multiple of 16)",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE": "the kernel used an address in the wrong memory space (e.g. a shared-memory "
                                        "instruction on a global pointer)",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": "the kernel executed an illegal instruction (or a trap)",
    "CUDA_ERROR_HARDWARE_STACK_ERROR": "the kernel overflowed its call stack (deep recursion or large local arrays)",
    "CUDA_ERROR_INVALID_PC": "the kernel jumped to an invalid program counter",
    "CUDA_ERROR_LAUNCH_FAILED": "the kernel failed while running (an exception on the GPU, often a trap)",
    "CUDA_ERROR_ASSERT": "a device-side assert() failed",
    "CUDA_ERROR_LAUNCH_TIMEOUT": "the kernel ran past the display watchdog's time limit",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "the launch asked for more resources than a block can have (too many "
                                          "registers × threads, or too much shared memory)",
    "CUDA_ERROR_INVALID_VALUE": "an argument of the call was invalid",
    "CUDA_ERROR_OUT_OF_MEMORY": "the GPU ran out of memory",
    "CUDA_ERROR_TENSOR_MEMORY_LEAK": "the kernel exited without freeing tensor memory",
    "CUDA_ERROR_CLUSTER_OUT_OF_RESOURCES": "no cluster of this size fits on the GPU with these resources",
}

#: Errors after which the context can no longer be used (the process must go, or the context be reset).
STICKY = {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE",
          "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_INVALID_PC",
          "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT"}


def error_name(err: Any) -> str:
    return getattr(err, "name", str(err))


def describe_error(err: Any) -> str:
    """A CUDA driver error in plain words, with its code name in brackets."""
    name = error_name(err)
    return f"{_SENTENCES.get(name, 'CUDA reported an error')} [{name}]"


@dataclass
class StuckRecord:
    """What the first thread to give up waiting wrote."""

    parity: int
    index: int
    bar_smem: int
    block: tuple[int, int, int]
    thread: int
    cluster_rank: int
    cycles: int
    label: str

    @classmethod
    def from_bytes(cls, raw: bytes) -> StuckRecord | None:
        magic, parity, index, bar, bx, by, bz, thread, rank, _pad, cycles, label = struct.unpack(_FMT, raw)
        if magic != MAGIC:
            return None
        return cls(parity, index, bar, (bx, by, bz), thread, rank, cycles,
                   label.split(b"\0", 1)[0].decode(errors="replace"))

    def to_bytes(self) -> bytes:
        return struct.pack(_FMT, MAGIC, self.parity, self.index, self.bar_smem, *self.block, self.thread,
                           self.cluster_rank, 0, self.cycles, self.label.encode()[:63])

    def sentence(self) -> str:
        """e.g. 'deadlock: block (3,0) warp 4 waited on full[2] for parity 1 (gave up after 2.0e9 cycles)'."""
        bx, by, bz = self.block
        block = f"({bx},{by},{bz})" if bz else f"({bx},{by})"
        if self.label and self.index >= 0:
            what = f"{self.label}[{self.index}]"
        elif self.label:
            what = self.label
        else:
            what = f"the mbarrier at shared address {self.bar_smem:#x}"
        rank = f" (cluster rank {self.cluster_rank})" if self.cluster_rank else ""
        if self.bar_smem == FLAG_WAIT:
            flag = what if self.label else "a global-memory flag"
            return (f"deadlock: block {block}{rank} warp {self.thread // 32} waited for {flag} to reach "
                    f"{self.parity} (thread {self.thread}; gave up after {self.cycles:.1e} cycles). No block ever "
                    "released it that far: check that every block it waits for is resident and releases the flag "
                    "after its data, and that the value waited for counts the writers in order.")
        return (f"deadlock: block {block}{rank} warp {self.thread // 32} waited on {what} for parity {self.parity} "
                f"(thread {self.thread}; gave up after {self.cycles:.1e} cycles). That phase never completed: check "
                "the barrier's arrival count, the bytes expected with expect_tx, and the parity you wait for.")


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
