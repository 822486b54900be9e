"""TMA tensor maps, both ways the course teaches them.

* driver path: ``encode_tiled`` is ``cuTensorMapEncodeTiled`` with plain Python ints (dims innermost first,
  the rank-1 byte strides of dims 1..); it returns a ``cuda.bindings.driver.CUtensorMap``.
* cuda.core path: ``StridedMemoryView.as_tensor_map``; it returns a ``cuda.core`` ``TensorMapDescriptor``.

``tensor_map(array, box)`` builds either from a DeviceArray with the box in row-major order (like the shape).
Both kinds are accepted by ``gpu.launch`` and passed by value to a ``const __grid_constant__ CUtensorMap``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .arrays import DeviceArray, bfloat16
from .device import executor_active, require_hopper
from .errors import LaunchError

SWIZZLES = (0, 32, 64, 128)


def _dtype_enum(dtype: Any) -> Any:
    from cuda.bindings import driver

    T = driver.CUtensorMapDataType
    names = {np.float32: "FLOAT32", np.float16: "FLOAT16", np.float64: "FLOAT64", np.uint8: "UINT8", np.int8: "UINT8",
             np.uint16: "UINT16", np.int32: "INT32", np.uint32: "UINT32", np.int64: "INT64", np.uint64: "UINT64"}
    table = {np.dtype(k): getattr(T, f"CU_TENSOR_MAP_DATA_TYPE_{v}") for k, v in names.items()}
    if bfloat16 is not None:
        table[bfloat16] = T.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    try:
        return table[np.dtype(dtype)]
    except KeyError:
        raise LaunchError(f"TMA has no data type for {np.dtype(dtype)}") from None


def _swizzle_enum(swizzle: int, driver: Any) -> Any:
    S = driver.CUtensorMapSwizzle
    return {0: S.CU_TENSOR_MAP_SWIZZLE_NONE, 32: S.CU_TENSOR_MAP_SWIZZLE_32B, 64: S.CU_TENSOR_MAP_SWIZZLE_64B,
            128: S.CU_TENSOR_MAP_SWIZZLE_128B}[swizzle]


def validate(dtype: Any, address: int, dims: Sequence[int], strides_bytes: Sequence[int], box: Sequence[int],
             swizzle: int) -> None:
    """The driver's rules for a tiled tensor map, checked up front so a mistake gets a sentence, not
    CUDA_ERROR_INVALID_VALUE. dims/box innermost first; strides_bytes for dims 1.. ."""
    item = np.dtype(dtype).itemsize
    rank = len(dims)
    if not 1 <= rank <= 5:
        raise LaunchError(f"a tensor map has 1 to 5 dimensions, not {rank}")
    if len(box) != rank or len(strides_bytes) != rank - 1:
        raise LaunchError(f"rank {rank} needs {rank} box sizes and {rank - 1} strides, got {len(box)} and "
                          f"{len(strides_bytes)}")
    if address % 16:
        raise LaunchError(f"the global address {address:#x} must be a multiple of 16 bytes")
    for i, s in enumerate(strides_bytes):
        if s % 16:
            raise LaunchError(f"the byte stride of dimension {i + 1} ({s}) must be a multiple of 16")
    for i, (b, d) in enumerate(zip(box, dims, strict=True)):
        if not 1 <= b <= 256:
            raise LaunchError(f"box size {b} of dimension {i} must be between 1 and 256")
        if d < 1:
            raise LaunchError(f"dimension {i} has size {d}")
    if swizzle not in SWIZZLES:
        raise LaunchError(f"swizzle must be one of {SWIZZLES} (bytes), not {swizzle}")
    if (box[0] * item) % 16:
        raise LaunchError(f"the box's inner extent ({box[0]} × {item} B) must be a multiple of 16 bytes")
    if swizzle and box[0] * item > swizzle:
        raise LaunchError(f"with {swizzle}B swizzle the box's inner extent may be at most {swizzle} bytes; "
                          f"{box[0]} × {item} B = {box[0] * item} B (use a box of {swizzle // item} elements)")


def encode_tiled(dtype: Any, address: int, dims: Sequence[int], strides_bytes: Sequence[int], box: Sequence[int],
                 *, element_strides: Sequence[int] | None = None, swizzle: int = 128, l2_promotion: int = 256,
                 oob_nan: bool = False) -> Any:
    """``cuTensorMapEncodeTiled`` with plain ints: dims and box innermost first, strides_bytes the byte strides
    of dims 1.. (rank-1 of them). Returns a ``driver.CUtensorMap`` (on the emulator, an ``EmuTensorMap``)."""
    if executor_active():
        return _emulated(dtype, address, dims, strides_bytes, box, element_strides, swizzle, l2_promotion, oob_nan)
    require_hopper("building a tensor map")
    from cuda.bindings import driver

    validate(dtype, address, dims, strides_bytes, box, swizzle)
    rank = len(dims)
    u32, u64 = driver.cuuint32_t, driver.cuuint64_t
    es = element_strides or [1] * rank
    L2 = driver.CUtensorMapL2promotion
    l2 = {0: L2.CU_TENSOR_MAP_L2_PROMOTION_NONE, 64: L2.CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
          128: L2.CU_TENSOR_MAP_L2_PROMOTION_L2_128B, 256: L2.CU_TENSOR_MAP_L2_PROMOTION_L2_256B}[l2_promotion]
    F = driver.CUtensorMapFloatOOBfill
    err, tmap = driver.cuTensorMapEncodeTiled(
        _dtype_enum(dtype), rank, address, [u64(d) for d in dims], [u64(s) for s in strides_bytes],
        [u32(b) for b in box], [u32(e) for e in es], driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        _swizzle_enum(swizzle, driver), l2,
        F.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA if oob_nan else F.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise LaunchError(f"cuTensorMapEncodeTiled refused the map ({getattr(err, 'name', err)}): dims={list(dims)}, "
                          f"strides={list(strides_bytes)}, box={list(box)}, swizzle={swizzle}")
    return tmap


def tensor_map(array: DeviceArray, box: Sequence[int], *, swizzle: int = 128, via: str = "driver",
               l2_promotion: int = 256, oob_nan: bool = False) -> Any:
    """Tensor map over a whole C-contiguous DeviceArray; `box` in the array's (row-major) axis order, e.g.
    ``(64, 64)`` rows × columns. ``via='driver'`` gives a driver CUtensorMap, ``via='core'`` a cuda.core
    TensorMapDescriptor."""
    box = tuple(int(b) for b in box)
    if len(box) != array.ndim:
        raise LaunchError(f"box {box} has {len(box)} sizes for a {array.ndim}-D array")
    dims = list(reversed(array.shape))
    strides = list(reversed(array.strides))[1:]
    validate(array.dtype, array.ptr, dims, strides, list(reversed(box)), swizzle)
    if via not in ("driver", "core"):
        raise ValueError("via must be 'driver' or 'core'")
    if executor_active():  # both kinds are the emulator's map
        return _emulated(array.dtype, array.ptr, dims, strides, list(reversed(box)), None, swizzle, l2_promotion,
                         oob_nan, keep=array)
    if via == "driver":
        return encode_tiled(array.dtype, array.ptr, dims, strides, list(reversed(box)), swizzle=swizzle,
                            l2_promotion=l2_promotion, oob_nan=oob_nan)
    if via == "core":
        return _core_tensor_map(array, box, swizzle, l2_promotion, oob_nan)
    raise ValueError("via must be 'driver' or 'core'")


def _emulated(dtype: Any, address: int, dims: Sequence[int], strides_bytes: Sequence[int], box: Sequence[int],
              element_strides: Sequence[int] | None, swizzle: int, l2_promotion: int, oob_nan: bool,
              keep: Any = None) -> Any:
    from helpers.gpu.executor.runtime import make_tensor_map
    from helpers.hopper.tensormap import TensorMapError

    validate(dtype, address, dims, strides_bytes, box, swizzle)
    try:
        return make_tensor_map(dtype, address, dims, strides_bytes, box, element_strides, swizzle, l2_promotion,
                               oob_nan, keep=keep)
    except (TensorMapError, KeyError) as e:
        raise LaunchError(f"cuTensorMapEncodeTiled refused the map ({e}): dims={list(dims)}, "
                          f"strides={list(strides_bytes)}, box={list(box)}, swizzle={swizzle}") from None


def tensor_map_2d(array: DeviceArray, box_rows: int, box_cols: int, *, swizzle: int = 128,
                  via: str = "driver") -> Any:
    """Tensor map over a row-major 2-D array with a box of box_rows × box_cols elements."""
    if array.ndim != 2:
        raise LaunchError(f"tensor_map_2d wants a 2-D array, got shape {array.shape}")
    return tensor_map(array, (box_rows, box_cols), swizzle=swizzle, via=via)


def _core_tensor_map(array: DeviceArray, box: tuple[int, ...], swizzle: int, l2_promotion: int,
                     oob_nan: bool) -> Any:
    from cuda.core import Buffer
    from cuda.core._tensor_map import (  # noqa: PLC2701 - enum classes are not re-exported in 1.2
        TensorMapDataType,
        TensorMapL2Promotion,
        TensorMapOOBFill,
        TensorMapSwizzle,
    )
    from cuda.core.utils import StridedMemoryView

    buf: Any = None
    try:
        buf = Buffer.from_handle(array.ptr, array.nbytes, owner=array)
        view = StridedMemoryView.from_buffer(buf, array.shape, dtype=array.dtype)
    except Exception:  # older cuda.core: go through __cuda_array_interface__
        view = StridedMemoryView.from_cuda_array_interface(array, stream_ptr=-1)
    sw = {0: TensorMapSwizzle.NONE, 32: TensorMapSwizzle.SWIZZLE_32B, 64: TensorMapSwizzle.SWIZZLE_64B,
          128: TensorMapSwizzle.SWIZZLE_128B}[swizzle]
    l2 = {0: TensorMapL2Promotion.NONE, 64: TensorMapL2Promotion.L2_64B, 128: TensorMapL2Promotion.L2_128B,
          256: TensorMapL2Promotion.L2_256B}[l2_promotion]
    kw: dict[str, Any] = {"swizzle": sw, "l2_promotion": l2,
                          "oob_fill": TensorMapOOBFill.NAN_REQUEST_ZERO_FMA if oob_nan else TensorMapOOBFill.NONE}
    if bfloat16 is not None and array.dtype == bfloat16:
        kw["data_type"] = TensorMapDataType.BFLOAT16
    desc = view.as_tensor_map(box, **kw)
    try:
        desc._helpers_keepalive = (array, buf, view)
    except AttributeError:
        pass  # the caller keeps `array` alive
    return desc
