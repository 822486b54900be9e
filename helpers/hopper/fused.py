"""The fused epilogue, bit for bit what ``bench/kernels/lab5_fused.cu`` computes per output element:

    D = act(α·acc + β·C + bias[n])        rounded to bf16 (nearest, ties to even)

``acc`` is the fp32 accumulator of A·Bᵀ, C the bf16 source matrix (loaded by the TMA into the shared buffer that
D's sub-tile is then written into), ``bias`` one value per column (fp32 or bf16) and ``act`` the identity, ReLU or
GELU in its tanh form. Every step is one correctly rounded fp32 operation, in this order:

1. ``x = α·acc`` (a multiply);
2. with β ≠ 0: ``x = x + β·C`` (a multiply, then an add: two roundings, never a fused multiply-add); with β = 0
   the kernel never loads C, so C's values (even NaN) do not matter;
3. with a bias: ``x = x + bias[n]``;
4. the activation: ReLU is ``max(x, 0)`` (``max.f32``: a NaN gives 0); GELU is
   ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`` with :func:`tanh_rational`, a rational approximation built from
   multiplies, adds and one division (no ``tanh.approx``, whose bits are the hardware's own);
5. bf16 with round-to-nearest-even (``cvt.rn.bf16x2.f32``), :func:`to_bf16`.

The kernel writes every constant as a hexadecimal float, so it and this model use the same fp32 numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .epilogue import bf16_bits_to_f32, to_bf16_bits

__all__ = ["ACTIVATIONS", "GELU_K0", "GELU_K1", "TANH_CLAMP", "TANH_TINY", "tanh_rational", "gelu_tanh", "relu",
           "activate", "fused_epilogue", "to_bf16", "row_reduction_needs"]

ACTIVATIONS = ("none", "relu", "gelu")  # FUSED_ACT = 0, 1, 2 in the kernel

F = np.float32
GELU_K0 = F(float.fromhex("0x1.988454p-1"))  # √(2/π) = 0.7978845608…
GELU_K1 = F(float.fromhex("0x1.6e4e26p-5"))  # 0.044715
TANH_CLAMP = F(float.fromhex("0x1.f9f09ep+2"))  # 7.905311…: beyond it tanh is ±1 in fp32
TANH_TINY = F(float.fromhex("0x1.a36e2ep-12"))  # 0.0004: below it tanh(x) = x in fp32
# tanh(x) ≈ x·P(x²)/Q(x²), P of degree 6 and Q of degree 3 in x², the odd/even coefficients of a minimax fit
_P = [F(float.fromhex(h)) for h in ("-0x1.3e4b80p-52", "0x1.c266fcp-43", "-0x1.7a6ffep-34", "0x1.b80082p-25",
                                    "0x1.f28694p-17", "0x1.4e1bdap-11", "0x1.40b3b8p-8")]
_Q = [F(float.fromhex(h)) for h in ("0x1.41a7b0p-20", "0x1.f12bacp-14", "0x1.29540ap-9", "0x1.40b3bap-8")]


def _f32(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def tanh_rational(x: Any) -> np.ndarray:
    """tanh in fp32 as the kernel computes it: clamp to ±:data:`TANH_CLAMP`, x itself below :data:`TANH_TINY`,
    else x·P(x²)/Q(x²) by Horner's rule (each multiply and add rounded to fp32), then one fp32 division. Within a
    few units in the last place of the true tanh."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        xc = np.fmin(np.fmax(x, -TANH_CLAMP), TANH_CLAMP)  # max.f32/min.f32: a NaN operand gives the other one
        x2 = xc * xc
        p = _P[0]
        for coef in _P[1:]:
            p = x2 * p + coef  # numpy float32: the product rounds, then the sum rounds
        p = xc * p
        q = _Q[0]
        for coef in _Q[1:]:
            q = x2 * q + coef
        r = (p / q).astype(np.float32)
    return np.where(np.abs(x) < TANH_TINY, x, r).astype(np.float32)


def gelu_tanh(x: Any) -> np.ndarray:
    """GELU, tanh form, as the kernel computes it: 0.5·x·(1 + tanh(k0·(x + k1·x³))), one fp32 rounding a step."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        x3 = (x * x) * x
        u = GELU_K0 * (x + GELU_K1 * x3)
        return ((F(0.5) * x) * (F(1) + tanh_rational(u))).astype(np.float32)


def relu(x: Any) -> np.ndarray:
    """max(x, 0) as ``max.f32``: a NaN gives 0."""
    return np.fmax(_f32(x), F(0)).astype(np.float32)


def activate(x: Any, act: str) -> np.ndarray:
    """The activation named ``act`` (one of :data:`ACTIVATIONS`)."""
    if act not in ACTIVATIONS:
        raise ValueError(f"activation {act!r}: one of {ACTIVATIONS}")
    return {"none": _f32, "relu": relu, "gelu": gelu_tanh}[act](x)


def to_bf16(x: Any) -> np.ndarray:
    """fp32 → bf16 values (as fp32) with round-to-nearest-even."""
    return bf16_bits_to_f32(to_bf16_bits(x))


def fused_epilogue(acc: Any, *, alpha: float = 1.0, beta: float = 0.0, c: Any = None, bias: Any = None,
                   act: str = "none") -> np.ndarray:
    """D's bf16 bits (uint16, M×N) from the fp32 accumulators ``acc`` (M×N): α·acc, + β·C (bf16 C, only when
    β ≠ 0), + bias (one fp32 or bf16 value per column), the activation, bf16. Same steps, same order as the kernel."""
    acc = _f32(acc)
    with np.errstate(all="ignore"):
        x = F(alpha) * acc
        if beta != 0.0:
            if c is None:
                raise ValueError("β ≠ 0 needs the source matrix C")
            x = x + F(beta) * np.asarray(c).astype(np.float32)
        if bias is not None:
            x = x + np.asarray(bias).astype(np.float32)[None, :]
    return to_bf16_bits(activate(x, act))


def row_reduction_needs(n: int, bn: int = 256) -> int:
    """How many blocks hold a piece of one output row when each tile is ``bn`` columns wide: a reduction over the
    whole row (a layer norm's mean and variance, a softmax's maximum and sum) needs all of them."""
    return -(-n // bn)
