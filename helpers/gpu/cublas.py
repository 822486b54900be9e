"""cuBLAS bf16 GEMM from Python without PyTorch: ctypes on the libcublas that the ``nvidia-cublas`` wheel (or a
CUDA install) provides, found by ``cuda.pathfinder``. Six C calls are all a baseline needs, so no binding
package is required (see docs/gpu.md, "Dependencies")."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .arrays import DeviceArray, bfloat16, to_device
from .device import current, require_hopper
from .errors import GpuError

CUDA_R_32F, CUDA_R_16BF = 0, 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1

_state: dict[str, Any] = {}


class CublasUnavailable(GpuError):
    """libcublas could not be found or loaded."""


def _lib() -> ctypes.CDLL:
    if "lib" in _state:
        return _state["lib"]
    errors = []
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        for name in ("cublasLt", "cublas"):
            loaded = load_nvidia_dynamic_lib(name)
        lib = ctypes.CDLL(loaded.abs_path)
    except Exception as e:
        errors.append(f"cuda.pathfinder: {e}")
        lib = None
        for soname in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
            try:
                lib = ctypes.CDLL(soname)
                break
            except OSError as e2:
                errors.append(str(e2))
    if lib is None:
        raise CublasUnavailable("cuBLAS is not installed (pip install nvidia-cublas): " + "; ".join(errors[:2]))
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.cublasSetStream_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cublasGemmEx.argtypes = [
        ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
        ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
        ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.cublasGetVersion_v2.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    _state["lib"] = lib
    return lib


def _handle() -> ctypes.c_void_p:
    if "handle" not in _state:
        lib = _lib()
        ctx = current()
        h = ctypes.c_void_p()
        st = lib.cublasCreate_v2(ctypes.byref(h))
        if st != 0:
            raise CublasUnavailable(f"cublasCreate failed with status {st}")
        lib.cublasSetStream_v2(h, ctypes.c_void_p(int(ctx["stream_handle"])))
        _state["handle"] = h
    return _state["handle"]


def cublas_version() -> str:
    """cuBLAS's version, e.g. '13.1.0'."""
    lib, h = _lib(), _handle()
    v = ctypes.c_int()
    lib.cublasGetVersion_v2(h, ctypes.byref(v))
    return f"{v.value // 10000}.{v.value % 10000 // 100}.{v.value % 100}"


def gemm_launcher(a: DeviceArray, b: DeviceArray, c: DeviceArray, *, b_layout: str = "nk") -> Any:
    """A zero-argument callable that enqueues C = A·Bᵀ (b_layout 'nk': B is N×K, K-major like the course's
    kernels) or C = A·B ('kn': B is K×N) on the course stream. A is M×K bf16, C is M×N float32 or bf16."""
    require_hopper("cuBLAS")
    lib, h = _lib(), _handle()
    m, k = a.shape
    if b_layout == "nk":
        n, kb = b.shape
        op, ldb = CUBLAS_OP_T, k
    elif b_layout == "kn":
        kb, n = b.shape
        op, ldb = CUBLAS_OP_N, n
    else:
        raise ValueError("b_layout must be 'nk' or 'kn'")
    if kb != k or c.shape != (m, n):
        raise ValueError(f"shapes do not match: A {a.shape}, B {b.shape} ({b_layout}), C {c.shape}")
    if a.dtype != bfloat16 or b.dtype != bfloat16:
        raise ValueError("cublas_gemm takes bf16 A and B")
    ctype = {np.dtype(np.float32): CUDA_R_32F, bfloat16: CUDA_R_16BF}.get(c.dtype)
    if ctype is None:
        raise ValueError("C must be float32 or bf16")
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    pa, pb, pc = ctypes.c_void_p(a.ptr), ctypes.c_void_p(b.ptr), ctypes.c_void_p(c.ptr)

    # Row-major C (M×N) is column-major Cᵀ (N×M, ld N): Cᵀ = op(B)ᵀ-ish · Aᵀ, i.e. cuBLAS computes
    # (N×M) = [B as N×K] · [A as K×M], with A column-major K×M (ld K) untransposed.
    def run() -> None:
        st = lib.cublasGemmEx(h, op, CUBLAS_OP_N, n, m, k, ctypes.byref(alpha), pb, CUDA_R_16BF, ldb, pa, CUDA_R_16BF,
                              k, ctypes.byref(beta), pc, ctype, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
        if st != 0:
            raise GpuError(f"cublasGemmEx failed with status {st}")

    return run


def cublas_gemm(a: Any, b: Any, out: DeviceArray | None = None, *, b_layout: str = "nk",
                out_dtype: Any = np.float32) -> Any:
    """C = A·Bᵀ (B given N×K, the course's layout) or A·B (b_layout='kn') in bf16 with fp32 accumulation.
    numpy inputs give a numpy result; DeviceArrays give a DeviceArray (written into `out` when given)."""
    require_hopper("cuBLAS")
    host = isinstance(a, np.ndarray)
    da = to_device(a, bfloat16) if host else a
    db = to_device(b, bfloat16) if isinstance(b, np.ndarray) else b
    m = da.shape[0]
    n = db.shape[0] if b_layout == "nk" else db.shape[1]
    c = out if out is not None else DeviceArray((m, n), out_dtype)
    gemm_launcher(da, db, c, b_layout=b_layout)()
    from .launch import wait

    wait()
    return c.to_host() if host else c
