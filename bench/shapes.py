"""The course's final kernel over a set of shapes people run, each interleaved with cuBLAS, with the noise floor.

    python bench/shapes.py [--quick] [--only NAME|GROUP|small ...] [--rounds 9] [--write bench/results/NAME]

For every shape of :data:`SHAPES`: Lab 7 (data-parallel) and Lab 9 (Stream-K), both with 128×256 tiles, and, where
the 128×256 pairs fit in one wave of clusters (the shapes where ``gpu.matmul`` picks 128×128 tiles, or nearly), Lab
9 with 128×128 tiles launched as ``gpu.matmul`` would launch it (Stream-K, or one cluster per pair when the pairs
fill their waves), each interleaved with cuBLAS (same bf16 output, same rotated inputs, >= 7 rounds, median of the
per-round ratios with min-max, SM clock and power of each side); cuBLAS against itself the same way (the noise
floor), and which of them ``gpu.matmul`` chooses there (:func:`helpers.gpu.gemm.choose`). Then the geometric mean
of each column over the set: "chosen" is the before/after of the choice. ``--only`` takes shape names, group names
or ``small`` (:data:`SMALL`: the shapes of the 128×128 column). Writes NAME.json and NAME.md. Without a Hopper
GPU it compiles the kernels, prints the plan and exits 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import ladder  # noqa: E402

from helpers import gpu  # noqa: E402
from helpers.gpu import gemm as gpu_matmul  # noqa: E402 - gpu.matmul, the function, lives here
from helpers.hopper import parts  # noqa: E402

HIDDEN, FFN, KV = 4096, 14336, 1024  # a transformer layer: hidden 4096, FFN 14336, grouped K/V of 8 heads × 128


def _layer(tokens: int) -> list[tuple[str, str, tuple[int, int, int]]]:
    """The GEMMs of one layer at `tokens` tokens, C (tokens × out) = X (tokens × in) · Wᵀ."""
    g = f"layer, {tokens} tokens"
    return [(f"{g}: Q / output projection", g, (tokens, HIDDEN, HIDDEN)),
            (f"{g}: K or V projection (grouped)", g, (tokens, KV, HIDDEN)),
            (f"{g}: FFN up / gate", g, (tokens, FFN, HIDDEN)),
            (f"{g}: FFN down", g, (tokens, HIDDEN, FFN))]


#: (name, group, (M, N, K)). The wave-quantized ones leave the last wave of 256×256 tile pairs mostly empty on
#: the H100's 66 two-block clusters: 16 pairs; 68 pairs (a second wave of 2); 136 pairs (a third wave of 4).
SHAPES: list[tuple[str, str, tuple[int, int, int]]] = [
    ("2048³", "square", (2048, 2048, 2048)),
    ("4096³", "square", (4096, 4096, 4096)),
    ("8192³", "square", (8192, 8192, 8192)),
    ("16384×16384×8192", "square", (16384, 16384, 8192)),
    *_layer(512), *_layer(2048), *_layer(8192),
    ("1024×1024×16384", "wave-quantized", (1024, 1024, 16384)),
    ("1024×4352×8192", "wave-quantized", (1024, 4352, 8192)),
    ("4352×2048×8192", "wave-quantized", (4352, 2048, 8192)),
]
QUICK = ["4096³", "8192³", "1024×4352×8192"]
#: shapes where cuBLAS's own time is bimodal on the H100: at 512×1024×4096 it runs either a 64×64-tile kernel of
#: 9.8 µs or a slower one, run to run (cuBLAS against itself 0.993× [0.586–1.037], 2026-11-26), so a ratio there
#: says which mode cuBLAS was in (0.73× in one run, 1.04× and 1.41× in others); the summary gives the mean
#: without them beside the mean over all
CUBLAS_BIMODAL = {(512, 1024, 4096)}
STEADY = "all but cuBLAS's bimodal shapes"
#: columns: Lab 7 and Lab 9 at 128×256 tiles, 128×128 tiles (launched as gpu.matmul launches them)
COLUMNS = ("lab7", "lab9", "narrow")


def narrow_measured(m: int, n: int, clusters: int | None = None) -> bool:
    """The 128×128 column is measured where the 128×256 pairs fit in one wave of the GPU's clusters (``clusters``;
    this GPU's resident pairs by default): where ``choose`` picks 128×128 tiles (twice the pairs still fit in one
    wave) and the shapes next to those."""
    return gpu_matmul.pairs(m, n) <= (clusters or gpu_matmul.resident_pairs())


#: the shapes with few 128×256 tiles on the H100 SXM's 66 pairs of SMs: ``--only small``
SMALL = [name for name, _, (m, n, _) in SHAPES
         if narrow_measured(m, n, parts.PROFILES["h100-sxm"].resident(2))]


def narrow_choice(m: int, n: int, k: int) -> gpu_matmul.Choice:
    """How the 128×128 column runs: Lab 9's kernel with Stream-K, or Lab 7's on whole pairs where they fill their
    waves (the second question of ``choose``)."""
    streamk = gpu_matmul.needs_streamk(m, n, k, bn=gpu_matmul.NARROW)
    return gpu_matmul.Choice("lab9" if streamk else "lab7", gpu_matmul.NARROW, streamk)


def column_of(chosen: str) -> str:
    """The column that holds the kernel ``choose`` named (``Choice.name``): lab7, lab9 or narrow."""
    return chosen if chosen in ("lab7", "lab9") else "narrow"


def selected(wanted: list[str] | None) -> list[tuple[str, str, tuple[int, int, int]]]:
    """The shapes named in `wanted` (shape names, group names or ``small``), all of them for None."""
    if wanted is None:
        return list(SHAPES)
    names = set(wanted) | (set(SMALL) if "small" in wanted else set())
    known = {n for n, _, _ in SHAPES} | {g for _, g, _ in SHAPES} | {"small"}
    if set(wanted) - known:
        raise SystemExit(f"unknown shapes or groups {sorted(set(wanted) - known)}: "
                         f"pick from {sorted(known)}")
    return [s for s in SHAPES if s[0] in names or s[1] in names]


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(rows: list[dict]) -> dict[str, Any]:
    """Geometric means of the ratios over the rows (all, and per group) for lab7, lab9, the chosen kernel and the
    noise floor."""
    def means(rs: list[dict]) -> dict[str, float | None]:
        chosen = [r.get(column_of(r["chosen"])) for r in rs]
        return {col: geomean([r[col]["ratio"] for r in rs if r.get(col)]) for col in (*COLUMNS, "noise")} | {
            "chosen": geomean([c["ratio"] for c in chosen if c])}

    groups = sorted({r["group"] for r in rows})
    steady = [r for r in rows if tuple(r.get("shape", ())) not in CUBLAS_BIMODAL]
    return ({"all": means(rows)} | ({STEADY: means(steady)} if len(steady) < len(rows) else {})
            | {g: means([r for r in rows if r["group"] == g]) for g in groups})


def render(result: dict) -> str:
    lines = ["# The final kernel over the shape set, beside cuBLAS (interleaved, same run)", "",
             f"- GPU: {result['gpu']} ({result['sm_count']} SMs), driver CUDA "
             f"{'.'.join(map(str, result['driver_cuda']))}, cuBLAS {result['cublas']}", f"- date: {result['date']}",
             f"- method: {result['method']}", "",
             "| shape | M×N×K | Lab 7 × cuBLAS | Lab 9 × cuBLAS | 128×128 × cuBLAS | chosen | "
             "cuBLAS × itself | cuBLAS TFLOP/s | SM MHz Lab 7 / cuBLAS | W Lab 7 / cuBLAS |",
             "|---|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in result["shapes"]:
        m, n, k = r["shape"]
        cells = []
        for col in (*COLUMNS, "noise"):
            d = r.get(col)
            cells.append(ladder._range(d) + (" (clocks differ)" if d.get("clock_differs") else "") if d else
                         r.get(f"{col}_failure", "—")[:60])
        d6 = r.get("lab7") or {}
        (c6, w6), (cc, wc) = (ladder._side(d6), ladder._side(d6, "cublas_")) if d6 else (("—", "—"), ("—", "—"))
        cub = f"{d6['cublas_tflops']:.0f}" if d6 else "—"
        if r.get("narrow_launch") and r.get("narrow"):
            cells[2] += f" ({r['narrow_launch']})"
        lines.append(f"| {r['name']} | {m}×{n}×{k} | {cells[0]} | {cells[1]} | {cells[2]} | {r['chosen']} | "
                     f"{cells[3]} | {cub} | {c6} / {cc} | {w6} / {wc} |")
    lines += ["", "Geometric means of the median ratios (each column over the shapes it was measured on):", "",
              "| shapes | Lab 7 | Lab 9 | 128×128 | chosen per shape | cuBLAS × itself |",
              "|---|---:|---:|---:|---:|---:|"]
    for group, g in result["geomean"].items():
        f = [f"{g[c]:.3f}" if g.get(c) else "—" for c in (*COLUMNS, "chosen", "noise")]
        lines.append(f"| {group} | {' | '.join(f)} |")
    lines += ["", "chosen: lab7 and lab9 at 128×256 tiles; lab9-128 is Lab 9 at 128×128 tiles with Stream-K, "
              "lab7-128 Lab 7 at 128×128 tiles (one consumer warpgroup per tile) on one cluster per pair."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", default=None,
                   help="shape names, group names, or small (the shapes with few 128×256 tiles)")
    p.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    p.add_argument("--repeat", type=int, default=60, help="timed runs per side, spread over the rounds")
    p.add_argument("--rounds", type=int, default=ladder.ROUNDS)
    p.add_argument("--write", type=Path, default=None, help="write NAME.md and NAME.json")
    args = p.parse_args(argv)
    shapes = selected(args.only or (QUICK if args.quick else None))
    kernels = {"lab7": gpu_matmul.course_kernel("lab7"), "lab9": gpu_matmul.course_kernel("lab9"),
               "narrow": gpu_matmul.course_kernel("lab9", gpu_matmul.NARROW)}
    narrow_kernels = {"lab9": kernels["narrow"], "lab7": gpu_matmul.course_kernel("lab7", gpu_matmul.NARROW)}
    for style, k in kernels.items():
        print(f"{style}: {k.report.summary()}")
    for name, _, (m, n, k) in shapes:
        print(f"  {name:44} {m}×{n}×{k}: 128×256 pairs {gpu_matmul.pairs(m, n)} "
              f"(waves {gpu_matmul.wave_efficiency(m, n):.0%} full), 128×128 pairs "
              f"{gpu_matmul.pairs(m, n, gpu_matmul.NARROW)} "
              f"({gpu_matmul.wave_efficiency(m, n, bn=gpu_matmul.NARROW):.0%}) → {gpu_matmul.choose(m, n, k).name}")
    if not gpu.hopper_available():
        print(f"compiled; timing skipped: no sm_90 GPU ({gpu.no_hopper_reason()})")
        return 0
    info = gpu.device_info()
    result: dict[str, Any] = {
        "gpu": info.name, "sm_count": info.sm_count, "driver_cuda": list(info.driver_version),
        "nvrtc": list(gpu.nvrtc_version() or ()), "cublas": gpu.cublas_version(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "method": "as bench/ladder.py: bf16 C both sides, inputs rotated over >= 3x L2, kernel and cuBLAS "
                  f"interleaved for {max(args.rounds, 7)} rounds, median of per-round ratios [min-max], SM clock and "
                  "power per side (NVML); noise = cuBLAS against itself the same way; chosen = gpu.matmul's choice",
        "kernels": {s: {"file": f"bench/kernels/{gpu_matmul.KERNELS[s.split('-')[0]][0]}",
                        "options": list(kern.options),
                        "registers": kern.report.registers,
                        "spills": kern.report.spill_stores + kern.report.spill_loads}
                    for s, kern in {"lab7": kernels["lab7"], "lab9": kernels["lab9"],
                                    **{f"{st}-128": kn for st, kn in narrow_kernels.items()}}.items()},
        "streamk_below": gpu_matmul.STREAMK_BELOW, "streamk_last_wave": gpu_matmul.STREAMK_LAST_WAVE,
        "streamk_min_saved_steps": gpu_matmul.STREAMK_MIN_SAVED_STEPS,
        "cublas_bimodal": sorted(list(s) for s in CUBLAS_BIMODAL), "steady_key": STEADY, "shapes": []}
    for name, group, shape in shapes:
        m, n, k = shape
        choice = gpu_matmul.choose(m, n, k)
        row: dict[str, Any] = {"name": name, "group": group, "shape": list(shape), "chosen": choice.name,
                               "wave_efficiency": gpu_matmul.wave_efficiency(m, n),
                               "narrow_wave_efficiency": gpu_matmul.wave_efficiency(m, n, bn=gpu_matmul.NARROW)}
        print(name, flush=True)
        for style, kern in kernels.items():
            streamk = True
            if style == "narrow":
                if not narrow_measured(m, n) and column_of(choice.name) != "narrow":
                    continue
                row["narrow_launch"] = narrow_choice(m, n, k).name
                streamk = narrow_choice(m, n, k).streamk
                kern = narrow_kernels[narrow_choice(m, n, k).kernel]
            try:
                row[style] = ladder.speed_entry(gpu.gemm_benchmark(
                    lambda a, b, c, kern=kern, streamk=streamk: gpu_matmul.launcher(kern, a, b, c, streamk=streamk),
                    m, n, k, out_dtype=gpu.bfloat16, warmup=5, repeat=args.repeat, rounds=args.rounds))
                print(ladder.line(style, row[style]), flush=True)
            except Exception as e:  # noqa: BLE001 - a failing kernel is reported, the others still run
                row[f"{style}_failure"] = f"{type(e).__name__}: {e}"
                print(f"  {style} FAILED: {row[f'{style}_failure']}", flush=True)
        row["noise"] = ladder.noise_floor(shape, args.repeat, rounds=args.rounds)
        result["shapes"].append(row)
    result["geomean"] = summarize(result["shapes"])
    md = render(result)
    print(md)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        args.write.with_suffix(".md").write_text(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
