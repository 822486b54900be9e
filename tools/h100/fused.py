"""The fused epilogue and programmatic dependent launch on an H100, in one run: writes OUT/fused_h100.json.

    python tools/h100/fused.py OUT        (from the repository root; about 3 minutes)
    bash tools/h100/run.sh --wheels .whl-nb fused

1. Correctness. bench/kernels/lab5_fused.cu with β = 1, an fp32 bias and GELU (tanh form) against torch (fp32
   product of the same bf16 A and B, + C + bias, ``gelu(approximate="tanh")``; cuBLAS's fp32 product and numpy
   where torch is missing) at 4096³ and at a ragged 1000×1032×520 (partial tiles, clipped loads and stores); the
   unfused path's D beside the fused one (the unfused one rounds the product to bf16 before adding C).
2. Speed, at 4096×4096×4096 and 8192×8192×4096, interleaved (``helpers.gpu.timing.interleave``, the SM clock and
   power of each side sampled): the fused kernel against the plain Lab 5 kernel (``lab5_gemm``, D = A·Bᵀ), and the
   fused kernel against the unfused equivalent (``lab5_gemm``, then an elementwise kernel that reads the bf16
   product, C and the bias and writes D with the same arithmetic).
3. Programmatic dependent launch: two dependent GEMMs, X = A·B1ᵀ then Y = X·B2ᵀ (the second reads the first's
   output), both the fused kernel with no C, bias or activation (so both carry ``griddepcontrol.wait`` /
   ``launch_dependents``), launched back to back with and without
   ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``; time per pair (CUDA events around each pair),
   interleaved; Y bit for bit the same both ways. Shapes where the launch gap matters: 512×4096×4096 twice,
   256×1024×1024 twice.

Writes OUT/fused_h100.json (meta: GPU, SMs, driver, date, SM clock and power before the run; ``clock``: the SM clock
over the timed part; each comparison's clock and power per side; ``summary``: sentences Lesson 06 prints); copy it
to tests/data/. Without a Hopper GPU it compiles every kernel, runs the fused and the unfused path once on the PTX
executor at a small shape against helpers.hopper.fused, and exits 0.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
HERE = str(Path(__file__).resolve())

from helpers import gpu  # noqa: E402
from helpers.gpu import gemm  # noqa: E402

SPEED_SHAPES = [(4096, 4096, 4096), (8192, 8192, 4096)]
CHECK_SHAPES = [(4096, 4096, 4096), (1000, 1032, 520)]
PDL_PAIRS = [(512, 4096, 4096), (256, 1024, 1024)]  # X = A·B1ᵀ (M×N, K), then Y = X·B2ᵀ (M×N, K = N)
ROUNDS = 9
BATCH_MS = 40.0  # GPU time of one side's batch in a round

# The unfused epilogue: D = act(α·G + β·C + bias) from the bf16 product G, 8 elements a thread a step. Compiled after
# bench/kernels/lab5_fused.cu's text, so it uses that file's bias_pair and activate: the same arithmetic.
ELEMENTWISE = r"""
extern "C" __global__ void __launch_bounds__(256)
bias_act(const uint4* __restrict__ g, const uint4* __restrict__ c, const bias_t* __restrict__ bias,
         uint4* __restrict__ d, float alpha, float beta, int M, int N) {
  const long long total = (long long)M * N / 8;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const uint4 gv = g[i], cv = c[i];
    const int n = (int)((i * 8) % N);
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
    const __nv_bfloat162* c2 = reinterpret_cast<const __nv_bfloat162*>(&cv);
    uint4 out;
    __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 gf = __bfloat1622float2(g2[q]), cf = __bfloat1622float2(c2[q]);
      const float2 bv = bias_pair(bias, n + 2 * q, N);
      const float x0 = __fadd_rn(__fadd_rn(__fmul_rn(alpha, gf.x), __fmul_rn(beta, cf.x)), bv.x);
      const float x1 = __fadd_rn(__fadd_rn(__fmul_rn(alpha, gf.y), __fmul_rn(beta, cf.y)), bv.y);
      o2[q] = __floats2bfloat162_rn(activate(x0), activate(x1));
    }
    d[i] = out;
  }
}
"""


def kernels() -> dict[str, Any]:
    """Every kernel of the run: Lab 5's, the fused one (β·C, fp32 bias, GELU), the elementwise one, and the fused
    one with nothing fused (the PDL pair's GEMM)."""
    return {"lab5": gpu.compile((gemm.KERNELS_DIR / "lab5_epilogue.cu").read_text(), "lab5_gemm"),
            "fused": gemm.fused_kernel("gelu", "f32"),
            "elementwise": gpu.compile(gemm.fused_source("gelu", "f32") + ELEMENTWISE, "bias_act",
                                       filename="bias_act.cu"),
            "gemm_pdl": gemm.fused_kernel("none", None)}


def elementwise_launcher(kernel: Any, g: Any, c: Any, bias: Any, d: Any, alpha: float, beta: float) -> Any:
    m, n = d.shape
    blocks = max(1, min(math.ceil(m * n / 8 / 256), gpu.this_gpu().sms * 16))
    return gpu.prepare(kernel, blocks, 256, 0, g, c, bias, d, np.float32(alpha), np.float32(beta), np.int32(m),
                       np.int32(n))


def _bits(a: Any) -> np.ndarray:
    return a.to_host().view(np.uint16)


# ------------------------------------------------------------------------------------------- correctness
def _reference(a: np.ndarray, b: np.ndarray, c: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, str]:
    """gelu_tanh(A·Bᵀ + C + bias) in fp32: torch on the GPU where it is installed, else cuBLAS's fp32 product and
    numpy."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        def t(x: np.ndarray) -> Any:
            return torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16).float()

        ref = torch.nn.functional.gelu(t(a) @ t(b).T + t(c) + torch.from_numpy(bias).cuda(), approximate="tanh")
        return ref.cpu().numpy(), f"torch {torch.__version__} (fp32 matmul, gelu approximate='tanh')"
    m, n = c.shape
    prod = gpu.DeviceArray((m, n), np.float32)
    da, db = gpu.to_device(a), gpu.to_device(b)  # alive until the product is back
    gpu.gemm_launcher(da, db, prod)()
    gpu.wait()
    x = prod.to_host().astype(np.float64) + c.astype(np.float64) + bias[None, :]
    ref = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return ref.astype(np.float32), "cuBLAS fp32 product, numpy fp64 epilogue"


def check(ks: dict[str, Any], shape: tuple[int, int, int], seed: int = 5) -> dict:
    """The fused D against the reference; the unfused D beside it."""
    m, n, k = shape
    a = gpu.random_host((m, k), gpu.bfloat16, seed=seed)
    b = gpu.random_host((n, k), gpu.bfloat16, seed=seed + 1)
    c = gpu.random_host((m, n), gpu.bfloat16, seed=seed + 2)
    bias = np.random.default_rng(seed + 3).standard_normal(n).astype(np.float32)
    da, db, dc, dbias = gpu.to_device(a), gpu.to_device(b), gpu.to_device(c), gpu.to_device(bias)
    dd, dg, du = gpu.poison((m, n), gpu.bfloat16), gpu.poison((m, n), gpu.bfloat16), gpu.poison((m, n), gpu.bfloat16)
    gemm.fused_launcher(ks["fused"], da, db, dc, dd, alpha=1.0, beta=1.0, bias=dbias)()
    gemm.lab5_launcher(ks["lab5"], da, db, dg)()
    elementwise_launcher(ks["elementwise"], dg, dc, dbias, du, 1.0, 1.0)()
    gpu.wait()
    fused, unfused = dd.to_host().astype(np.float32), du.to_host().astype(np.float32)
    out: dict[str, Any] = {"shape": list(shape)}
    if gpu.hopper_available():
        ref, how = _reference(a, b, c, bias)
        err = np.abs(fused - ref)
        tol = 2e-2 * np.abs(ref) + 2e-3 * math.sqrt(k)
        out.update(reference=how, max_abs_error=float(err.max()), beyond_tolerance=int((~(err <= tol)).sum()),
                   tolerance="2e-2·|ref| + 2e-3·√K", max_abs_error_unfused=float(np.abs(unfused - ref).max()))
    else:  # the executor: the numpy model of the fused epilogue, from the tensor core's fp32 accumulators
        from helpers.hopper import fused as model
        from helpers.hopper import wgmma as wg

        af, bf = a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
        acc = np.zeros((m, n), np.float32)
        for k0 in range(0, k, 16):
            acc = wg.dot_h100(af[:, None, k0:k0 + 16], bf[None, :, k0:k0 + 16], acc.astype(np.float64))
        want = model.fused_epilogue(acc, alpha=1.0, beta=1.0, c=c, bias=bias, act="gelu")
        out.update(fused_matches_model=bool(np.array_equal(_bits(dd), want)))
    out.update(fused_equals_unfused=int((_bits(dd) == _bits(du)).sum()), elements=m * n,
               max_abs_fused_minus_unfused=float(np.abs(fused - unfused).max()))
    return out


# ------------------------------------------------------------------------------------------- speed
def _pair(tel: Any, a_fns: list[Any], b_fns: list[Any], labels: tuple[str, str]) -> dict:
    """``a_fns`` and ``b_fns`` interleaved; batches of about BATCH_MS of GPU time."""
    from helpers.gpu.timing import batches, interleave

    ms = max(np.median(gpu.time_runs(a_fns, 3, warmup=2)), np.median(gpu.time_runs(b_fns, 3, warmup=2)))
    per_round = max(5, math.ceil(BATCH_MS / max(ms, 1e-3)))
    r = interleave(batches(a_fns, per_round), batches(b_fns, per_round), rounds=ROUNDS, telemetry=tel, labels=labels)
    return {"labels": list(labels), "ms": [r.a_ms, r.b_ms], "ratio_b_over_a": r.ratio,
            "ratio_range": list(r.ratio_range), "runs_per_batch": per_round, "rounds": r.rounds,
            "clock_differs": r.clock_differs, "summary": r.summary(*labels)}


def speed(ks: dict[str, Any], shape: tuple[int, int, int], tel: Any) -> dict:
    """At one shape: fused against plain Lab 5, fused against unfused (GEMM, then the elementwise kernel)."""
    from helpers.gpu.timing import gemm_inputs

    m, n, k = shape
    A, B, (G, D, U) = gemm_inputs(m, n, k, gpu.bfloat16, seed=1, sides=3)
    Cs = [gpu.random((m, n), gpu.bfloat16, seed=100 + i) for i in range(len(A))]
    bias = gpu.to_device(np.random.default_rng(9).standard_normal(n).astype(np.float32))
    plain = [gemm.lab5_launcher(ks["lab5"], a, b, g) for a, b, g in zip(A, B, G, strict=True)]
    fusedl = [gemm.fused_launcher(ks["fused"], a, b, c, d, beta=1.0, bias=bias) for a, b, c, d in
              zip(A, B, Cs, D, strict=True)]
    ew = [elementwise_launcher(ks["elementwise"], g, c, bias, u, 1.0, 1.0) for g, c, u in zip(G, Cs, U, strict=True)]

    def both(p: Any, e: Any) -> Any:
        def run() -> None:
            p()
            e()

        return run

    unfused = [both(p, e) for p, e in zip(plain, ew, strict=True)]
    flops = 2 * m * n * k
    out = {"sets": len(A), "fused_vs_plain": _pair(tel, fusedl, plain, ("fused", "plain Lab 5")),
           "fused_vs_unfused": _pair(tel, fusedl, unfused, ("fused", "unfused"))}
    for key in ("fused_vs_plain", "fused_vs_unfused"):
        out[key]["tflops"] = [flops / (x * 1e-3) / 1e12 for x in out[key]["ms"]]
    out["elementwise_ms"] = float(np.median(gpu.time_runs(ew, 20, warmup=2)))
    if shape == SPEED_SHAPES[0]:  # what each step of the epilogue costs alone, beside plain Lab 5
        out["parts"] = {}
        for label, act, bias_type, beta in PARTS:
            kern = gemm.fused_kernel(act, bias_type)
            fns = [gemm.fused_launcher(kern, a, b, c, d, beta=beta, bias=bias if bias_type else None)
                   for a, b, c, d in zip(A, B, Cs, D, strict=True)]
            out["parts"][label] = _pair(tel, fns, plain, (label, "plain Lab 5"))
    return out


#: the fused kernel one step at a time: (label, activation, bias type, β)
PARTS = (("nothing (α only)", "none", None, 0.0), ("β·C (C loaded)", "none", None, 1.0),
         ("fp32 bias", "none", "f32", 0.0), ("ReLU", "relu", None, 0.0), ("GELU", "gelu", None, 0.0),
         ("β·C + bias + GELU", "gelu", "f32", 1.0))


def pdl(ks: dict[str, Any], pair: tuple[int, int, int], tel: Any) -> dict:
    """X = A·B1ᵀ then Y = X·B2ᵀ, with and without the programmatic attribute on both launches: time per pair."""
    m, n, k = pair
    a = gpu.random((m, k), gpu.bfloat16, seed=31)
    b1, b2 = gpu.random((n, k), gpu.bfloat16, seed=32), gpu.random((n, n), gpu.bfloat16, seed=33)
    x, y = gpu.poison((m, n), gpu.bfloat16), gpu.poison((m, n), gpu.bfloat16)
    g = ks["gemm_pdl"]

    def launches(programmatic: bool) -> Any:
        first = gemm.fused_launcher(g, a, b1, None, x, programmatic=programmatic)
        second = gemm.fused_launcher(g, x, b2, None, y, programmatic=programmatic)

        def run() -> None:
            first()
            second()

        return run

    serial, overlapped = launches(False), launches(True)
    serial()
    gpu.wait()
    want = _bits(y).copy()
    same = 0
    for _ in range(5):
        y.poison()
        overlapped()
        gpu.wait()
        same += int(np.array_equal(_bits(y), want))
    r = _pair(tel, [overlapped], [serial], ("with PDL", "without PDL"))
    r["us_per_pair"] = [1e3 * v for v in r["ms"]]
    r["saved_us"] = 1e3 * (r["ms"][1] - r["ms"][0])
    r["bit_identical_runs"] = f"{same} of 5"
    return r


def measure() -> dict:
    """(Child.) Everything above, in one process, under one clock log."""
    from helpers.gpu.clocks import Telemetry

    ks = kernels()
    result: dict[str, Any] = {"registers": {name: k.report.registers for name, k in ks.items()}}
    result["check"] = [check(ks, s) for s in CHECK_SHAPES]
    with gpu.sm_clock() as clk, Telemetry() as tel:
        result["speed"] = {"×".join(map(str, s)): speed(ks, s, tel) for s in SPEED_SHAPES}
        result["pdl"] = {f"{m}×{n}×{k} then {m}×{n}×{n}": pdl(ks, (m, n, k), tel) for m, n, k in PDL_PAIRS}
    result["clock"] = clk.summary()
    return result


def summary(r: dict) -> list[str]:
    out = []
    for c in r["check"]:
        shape = "×".join(map(str, c["shape"]))
        out.append(f"{shape}: fused D (β = 1, fp32 bias, GELU) against {c['reference']}: largest error "
                   f"{c['max_abs_error']:.3g}, {c['beyond_tolerance']} of {c['elements']} elements beyond the "
                   f"tolerance; {c['fused_equals_unfused']} of {c['elements']} bit-identical to the unfused path "
                   f"(which rounds the product to bf16 first)")
    for shape, s in r["speed"].items():
        fp, fu = s["fused_vs_plain"], s["fused_vs_unfused"]
        out.append(f"{shape}: fused {fp['ms'][0]:.3f} ms ({fp['tflops'][0]:.0f} TFLOP/s), plain Lab 5 "
                   f"{fp['ms'][1]:.3f} ms ({fp['tflops'][1]:.0f}); fused {fu['ms'][0]:.3f} ms, unfused (GEMM + "
                   f"elementwise kernel) {fu['ms'][1]:.3f} ms, the elementwise kernel alone {s['elementwise_ms']:.3f} "
                   "ms")
    for shape, s in r["speed"].items():
        if "parts" in s:
            parts = ", ".join(f"{label} {p['ratio_b_over_a']:.2f}×" if p.get("ratio_b_over_a") else label
                              for label, p in s["parts"].items())
            out.append(f"{shape}, the fused kernel one step at a time, each × plain Lab 5's speed in the same run: "
                       f"{parts}")
    for pair, p in r["pdl"].items():
        out.append(f"{pair}: {p['us_per_pair'][0]:.1f} µs a pair with PDL, {p['us_per_pair'][1]:.1f} µs without "
                   f"({p['saved_us']:.1f} µs saved); the second GEMM's output bit-identical in "
                   f"{p['bit_identical_runs']} runs")
    return out


def cpu_check(ks: dict[str, Any]) -> int:
    """No Hopper GPU: the fused and unfused paths once on the PTX executor, at a small ragged shape."""
    r = check(ks, (136, 264, 128))
    print(f"on the executor, 136×264×128: fused D matches helpers.hopper.fused: {r['fused_matches_model']}; "
          f"{r['fused_equals_unfused']} of {r['elements']} elements equal to the unfused path")
    return 0 if r["fused_matches_model"] else 1


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("/tmp/out")
    out.mkdir(parents=True, exist_ok=True)
    ks = kernels()
    for name, k in ks.items():
        print(f"{name}: {k.report.summary()}")
    if not gpu.hopper_available():
        print(f"no Hopper GPU ({gpu.no_hopper_reason()}): timings need the H100; nothing written")
        return cpu_check(ks)
    info = gpu.device_info()
    meta = {"gpu": info.name, "sm_count": info.sm_count, "driver": ".".join(map(str, info.driver_version)),
            "nvrtc": ".".join(map(str, gpu.nvrtc_version() or ())),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "script": "tools/h100/fused.py",
            "sm_clock_mhz_before": gpu.current_sm_clock_mhz(), "power_watts_before": gpu.current_power_watts(),
            "kernels": ["bench/kernels/lab5_epilogue.cu", "bench/kernels/lab5_fused.cu"], "rounds": ROUNDS}
    r = gpu.run_isolated(f"{HERE}:measure", timeout=480)
    result = {"meta": meta, **r, "summary": summary(r)}
    (out / "fused_h100.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print("\n".join(result["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
