"""``gpu.matmul`` against ``torch.matmul`` (what a user would call instead) over named classes of shapes.

    python bench/torch_matmul.py [--quick] [--only CLASS ...] [--dtype bf16|f16] [--rounds 9] [--write PATH]

Kernel time only: each side is a CUDA graph of back-to-back launches on one stream (so Python's launch cost is not
timed), replayed and timed with CUDA events; the launches rotate over enough input sets to touch about three L2s.
``gpu.matmul``'s side is its prepared launches (``helpers.gpu.gemm.plan``: the copies an operand needs and the GEMM
``choose`` picks) moved onto the capturing stream; ``gpu.matmul`` itself waits for the GPU after each call, which a
graph cannot hold (should the launches refuse to be captured, every side of that shape is launched from Python
instead, and the report says so). ``torch.matmul``'s side is torch's own call captured the same way, and cuBLAS
called directly (the course's ctypes binding) a third, where its capture succeeds. The operands are a linear layer's:
A = X (M×K, row-major) and B = Wᵀ with W (N×K, row-major), which both libraries read in place; C is M×N in the
inputs' dtype. Per shape: gpu.matmul and torch.matmul interleaved (``rounds`` rounds, the side going first
alternating, median of the per-round ratios with min–max, SM clock and power of each side from NVML); torch.matmul
against itself the same way (the noise floor); cuBLAS against torch.matmul. The values are checked against
torch.matmul in fp32 before timing. ``--quick`` runs a subset of every class with fewer rounds (under 4 minutes on
an H200). Writes PATH.json and PATH.md (default bench/results/<date>-torch-<gpu>) with the GPU, driver, clocks and
date. Without a Hopper GPU and torch it prints the plan (the classes, each shape's choice) and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402
from helpers.gpu import gemm as gpu_matmul  # noqa: E402 - gpu.matmul, the function, lives here
from helpers.gpu.timing import Interleaved, interleave  # noqa: E402

Shape = tuple[int, int, int]
HIDDEN, FFN, KV = 4096, 14336, 1024  # a transformer layer: hidden 4096, FFN 14336, grouped K/V of 8 heads × 128
TOKENS = (1, 16, 128, 512, 2048, 8192)
SMALL_M = (1, 8, 16, 32, 64, 128, 256)
SMALL_M_NK = ((1024, 1024), (4096, 4096), (14336, 4096), (4096, 14336), (16384, 16384))


def _layer(tokens: int) -> list[tuple[str, Shape]]:
    return [(f"{tokens} tok: Q / out proj", (tokens, HIDDEN, HIDDEN)),
            (f"{tokens} tok: K or V proj", (tokens, KV, HIDDEN)),
            (f"{tokens} tok: FFN up", (tokens, FFN, HIDDEN)), (f"{tokens} tok: FFN down", (tokens, HIDDEN, FFN))]


def _cube(s: int) -> tuple[str, Shape]:
    return f"{s}³", (s, s, s)


#: class → [(name, (M, N, K))]
CLASSES: dict[str, list[tuple[str, Shape]]] = {
    "squares": [_cube(s) for s in (1024, 2048, 3072, 4096, 6144, 8192)],
    "transformer": [row for t in TOKENS for row in _layer(t)],
    "small M": [(f"M={m} N={n} K={k}", (m, n, k)) for m in SMALL_M for n, k in SMALL_M_NK],
    "odd": [_cube(4000), _cube(4097), ("primes 1009×2003×4001", (1009, 2003, 4001)),
            ("primes 4093×4091×4099", (4093, 4091, 4099)), ("primes 8191×8191×1021", (8191, 8191, 1021)),
            ("primes 127×5003×2039", (127, 5003, 2039)), ("odd 3001×1999×777", (3001, 1999, 777))],
    "few tiles": [("1000×3000×5000", (1000, 3000, 5000)), ("3000×1000×2000", (3000, 1000, 2000)),
                  ("512×1024×4096", (512, 1024, 4096)), ("1024×1024×16384", (1024, 1024, 16384)),
                  ("768×768×8192", (768, 768, 8192)), ("256×2048×8192", (256, 2048, 8192))],
}
#: --quick: these shapes of each class
QUICK = {
    "squares": ["3072³", "4096³", "8192³"],
    "transformer": ["1 tok: FFN up", "128 tok: Q / out proj", "2048 tok: FFN down", "8192 tok: FFN up"],
    "small M": ["M=1 N=4096 K=4096", "M=8 N=14336 K=4096", "M=16 N=1024 K=1024", "M=32 N=4096 K=14336",
                "M=64 N=16384 K=16384", "M=128 N=4096 K=4096", "M=256 N=14336 K=4096"],
    "odd": ["4000³", "primes 1009×2003×4001", "primes 127×5003×2039"],
    "few tiles": ["1000×3000×5000", "3000×1000×2000", "1024×1024×16384"],
}
ROUNDS, QUICK_ROUNDS = 9, 5
#: the least GPU time of one side's batch (ms): several NVML samples fall inside it
BATCH_MS, QUICK_BATCH_MS = 40.0, 15.0
#: launches captured in one graph: at most this many
MAX_LAUNCHES = 200
SIDES = ("gpu.matmul", "torch.matmul", "torch.matmul again", "cuBLAS")


def selected(wanted: list[str] | None, quick: bool) -> list[tuple[str, str, Shape]]:
    """(class, name, shape) of the classes in `wanted` (all for None), only the :data:`QUICK` ones with `quick`."""
    names = list(CLASSES) if not wanted else wanted
    unknown = set(names) - set(CLASSES)
    if unknown:
        raise SystemExit(f"unknown classes {sorted(unknown)}: pick from {list(CLASSES)}")
    return [(c, name, shape) for c in names for name, shape in CLASSES[c] if not quick or name in QUICK[c]]


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def entry(inter: Interleaved) -> dict[str, Any]:
    """One interleaved comparison as the results file holds it: ratio = b's time over a's (above 1: a faster)."""
    d: dict[str, Any] = {"ratio": inter.ratio, "ratio_range": list(inter.ratio_range), "rounds": inter.rounds,
                         "round_ratios": inter.ratios, "a_ms": inter.a_ms, "b_ms": inter.b_ms, "first": inter.first,
                         "clock_differs": inter.clock_differs}
    for side, tel in (("a", inter.a_telemetry), ("b", inter.b_telemetry)):
        d[f"{side}_sm_clock_mhz"] = tel.mhz_median if tel else None
        d[f"{side}_sm_clock_range"] = [min(tel.mhz), max(tel.mhz)] if tel and tel.mhz else None
        d[f"{side}_power_w"] = tel.watts_median if tel else None
    return d


def compare(sides: dict[str, Callable[[], list[float]]], rounds: int,
            telemetry: Callable[[], Any] | None = None) -> dict[str, dict[str, Any]]:
    """The three comparisons of one shape from its sides (each call: one batch, the milliseconds of each launch):
    gpu.matmul against torch.matmul, torch.matmul against itself (the noise floor), cuBLAS against torch.matmul
    (when that side exists). ``telemetry`` makes a fresh (unentered) clock and power sampler per comparison."""
    pairs = [("torch", "gpu.matmul", "torch.matmul"), ("noise", "torch.matmul", "torch.matmul again")]
    if "cuBLAS" in sides:
        pairs.append(("cublas", "cuBLAS", "torch.matmul"))
    out = {}
    for key, a, b in pairs:
        with (telemetry() if telemetry else contextlib.nullcontext()) as tel:
            out[key] = entry(interleave(sides[a], sides[b], rounds=rounds, telemetry=tel, labels=(a, b)))
    return out


def summarize(rows: list[dict]) -> dict[str, dict[str, float | None]]:
    """Geometric means of gpu.matmul ÷ torch.matmul (as speed: above 1, gpu.matmul faster), of the noise floor and
    of cuBLAS ÷ torch.matmul, over all rows and per class."""
    def means(rs: list[dict]) -> dict[str, float | None]:
        return {key: geomean([r[key]["ratio"] for r in rs if r.get(key)]) for key in ("torch", "noise", "cublas")}

    return {"all": means(rows)} | {c: means([r for r in rows if r["class"] == c])
                                   for c in dict.fromkeys(r["class"] for r in rows)}


def _cell(d: dict | None, failure: str | None = None) -> str:
    if not d:
        return (failure or "—")[:50]
    lo, hi = d["ratio_range"]
    return f"{d['ratio']:.3f} [{lo:.3f}–{hi:.3f}]" + (" (clocks differ)" if d.get("clock_differs") else "")


def render(result: dict) -> str:
    lines = [f"# gpu.matmul against torch.matmul ({result['dtype']}), kernel time from CUDA graphs", "",
             f"- GPU: {result['gpu']} ({result['sm_count']} SMs), driver {result['driver']} (CUDA "
             f"{'.'.join(map(str, result['driver_cuda']))}), torch {result['torch']} (CUDA {result['torch_cuda']}), "
             f"cuBLAS {result['cublas']}, max SM clock {result['max_sm_clock_mhz']} MHz",
             f"- date: {result['date']}", f"- method: {result['method']}", "",
             "Ratios are speed (torch.matmul's time ÷ the other's: above 1, the other is faster), median of the "
             "per-round ratios [min–max].", "",
             "| class | shape | M×N×K | chosen | gpu.matmul × torch | torch × itself | cuBLAS × torch | "
             "gpu.matmul µs | torch µs | SM MHz gpu.matmul / torch | W gpu.matmul / torch | max error |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["shapes"]:
        m, n, k = r["shape"]
        t = r.get("torch") or {}
        us = (f"{1e3 * t['a_ms']:.1f}", f"{1e3 * t['b_ms']:.1f}") if t else ("—", "—")
        mhz = (f"{t['a_sm_clock_mhz']:.0f} / {t['b_sm_clock_mhz']:.0f}"
               if t.get("a_sm_clock_mhz") and t.get("b_sm_clock_mhz") else "—")
        watts = (f"{t['a_power_w']:.0f} / {t['b_power_w']:.0f}" if t and t.get("a_power_w") and t.get("b_power_w")
                 else "—")
        err = f"{r['max_error']:.3g}" if r.get("max_error") is not None else r.get("check", "—")[:40]
        if r.get("graphs") is False:
            err += " (no graphs: launched from Python)"
        lines.append(f"| {r['class']} | {r['name']} | {m}×{n}×{k} | {r['chosen']} | "
                     f"{_cell(r.get('torch'), r.get('failure'))} | {_cell(r.get('noise'))} | "
                     f"{_cell(r.get('cublas'), r.get('cublas_failure'))} | {us[0]} | {us[1]} | {mhz} | {watts} | "
                     f"{err} |")
    lines += ["", "Geometric means of the median ratios:", "",
              "| shapes | gpu.matmul × torch | torch × itself | cuBLAS × torch |", "|---|---:|---:|---:|"]
    for group, g in result["geomean"].items():
        lines.append(f"| {group} | " + " | ".join(f"{g[c]:.3f}" if g.get(c) else "—"
                                                  for c in ("torch", "noise", "cublas")) + " |")
    lines += ["", "chosen: the kernel gpu.matmul's choice rule picks (helpers.gpu.gemm.choose): lab7 / lab9 at "
              "128×256 tiles, -128 / -64 / -32 / -16 narrower tiles, -swapAB where A and B swap places "
              "(Cᵀ = B·Aᵀ)."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ on the GPU
def _driver_and_clock() -> tuple[str, str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout.splitlines()[0]
        driver, clock = (s.strip() for s in out.split(",", 1))
        return driver, clock.replace(" MHz", "")
    except Exception:  # noqa: BLE001 - the record says it could not be read
        return "?", "?"


class GraphSide:
    """One side of a comparison: `launches` back-to-back launches (``enqueue(i, stream)`` enqueues the i-th on
    the stream whose handle it gets) captured into a CUDA graph on a torch stream, after a few uncaptured ones on
    that stream (torch's advice: libraries set up their per-stream state outside the capture); each call replays
    the graph `replays` times, timed with CUDA events, and returns the milliseconds per launch of each replay."""

    def __init__(self, torch: Any, enqueue: Callable[[int, int], None], launches: int, replays: int) -> None:
        self.torch, self.launches, self.replays = torch, launches, replays
        self.stream = torch.cuda.Stream()
        self.graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.stream(self.stream):
            for i in range(min(3, launches)):
                enqueue(i, self.stream.cuda_stream)
            torch.cuda.synchronize()
            with torch.cuda.graph(self.graph, stream=self.stream):
                handle = torch.cuda.current_stream().cuda_stream
                for i in range(launches):
                    enqueue(i, handle)
        torch.cuda.synchronize()
        self.graph.replay()  # one untimed replay
        torch.cuda.synchronize()

    def __call__(self) -> list[float]:
        torch = self.torch
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.replays)]
        with torch.cuda.stream(self.stream):
            for begin, end in events:
                begin.record()
                self.graph.replay()
                end.record()
        torch.cuda.synchronize()
        return [b.elapsed_time(e) / self.launches for b, e in events]


class EagerSide(GraphSide):
    """The fallback where a side's launches cannot be captured into a CUDA graph: each replay enqueues the
    `launches` launches from Python on the side's stream between the two events (so Python's launch cost is timed
    where a launch is shorter than it)."""

    def __init__(self, torch: Any, enqueue: Callable[[int, int], None], launches: int, replays: int) -> None:
        self.torch, self.launches, self.replays, self.enqueue = torch, launches, replays, enqueue
        self.stream = torch.cuda.Stream()
        torch.cuda.synchronize()

    def __call__(self) -> list[float]:
        torch = self.torch
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.replays)]
        with torch.cuda.stream(self.stream):
            handle = self.stream.cuda_stream
            for i in range(min(3, self.launches)):  # untimed
                self.enqueue(i, handle)
            for begin, end in events:
                begin.record()
                for i in range(self.launches):
                    self.enqueue(i, handle)
                end.record()
        torch.cuda.synchronize()
        return [b.elapsed_time(e) / self.launches for b, e in events]


def _sides(torch: Any, shape: Shape, dtype: Any, batch_ms: float, row: dict) -> dict[str, Callable[[], list[float]]]:
    """The graph sides of one shape, after checking gpu.matmul's values against torch.matmul's (fp32)."""
    from helpers.gpu import cublas

    m, n, k = shape
    l2 = gpu.device_info().l2_bytes
    sets = max(1, min(16, math.ceil(3 * l2 / ((m * k + n * k + m * n) * 2))))
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 13 + k)
    xs = [torch.randn(m, k, device="cuda", generator=g).to(dtype) for _ in range(sets)]
    ws = [torch.randn(n, k, device="cuda", generator=g).to(dtype) for _ in range(sets)]
    cs = [torch.empty(m, n, device="cuda", dtype=dtype) for _ in range(sets)]
    plans = [gpu_matmul.plan(x, w.T, out=c) for x, w, c in zip(xs, ws, cs, strict=True)]
    row["chosen"] = plans[0].choice.name if plans[0].choice else "—"
    torch.cuda.synchronize()
    for p in plans:  # on the course stream: compiles, loads, checks
        p()
    gpu.wait()
    ref = xs[0].float() @ ws[0].float().T
    row["max_error"] = float((cs[0].float() - ref).abs().max())
    tol = float(2e-2 * ref.abs().max() + 2e-3 * math.sqrt(k))
    if not row["max_error"] <= tol:
        raise AssertionError(f"gpu.matmul's values differ from torch.matmul's by {row['max_error']:.3g} (> {tol:.3g})")
    # launches per graph: about batch_ms of GPU time, from torch's own time (events around a few calls)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(5):
        torch.matmul(xs[i % sets], ws[i % sets].T)
    end.record()
    torch.cuda.synchronize()
    per_ms = max(start.elapsed_time(end) / 5, 1e-3)
    launches = max(sets, min(MAX_LAUNCHES, math.ceil(batch_ms / per_ms)))
    replays = max(3, math.ceil(batch_ms / (launches * per_ms)))

    def ours(i: int, handle: int) -> None:
        plans[i % sets].on_stream(handle)()

    def theirs(i: int, handle: int) -> None:
        torch.matmul(xs[i % sets], ws[i % sets].T)

    side: type[GraphSide] = GraphSide
    try:
        sides = {"gpu.matmul": GraphSide(torch, ours, launches, replays)}
        row["graphs"] = True
    except Exception as e:  # noqa: BLE001 - said in the results, then timed without graphs on both sides
        row["graphs"] = False
        row["graph_failure"] = f"{type(e).__name__}: {e}"
        torch.cuda.synchronize()
        side = EagerSide
        sides = {"gpu.matmul": EagerSide(torch, ours, launches, replays)}
    sides |= {"torch.matmul": side(torch, theirs, launches, replays),
              "torch.matmul again": side(torch, theirs, launches, replays)}
    if dtype == torch.bfloat16 and side is GraphSide:
        try:
            views = [(gpu_matmul.Matrix(x.data_ptr(), (m, k), (2 * k, 2), gpu.bfloat16, x),
                      gpu_matmul.Matrix(w.data_ptr(), (n, k), (2 * k, 2), gpu.bfloat16, w),
                      gpu_matmul.Matrix(c.data_ptr(), (m, n), (2 * n, 2), gpu.bfloat16, c))
                     for x, w, c in zip(xs, ws, cs, strict=True)]
            calls = [cublas.gemm_launcher(*v) for v in views]

            def direct(i: int, handle: int) -> None:
                cublas._lib().cublasSetStream_v2(cublas._handle(), handle)
                calls[i % sets]()

            try:
                sides["cuBLAS"] = GraphSide(torch, direct, launches, replays)
            finally:
                cublas._lib().cublasSetStream_v2(cublas._handle(), int(gpu.current()["stream_handle"]))
        except Exception as e:  # noqa: BLE001 - the other sides are still timed
            row["cublas_failure"] = f"cuBLAS not captured: {type(e).__name__}: {e}"
    row.update(sets=sets, launches_per_graph=launches, replays_per_batch=replays)
    return sides


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", default=None, help=f"classes: {', '.join(CLASSES)}")
    p.add_argument("--quick", action="store_true", help="a subset of every class, fewer rounds, shorter batches")
    p.add_argument("--dtype", choices=("bf16", "f16"), default="bf16")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--write", type=Path, default=None, help="write PATH.json and PATH.md")
    args = p.parse_args(argv)
    shapes = selected(args.only, args.quick)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    batch_ms = QUICK_BATCH_MS if args.quick else BATCH_MS
    for cls, name, (m, n, k) in shapes:
        print(f"  {cls:12} {name:28} {m}×{n}×{k} → {gpu_matmul.choose(m, n, k).name}")
    try:
        import torch
    except ImportError:
        torch = None
    if not gpu.hopper_available() or torch is None or not torch.cuda.is_available():
        why = gpu.no_hopper_reason() if not gpu.hopper_available() else "torch with CUDA is not installed"
        print(f"timing skipped: {why}")
        return 0
    from helpers.gpu.clocks import Telemetry

    info = gpu.device_info()
    driver, max_clock = _driver_and_clock()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    now = dt.datetime.now(dt.UTC)
    result: dict[str, Any] = {
        "gpu": info.name, "sm_count": info.sm_count, "driver": driver, "driver_cuda": list(info.driver_version),
        "max_sm_clock_mhz": max_clock, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "cublas": gpu.cublas_version(), "dtype": args.dtype, "date": now.strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick, "rounds": rounds,
        "method": f"linear-layer operands (A = X, B = Wᵀ, both read in place), C in the inputs' dtype; each side a "
                  f"CUDA graph of back-to-back launches on one stream over input sets touching >= 3x L2, replayed in "
                  f"batches of >= {batch_ms:g} ms; sides interleaved for {rounds} rounds, the first alternating; "
                  "ratio = median of the per-round ratios [min-max]; SM clock and power per side (NVML); noise = "
                  "torch.matmul against itself the same way",
        "shapes": []}
    for cls, name, shape in shapes:
        row: dict[str, Any] = {"class": cls, "name": name, "shape": list(shape),
                               "chosen": gpu_matmul.choose(*shape).name}
        print(f"{cls}: {name}", flush=True)
        try:
            sides = _sides(torch, shape, dtype, batch_ms, row)
            row.update(compare(sides, rounds, Telemetry))
            print(f"  {row['chosen']}: gpu.matmul × torch {_cell(row['torch'])}; torch × itself "
                  f"{_cell(row['noise'])}; cuBLAS × torch {_cell(row.get('cublas'), row.get('cublas_failure'))}",
                  flush=True)
        except Exception as e:  # noqa: BLE001 - one failing shape is reported, the others still run
            row["failure"] = f"{type(e).__name__}: {e}"
            print(f"  FAILED: {row['failure']}", flush=True)
        finally:
            torch.cuda.empty_cache()
        result["shapes"].append(row)
    result["geomean"] = summarize([r for r in result["shapes"] if r.get("torch")])
    md = render(result)
    print(md)
    gpu_tag = info.name.lower().replace("nvidia", "").strip().split()[0] if info.name else "gpu"
    path = args.write or ROOT / "bench" / "results" / f"{now:%Y-%m-%d}-torch-{gpu_tag}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    path.with_suffix(".md").write_text(md)
    print(f"wrote {path}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

