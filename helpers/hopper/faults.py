"""How a Hopper GPU reports a kernel that went wrong, in plain words: the driver's error names, the deadlock record
that ``hopper.cuh``'s bounded waits write, and a launch argument no kernel can take.

Both backends speak these sentences (the H100 through ``helpers.gpu``, and the PTX executor), so a student reads the
same words wherever the kernel ran. Pure Python: imports nothing of the course.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

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


def bad_argument(i: int, a: Any) -> str:
    """Why a launch argument cannot be passed to a kernel, in plain words (the same on the GPU and the executor)."""
    if isinstance(a, bool | int):
        return (f"argument {i} is a plain Python int ({a}): say which C type the kernel expects, e.g. np.int32({a}) "
                "for an int parameter, np.uint32 for unsigned, np.uint64 for a size_t")
    if isinstance(a, float):
        return f"argument {i} is a plain Python float ({a}): pass np.float32({a}) for a float parameter"
    if isinstance(a, np.ndarray):
        return (f"argument {i} is a numpy array in host memory: copy it to the GPU with gpu.to_device(...) and pass "
                "the device array")
    return f"argument {i} has a type the launcher cannot pass to a kernel: {type(a).__name__}"
