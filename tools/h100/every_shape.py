"""gpu.matmul's paths for every shape people run, on a Hopper GPU with torch: values, the rules, then the benchmark.

    bash tools/h100/run.sh every_shape        (from the repository root; about 3-5 minutes on an H200)
    python tools/h100/every_shape.py OUT      (the same without run.sh's env.txt)

1. Values: gpu.matmul against torch.matmul on the same inputs, both against fp64, over the new paths: A and B
   swapped for small M (M = 1, 8, 17, 64, 128 against odd and round N, K), C with few columns on 128×64, 128×32 and
   128×16 tiles, split-K where the pairs fill less than a wave, odd and prime sizes, fp16 data multiplied as f16
   (fp16 C, and fp32 `out`), bf16 with fp32 `out` (the accumulators unrounded), fp32 inputs, operands not usable in
   place (B row-major, a column-major C). Every case must come within twice torch's own error against fp64 (plus
   the rounding of C to its dtype); fp16 cases must also beat the error that rounding the inputs to bf16 makes.
2. The rules: for each provisional rule of ``helpers.gpu.gemm.choose`` (swap A and B for small M; narrow tiles for a
   C with few columns; split-K where the pairs fill less than a wave), the chosen launch interleaved against the
   alternative the rule rejects, kernel time from CUDA graphs (bench/torch_matmul.py's sides), 7 rounds each.
3. ``bench/torch_matmul.py --quick`` (gpu.matmul against torch.matmul and cuBLAS over the five classes), bf16, then
   fp16 over the small-M and odd classes.
4. ``pytest tests/gpu/test_matmul.py`` on the GPU (its emulator tests run on the GPU there too: the swapped launches,
   every tile width, the fp32-C builds bit for bit against the bf16 ones, f16 precision), at most 120 s.

Writes OUT/every_shape.json (meta: GPU, driver, clocks, date; the value cases; the rules' ratios; pytest's
outcome), OUT/torch-quick.{json,md}, OUT/torch-quick-f16.{json,md} and OUT/every_shape_pytest.txt. Exits 1 if a
value case or a test fails. Without a Hopper GPU and
torch it prints the cases and each one's choice, and exits 0.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch_matmul as tm  # noqa: E402

from helpers import gpu  # noqa: E402
from helpers.gpu import gemm as mm  # noqa: E402
from helpers.gpu.clocks import Telemetry  # noqa: E402
from helpers.gpu.timing import interleave  # noqa: E402

#: (M, N, K, dtype, layout): dtype of A and B ("bf16", "f16", "f32") and C ("out32": an fp32 `out`); layout
#: "linear" (B = Wᵀ, read in place), "kn" (B row-major K×N: copied), "colC" (C column-major: written transposed)
VALUE_CASES: list[tuple[int, int, int, str, str]] = [
    *[(m, n, k, "bf16", "linear") for m in (1, 8, 17, 64, 128) for n, k in ((4096, 4096), (1031, 2053))],
    (1, 14336, 4096, "bf16", "kn"), (8, 4096, 14336, "bf16", "colC"), (17, 1000, 999, "bf16", "kn"),
    (4096, 16, 4096, "bf16", "linear"), (4093, 33, 1021, "bf16", "linear"), (2000, 64, 8192, "bf16", "kn"),
    (1009, 2003, 4001, "bf16", "linear"), (4093, 4091, 4099, "bf16", "kn"), (127, 5003, 2039, "bf16", "linear"),
    (1000, 3000, 5000, "bf16", "linear"), (3000, 1000, 2000, "bf16", "linear"), (4096, 4096, 4096, "bf16", "linear"),
    (8192, 8192, 8192, "bf16", "linear"), (3072, 3072, 3072, "bf16", "linear"),
    *[(m, n, k, "f16", layout) for (m, n, k), layout in (((1, 4096, 4096), "linear"), ((17, 1031, 2053), "kn"),
                                                          ((512, 4096, 4096), "linear"), ((4096, 4096, 4096), "linear"),
                                                          ((1009, 2003, 4001), "kn"), ((4093, 33, 1021), "linear"),
                                                          ((3000, 1000, 2000), "colC"))],
    (4096, 4096, 4096, "f16", "out32"), (8, 4096, 4096, "f16", "out32"), (1000, 3000, 5000, "bf16", "out32"),
    (64, 2048, 2048, "f32", "kn"), (1000, 1000, 1000, "f32", "kn"),
]

#: (rule, (M, N, K)): shapes where a provisional rule of choose decides
RULE_SHAPES: list[tuple[str, tuple[int, int, int]]] = [
    *[("swap A and B", (m, n, k)) for m, n, k in ((1, 4096, 4096), (8, 14336, 4096), (16, 1024, 1024),
                                                  (32, 4096, 14336), (64, 16384, 16384), (128, 4096, 4096))],
    *[("narrow tiles", (m, n, k)) for m, n, k in ((4096, 16, 4096), (8192, 32, 8192), (4096, 64, 14336))],
    *[("split-K", (m, n, k)) for m, n, k in ((8, 4096, 1024), (32, 2048, 8192), (1, 1024, 16384))],
]


def alternative(rule: str, m: int, n: int, k: int, clusters: int) -> mm.Choice:
    """The launch the rule rejected at this shape: unswapped (the choice as the rule set was before), the 128-wide
    tiles, or whole pairs without split-K."""
    chosen = mm.choose(m, n, k, clusters)
    if rule == "swap A and B":
        bn = mm.NARROW if 2 * mm.pairs(m, n, mm.WIDE) <= clusters else mm.WIDE
        streamk = mm.needs_streamk(m, n, k, clusters, bn)
        return mm.Choice("lab9" if streamk else "lab7", bn, streamk)
    if rule == "narrow tiles":
        mm_, nn = (n, m) if chosen.swapped else (m, n)
        streamk = mm.needs_streamk(mm_, nn, k, clusters, mm.NARROW)
        return mm.Choice("lab9" if streamk else "lab7", mm.NARROW, streamk, chosen.swapped)
    return chosen._replace(streamk=not chosen.streamk)


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]


def value_case(torch: Any, m: int, n: int, k: int, dtype: str, layout: str) -> dict[str, Any]:
    """gpu.matmul and torch.matmul on the same inputs, each against fp64."""
    g = torch.Generator(device="cuda").manual_seed(m * 31 + n * 7 + k)
    t = _torch_dtype(torch, dtype)
    x = torch.randn(m, k, device="cuda", generator=g).to(t)
    w = torch.randn(n, k, device="cuda", generator=g).to(t)
    b = w.T.contiguous() if layout == "kn" else w.T
    if dtype == "f32":  # gpu.matmul rounds fp32 inputs to bf16: its reference is the product of the rounded inputs
        ref = x.to(torch.bfloat16).double() @ b.to(torch.bfloat16).double()
    else:
        ref = x.double() @ b.double()
    theirs = torch.matmul(x, b)
    if layout == "out32":
        out = torch.empty(m, n, device="cuda", dtype=torch.float32)
        ours = mm.matmul(x, b, out=out)
    elif layout == "colC":
        out = torch.empty(n, m, device="cuda", dtype=t).T
        ours = mm.matmul(x, b, out=out)
    else:
        ours = mm.matmul(x, b)
    torch.cuda.synchronize()
    err = float((ours.double() - ref).abs().max())
    err_torch = float((theirs.double() - ref).abs().max())
    scale = float(ref.abs().max())
    # C's own rounding: half an ulp of the largest value in C's dtype
    c_eps = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}[ours.dtype]
    ok = err <= (1e-4 * scale if dtype == "f32" else 2 * err_torch + c_eps * scale) + 1e-6
    row = {"shape": [m, n, k], "dtype": dtype, "layout": layout, "choice": mm.choose(m, n, k).name,
           "out_dtype": str(ours.dtype).replace("torch.", ""), "max_error": err, "torch_max_error": err_torch,
           "max_abs_c": scale}
    if dtype == "f16":
        xb, bb = x.to(torch.bfloat16).double(), b.to(torch.bfloat16).double()
        row["bf16_input_error"] = float((xb @ bb - ref).abs().max())
        ok = ok and err < 0.5 * row["bf16_input_error"]
    row["ok"] = bool(ok)
    return row


def rule_ratio(torch: Any, rule: str, shape: tuple[int, int, int], rounds: int = 7) -> dict[str, Any]:
    """The chosen launch against the rejected one, each a CUDA graph (bench/torch_matmul.py's GraphSide)."""
    m, n, k = shape
    clusters = mm.resident_pairs()
    chosen, other = mm.choose(m, n, k, clusters), alternative(rule, m, n, k, clusters)
    l2 = gpu.device_info().l2_bytes
    sets = max(1, min(16, math.ceil(3 * l2 / ((m * k + n * k + m * n) * 2))))
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    xs = [torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16) for _ in range(sets)]
    ws = [torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16) for _ in range(sets)]
    sides = {}
    for label, choice in (("chosen", chosen), ("rejected", other)):
        cs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        plans = [mm.plan(x, w.T, out=c, choice=choice) for x, w, c in zip(xs, ws, cs, strict=True)]
        for p in plans:
            p()
        gpu.wait()
        ref = xs[0].float() @ ws[0].float().T
        if float((cs[0].float() - ref).abs().max()) > 2e-2 * float(ref.abs().max()) + 2e-3 * math.sqrt(k):
            raise AssertionError(f"{label} launch {choice.name} gives wrong values at {m}×{n}×{k}")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for p in plans[:3]:
            p.on_stream(torch.cuda.current_stream().cuda_stream)()
        end.record()
        torch.cuda.synchronize()
        per_ms = max(start.elapsed_time(end) / min(3, sets), 1e-3)
        launches = max(sets, min(tm.MAX_LAUNCHES, math.ceil(tm.QUICK_BATCH_MS / per_ms)))
        replays = max(3, math.ceil(tm.QUICK_BATCH_MS / (launches * per_ms)))
        sides[label] = tm.GraphSide(torch, lambda i, h, plans=plans: plans[i % sets].on_stream(h)(), launches,
                                    replays)
    with Telemetry() as tel:
        inter = interleave(sides["chosen"], sides["rejected"], rounds=rounds, telemetry=tel,
                           labels=("chosen", "rejected"))
    return {"rule": rule, "shape": list(shape), "chosen": chosen.name, "rejected": other.name,
            **tm.entry(inter)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    for m, n, k, dtype, layout in VALUE_CASES:
        print(f"  value {m}×{n}×{k} {dtype} {layout}: {mm.choose(m, n, k).name}")
    for rule, (m, n, k) in RULE_SHAPES:
        print(f"  rule {rule} {m}×{n}×{k}: {mm.choose(m, n, k).name} against "
              f"{alternative(rule, m, n, k, mm.resident_pairs()).name}")
    try:
        import torch
    except ImportError:
        torch = None
    if not gpu.hopper_available() or torch is None or not torch.cuda.is_available():
        print("skipped: needs a Hopper GPU and torch with CUDA")
        return 0
    info = gpu.device_info()
    driver, max_clock = tm._driver_and_clock()
    result: dict[str, Any] = {"meta": {"gpu": info.name, "sm_count": info.sm_count, "driver": driver,
                                       "driver_cuda": list(info.driver_version), "max_sm_clock_mhz": max_clock,
                                       "torch": torch.__version__, "cublas": gpu.cublas_version(),
                                       "resident_pairs": mm.resident_pairs(),
                                       "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")},
                              "values": [], "rules": []}
    t0 = time.time()
    for m, n, k, dtype, layout in VALUE_CASES:
        try:
            row = value_case(torch, m, n, k, dtype, layout)
        except Exception as e:  # noqa: BLE001 - reported, the others still run
            row = {"shape": [m, n, k], "dtype": dtype, "layout": layout, "ok": False,
                   "failure": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
        result["values"].append(row)
        print(f"value {m}×{n}×{k} {dtype} {layout}: {'ok' if row['ok'] else 'WRONG'} "
              f"{ {k_: v for k_, v in row.items() if k_ not in ('trace', 'shape')} }", flush=True)
    print(f"values: {sum(r['ok'] for r in result['values'])} of {len(result['values'])} ok "
          f"({time.time() - t0:.0f} s)", flush=True)
    (out / "every_shape.json").write_text(json.dumps(result, indent=1) + "\n")
    for rule, shape in RULE_SHAPES:
        try:
            row = rule_ratio(torch, rule, shape)
            print(f"rule {rule} {shape}: {row['chosen']} against {row['rejected']}: {tm._cell(row)}", flush=True)
        except Exception as e:  # noqa: BLE001
            row = {"rule": rule, "shape": list(shape), "failure": f"{type(e).__name__}: {e}"}
            print(f"rule {rule} {shape}: FAILED {row['failure']}", flush=True)
        result["rules"].append(row)
        (out / "every_shape.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"rules done ({time.time() - t0:.0f} s)", flush=True)
    tm.main(["--quick", "--write", str(out / "torch-quick")])
    print(f"bf16 benchmark done ({time.time() - t0:.0f} s)", flush=True)
    tm.main(["--quick", "--dtype", "f16", "--only", "small M", "odd", "--write", str(out / "torch-quick-f16")])
    torch.cuda.empty_cache()
    try:
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu or not gpu",
                              "tests/gpu/test_matmul.py"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        log, rc = run.stdout + run.stderr, run.returncode
    except subprocess.TimeoutExpired as e:
        log, rc = f"{e.stdout or ''}{e.stderr or ''}\ntimed out after 120 s", -1
    (out / "every_shape_pytest.txt").write_text(log if isinstance(log, str) else str(log))
    result["pytest"] = {"rc": rc, "tail": str(log)[-1500:]}
    (out / "every_shape.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"pytest tests/gpu/test_matmul.py: rc {rc}\n{str(log)[-600:]}", flush=True)
    print(f"all done ({time.time() - t0:.0f} s)", flush=True)
    return 0 if all(r["ok"] for r in result["values"]) and rc == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
