"""Device arrays without PyTorch: numpy <-> GPU copies (float32, bf16 via ml_dtypes, ints), poison and random
fill. Copies run on the course's stream and wait for it, so they see every kernel launched before them."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from .device import check, current, executor_active, require_hopper

try:
    import ml_dtypes

    bfloat16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - the course installs ml_dtypes
    bfloat16 = None  # type: ignore[assignment]


def _free(ptr: int) -> None:
    try:
        from cuda.bindings import driver

        driver.cuMemFreeAsync(ptr, current()["stream_handle"])
    except Exception:
        pass  # interpreter exit, or a lost context: the driver reclaims it


class DeviceArray:
    """A C-contiguous array in GPU memory. ``.ptr`` is its device address; ``.to_host()`` copies it back.
    Without a GPU it lives in the emulator's memory (helpers.gpu.executor), at an emulated device address."""

    def __init__(self, shape: int | Sequence[int], dtype: Any = np.float32) -> None:
        self.shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._alloc: Any = None
        if executor_active():
            from helpers.gpu.executor.memory import device_memory

            mem = device_memory()
            self._alloc = mem.alloc(max(self.nbytes, 1), label=f"a device array {self.shape} {self.dtype}")
            self.ptr = self._alloc.base
            self._finalizer = weakref.finalize(self, mem.free, self._alloc)
            return
        require_hopper("allocating GPU memory")
        from cuda.bindings import driver

        ctx = current()
        self.ptr = int(check(driver.cuMemAllocAsync(max(self.nbytes, 1), ctx["stream_handle"]), "cuMemAllocAsync"))
        self._finalizer = weakref.finalize(self, _free, self.ptr)

    @property
    def emulated(self) -> bool:
        """True when the array lives in the emulator's memory (no GPU)."""
        return self._alloc is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """Byte strides of a C-contiguous layout."""
        out, acc = [], self.dtype.itemsize
        for s in reversed(self.shape):
            out.append(acc)
            acc *= s
        return tuple(reversed(out))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None}

    def copy_from_host(self, a: np.ndarray) -> DeviceArray:
        """Copy a numpy array of the same shape and dtype into this array (waits for the copy)."""
        from cuda.bindings import driver

        a = np.ascontiguousarray(a)
        if a.shape != self.shape or a.dtype != self.dtype:
            raise ValueError(f"shape/dtype mismatch: array is {self.shape} {self.dtype}, host data {a.shape} {a.dtype}")
        if self._alloc is not None:
            self._alloc.data[:self.nbytes] = a.reshape(-1).view(np.uint8)
            return self
        s = current()["stream_handle"]
        check(driver.cuMemcpyHtoDAsync(self.ptr, a.ctypes.data, self.nbytes, s), "copy to the GPU")
        check(driver.cuStreamSynchronize(s), "copy to the GPU")
        return self

    def to_host(self) -> np.ndarray:
        """Copy back to a new numpy array (after every kernel launched before on the course stream)."""
        from cuda.bindings import driver

        if self._alloc is not None:
            return self._alloc.data[:self.nbytes].view(self.dtype).reshape(self.shape).copy()
        out = np.empty(self.shape, self.dtype)
        s = current()["stream_handle"]
        check(driver.cuMemcpyDtoHAsync(out.ctypes.data, self.ptr, self.nbytes, s), "copy from the GPU")
        check(driver.cuStreamSynchronize(s), "copy from the GPU")
        return out

    def fill_bytes(self, byte: int) -> DeviceArray:
        """Set every byte to `byte` (0..255)."""
        if self._alloc is not None:
            self._alloc.data[:self.nbytes] = byte & 0xFF
            return self
        from cuda.bindings import driver

        s = current()["stream_handle"]
        check(driver.cuMemsetD8Async(self.ptr, byte & 0xFF, self.nbytes, s), "memset")
        check(driver.cuStreamSynchronize(s), "memset")
        return self

    def poison(self) -> DeviceArray:
        """Fill with 0xFF bytes: NaN for every float type (float32, bf16, fp16), -1 for signed ints, so an
        element the kernel forgot to write fails the check."""
        return self.fill_bytes(0xFF)

    def zero(self) -> DeviceArray:
        return self.fill_bytes(0)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        where = ", emulated" if self._alloc is not None else ""
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, ptr={self.ptr:#x}{where})"


def empty(shape: int | Sequence[int], dtype: Any = np.float32) -> DeviceArray:
    """Uninitialised device array."""
    return DeviceArray(shape, dtype)


def zeros(shape: int | Sequence[int], dtype: Any = np.float32) -> DeviceArray:
    return DeviceArray(shape, dtype).zero()


def to_device(a: np.ndarray, dtype: Any = None) -> DeviceArray:
    """Copy a numpy array (optionally converted to `dtype`, e.g. gpu.bfloat16) to the GPU."""
    a = np.ascontiguousarray(a if dtype is None else np.asarray(a).astype(dtype))
    return DeviceArray(a.shape, a.dtype).copy_from_host(a)


def to_host(d: DeviceArray) -> np.ndarray:
    return d.to_host()


def poison(arr_or_shape: DeviceArray | int | Sequence[int], dtype: Any = np.float32) -> DeviceArray:
    """Poison an existing array in place, or allocate a poisoned one of this shape and dtype."""
    arr = arr_or_shape if isinstance(arr_or_shape, DeviceArray) else DeviceArray(arr_or_shape, dtype)
    return arr.poison()


def random_host(shape: int | Sequence[int], dtype: Any = bfloat16, seed: int = 0, std: float = 1.0,
                kind: str = "normal") -> np.ndarray:
    """Random numpy data: 'normal' (mean 0, std) or 'uniform' in [-std, std], rounded to `dtype`."""
    rng = np.random.default_rng(seed)
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    if kind == "normal":
        x = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
    elif kind == "uniform":
        x = rng.uniform(-std, std, size=shape).astype(np.float32)
    else:
        raise ValueError("kind must be 'normal' or 'uniform'")
    return x.astype(dtype)


def random(shape: int | Sequence[int], dtype: Any = bfloat16, seed: int = 0, std: float = 1.0,
           kind: str = "normal") -> DeviceArray:
    """A device array of random values (generated with numpy, then copied); see random_host."""
    if not executor_active():
        require_hopper("random fill on the GPU")
    return to_device(random_host(shape, dtype, seed, std, kind))
