"""The emulated device's memory: a flat 64-bit address space of numpy byte buffers, and the address windows.

* Global memory: every allocation (a course ``DeviceArray`` on a machine without a GPU, a module's ``.global``
  variables, the kernel's parameter block, the deadlock record) is a uint8 buffer at a fake device address,
  256-byte aligned with unmapped gaps between allocations, so an index past the end faults like on the GPU.
  Addresses are never reused: an access to freed memory faults, and the sentence names what was freed there (on
  the H100 the next allocation may take that memory, and the access reads or overwrites its data).
* Shared memory: one buffer per CTA; a shared address is ``(cluster rank << 24) | offset`` (rank 0 outside
  clusters), the first 1024 bytes reserved as on sm_90, static variables from 0x400, dynamic shared memory after.
* Generic addresses: global addresses are themselves; shared and local memory appear through windows
  (``cvta``) at :data:`SHARED_WINDOW` and :data:`LOCAL_WINDOW`.

Accesses are vectorised over the threads of a group; a fault raises :class:`MemoryFault` naming the CUDA error the
GPU would report, the address and what it missed.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MemoryFault", "Allocation", "DeviceMemory", "device_memory", "GLOBAL_BASE", "SHARED_WINDOW", "LOCAL_WINDOW",
    "SMEM_RESERVED", "SMEM_PER_SM", "RANK_SHIFT", "OFFSET_MASK",
]

GLOBAL_BASE = 0x7000_0000_0000
LOCAL_WINDOW = 0x7FFE_0000_0000
SHARED_WINDOW = 0x7FFF_0000_0000
WINDOW_SIZE = 1 << 32
SMEM_RESERVED = 1024  # sm_90 keeps the first 1 KB of a block's shared memory for the system
SMEM_PER_SM = 228 * 1024
RANK_SHIFT = 24
OFFSET_MASK = (1 << RANK_SHIFT) - 1
_GAP = 1 << 16
_FREED_KEPT = 4096  # freed allocations remembered for the sentences


class MemoryFault(Exception):
    """An access the GPU would refuse: ``error`` is the CUDA error name, ``detail`` says what happened."""

    def __init__(self, error: str, detail: str):
        super().__init__(detail)
        self.error = error
        self.detail = detail


@dataclass(eq=False)
class Allocation:
    """A buffer in the emulated global address space."""

    base: int
    size: int
    data: np.ndarray  # uint8, length rounded up to 16
    label: str = ""
    readonly: bool = False
    freed: bool = False

    @property
    def end(self) -> int:
        return self.base + self.size

    def view(self, dtype: np.dtype) -> np.ndarray:
        return self.data.view(dtype)


class DeviceMemory:
    """The flat address space. ``alloc`` / ``free``, vectorised ``load`` / ``store`` with fault checks."""

    def __init__(self) -> None:
        self._allocs: list[Allocation] = []
        self._bases: list[int] = []
        self._next = GLOBAL_BASE
        self._freed: deque[tuple[int, int, str]] = deque(maxlen=_FREED_KEPT)

    # ------------------------------------------------------------------ allocation
    def alloc(self, nbytes: int, label: str = "", readonly: bool = False) -> Allocation:
        nbytes = int(nbytes)
        size16 = max(-(-nbytes // 16) * 16, 16)
        base = self._next
        self._next = base + -(-size16 // 256) * 256 + _GAP
        a = Allocation(base, nbytes, np.zeros(size16, np.uint8), label, readonly)
        i = bisect.bisect(self._bases, base)
        self._bases.insert(i, base)
        self._allocs.insert(i, a)
        return a

    def free(self, a: Allocation) -> None:
        i = bisect.bisect_left(self._bases, a.base)
        if i < len(self._allocs) and self._allocs[i] is a:
            del self._allocs[i]
            del self._bases[i]
            a.freed = True
            self._freed.append((a.base, a.size, a.label))

    def freed_at(self, addr: int) -> str | None:
        """Words for the freed allocation that held byte ``addr`` (addresses are never reused), or None."""
        addr = int(addr)
        for base, size, label in reversed(self._freed):
            if base <= addr < base + max(size, 1):
                return f"byte {addr - base} of {label or 'an allocation'} ({size} bytes at {base:#x}), freed"
        return None

    def find(self, addr: int) -> Allocation | None:
        """The allocation holding byte ``addr``, or None."""
        i = bisect.bisect(self._bases, int(addr)) - 1
        if i >= 0:
            a = self._allocs[i]
            if a.base <= addr < a.base + max(a.size, 1):
                return a
        return None

    def describe(self, addr: int) -> str:
        """Where an address is relative to the allocations, in words."""
        a = self.find(addr)
        if a is not None:
            return f"byte {addr - a.base} of {a.label or 'an allocation'} ({a.size} bytes)"
        gone = self.freed_at(addr)
        if gone is not None:
            return f"{gone} before this access"
        i = bisect.bisect(self._bases, int(addr)) - 1
        if i >= 0:
            a = self._allocs[i]
            if addr - a.end < (1 << 24):
                return (f"{addr - a.end} bytes past the end of {a.label or 'an allocation'} ({a.size} bytes at "
                        f"{a.base:#x})")
        return "not in or near any allocation"

    # ------------------------------------------------------------------ access
    def locate(self, addr: np.ndarray, width: int, write: bool) -> tuple[Allocation, np.ndarray] | None:
        """(allocation, byte offsets) when every address of the group lies in one allocation (a store into
        read-only memory raises); None otherwise."""
        return self._locate(addr, width, write)

    def _locate(self, addr: np.ndarray, width: int, write: bool) -> tuple[Allocation, np.ndarray] | None:
        """(allocation, offsets) when every address of the group lies in one allocation."""
        lo = int(np.minimum.reduce(addr, axis=None))
        a = self.find(lo)
        if a is None:
            return None
        hi = int(np.maximum.reduce(addr, axis=None))
        if hi + width > a.end:
            return None
        if write and a.readonly:
            raise MemoryFault("CUDA_ERROR_ILLEGAL_ADDRESS", f"a store to read-only memory ({a.label}) at {lo:#x}")
        return a, (addr - np.uint64(a.base)).astype(np.int64)

    def _fault(self, addr: np.ndarray, width: int, write: bool) -> MemoryFault:
        for x in np.asarray(addr, np.uint64).tolist():
            a = self.find(x)
            if a is None or x + width > a.end:
                verb = "wrote" if write else "read"
                return MemoryFault("CUDA_ERROR_ILLEGAL_ADDRESS",
                                   f"{verb} {width} bytes at {x:#x}, {self.describe(x)}")
        return MemoryFault("CUDA_ERROR_ILLEGAL_ADDRESS", "an access outside every allocation")

    def load(self, addr: np.ndarray, dtype: np.dtype, nvec: int = 1) -> np.ndarray:
        """Read ``nvec`` elements of ``dtype`` at each address; shape (n,) or (n, nvec)."""
        dtype = np.dtype(dtype)
        width = dtype.itemsize * nvec
        hit = self._locate(addr, width, False)
        if hit is not None:
            a, off = hit
            return gather(a.data, off, dtype, nvec)
        return self._multi(addr, dtype, nvec, None)

    def store(self, addr: np.ndarray, value: np.ndarray, dtype: np.dtype, nvec: int = 1) -> None:
        """Write ``value`` (shape (n,) or (n, nvec)) at each address, in thread order (the last thread wins)."""
        dtype = np.dtype(dtype)
        width = dtype.itemsize * nvec
        hit = self._locate(addr, width, True)
        if hit is not None:
            a, off = hit
            scatter(a.data, off, value, dtype, nvec)
            return
        self._multi(addr, dtype, nvec, value)

    def _multi(self, addr: np.ndarray, dtype: np.dtype, nvec: int, value: np.ndarray | None) -> np.ndarray | None:
        width = dtype.itemsize * nvec
        addr = np.asarray(addr, np.uint64)
        allocs = list(self._allocs)  # one snapshot: a finalizer may free an allocation while this runs
        bases = np.array([x.base for x in allocs], np.uint64) if allocs else np.zeros(0, np.uint64)
        idx = np.searchsorted(bases, addr, side="right").astype(np.int64) - 1
        out = np.empty((addr.size, nvec) if nvec > 1 else addr.size, dtype) if value is None else None
        for k in np.unique(idx).tolist():
            sel = idx == k
            if k < 0:
                raise self._fault(addr[sel], width, value is not None)
            a = allocs[k]
            if int(addr[sel].max()) + width > a.end:
                raise self._fault(addr[sel], width, value is not None)
            off = (addr[sel] - np.uint64(a.base)).astype(np.int64)
            if value is None:
                out[sel] = gather(a.data, off, dtype, nvec)
            else:
                if a.readonly:
                    raise MemoryFault("CUDA_ERROR_ILLEGAL_ADDRESS", f"a store to read-only memory ({a.label})")
                scatter(a.data, off, np.asarray(value)[sel] if np.ndim(value) else value, dtype, nvec)
        return out

    def read_bytes(self, addr: int, nbytes: int) -> np.ndarray:
        """``nbytes`` raw bytes at ``addr`` (a view when they lie in one allocation)."""
        a = self.find(addr)
        if a is None or addr + nbytes > a.end:
            raise MemoryFault("CUDA_ERROR_ILLEGAL_ADDRESS", f"read {nbytes} bytes at {addr:#x}, {self.describe(addr)}")
        o = addr - a.base
        return a.data[o:o + nbytes]


def gather(buf: np.ndarray, off: np.ndarray, dtype: np.dtype, nvec: int) -> np.ndarray:
    """Elements at byte offsets (aligned to the element size) of a uint8 buffer."""
    es = dtype.itemsize
    view = buf.view(dtype) if buf.size % es == 0 else buf[:buf.size - buf.size % es].view(dtype)
    i = off // es
    if nvec == 1:
        return view[i]
    return view[i[:, None] + np.arange(nvec)]


def scatter(buf: np.ndarray, off: np.ndarray, value: np.ndarray, dtype: np.dtype, nvec: int) -> None:
    es = dtype.itemsize
    view = buf.view(dtype) if buf.size % es == 0 else buf[:buf.size - buf.size % es].view(dtype)
    i = off // es
    if nvec == 1:
        view[i] = value
    else:
        view[i[:, None] + np.arange(nvec)] = value


_MEMORY: DeviceMemory | None = None


def device_memory() -> DeviceMemory:
    """The process's emulated device memory (what ``helpers.gpu`` arrays live in without a GPU)."""
    global _MEMORY
    if _MEMORY is None:
        _MEMORY = DeviceMemory()
    return _MEMORY
