"""Truth from silicon for the executor's tensor-core types and the instructions public kernels use around them.

    bash tools/h100/run.sh tensor_types        # on a machine with one Hopper GPU (H100 or H200), repository root
    python tools/h100/tensor_types.py OUT --fake   # without a GPU: random "outputs", to check plumbing and sizes
    python tools/h100/tensor_types.py OUT --dry --section mma   # one section on the executor (slow for wgmma)
    -> OUT/tensor_types_h200.json + OUT/tensor_types_h200.npz (copy both to tests/data/;
       tests/ptx/test_tensor_types.py runs every case on the executor and compares bit for bit)

The probe kernels and their inputs are tests/ptx/tensor_probes.py (compiled with NVRTC through helpers.gpu):

- wgmma: f16 (f32 and f16 accumulators, every N from 8 to 256), bf16, tf32, e4m3/e5m2 (all four pairings, f32
  and f16 accumulators), s8/u8 (s32); A from shared memory and from registers; negate and transpose immediates;
  scale-d 0 and 1; random values, a sprinkling of special values (NaN payloads, infinities, subnormals),
  tiny values (subnormal results) and large cancelling terms (the accumulation order and its rounding);
- mma.sync: every shape and type sm_90 takes (f16, bf16, tf32, e4m3/e5m2, s8/u8, s4/u4, b1, f64);
- wmma (the PTX <mma.h> compiles to: load a/b/c, mma, store d) in f16, bf16, tf32 and s8, three shapes;
- ldmatrix / stmatrix (.x1 .x2 .x4, .trans) and movmatrix, on random row addresses;
- cp.async (.ca/.cg, 4/8/16 bytes, source sizes, the ignore-src predicate, an L2 hint) in three commit groups,
  read after each wait_group;
- special functions (ex2, rcp, rsqrt, sqrt, tanh, lg2, sin, cos approximations; f32 with and without .ftz, and
  ex2/tanh in f16/bf16): every f32 function on all 2**32 inputs as 1024 chunk hashes (tensor_probes.chunk_hash),
  on a stratified sample of 3 * 2**17 inputs (every binade: its first and last 256 patterns and a run of 256 at
  random) in full (a function
  without .ftz: where it differs from its .ftz twin), and ex2, rcp
  and lg2 (.ftz) over the whole binade [1, 2); the 16-bit functions on all 65536 inputs.

Each section runs in its own process, so a fault in one cannot lose the others. GPU time: about a minute, most of it
NVRTC.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ptx"))

import tensor_probes as tp  # noqa: E402

SECTIONS = ["wgmma", "mma", "wmma", "ldmatrix", "cpasync", "sfu"]
FIXTURE = "tensor_types_h200"
FAKE = "--fake" in sys.argv
#: --dry: the "GPU" is the executor (HELPERS_EXECUTOR=force), to check the script and the executor's refusals
DRY = "--dry" in sys.argv
#: the whole-binade tables (function, first input pattern, count)
TABLES = [("ex2.approx.ftz.f32", 0x3F800000, 1 << 23), ("rcp.approx.ftz.f32", 0x3F800000, 1 << 23),
          ("lg2.approx.ftz.f32", 0x3F800000, 1 << 23)]


def meta() -> dict[str, Any]:
    info: dict[str, Any] = {"made_by": "tools/h100/tensor_types.py",
                            "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")}
    if FAKE:
        info["gpu"] = "none (--fake: random outputs)"
        return info
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        name, drv, cc = [s.strip() for s in smi.split(",")]
        info.update(gpu=name, driver_version=drv, compute_capability=cc)
    except Exception as e:  # noqa: BLE001
        info["gpu"] = f"unknown ({e})"
    from helpers.gpu import compiler

    nv = compiler.nvrtc_version()
    info["nvrtc"] = f"{nv[0]}.{nv[1]}" if nv else "unknown"
    return info


# ----------------------------------------------------------------------------------------------- running
class Runner:
    """Runs cases of one section on the GPU (or fakes them) and keeps their records and arrays."""

    def __init__(self, section: str) -> None:
        self.section = section
        self.cases: list[dict[str, Any]] = []
        self.arrays: dict[str, np.ndarray] = {}
        self.kernels = {} if FAKE else tp.kernels_of(tp.SOURCES[section]())
        self.rng = np.random.default_rng(380 + SECTIONS.index(section))

    def case(self, kernel: str, grid: int, block: int, smem: int, inputs: list[np.ndarray | int], out_words: int,
             kind: str, **extra: Any) -> None:
        """One launch: ``inputs`` are uint32 arrays (device buffers) or ints (np.int32 arguments); the output
        buffer, filled with 0xEE bytes, is the last pointer argument before the ints."""
        i = f"{self.section}{len(self.cases)}"
        rec: dict[str, Any] = {"id": i, "section": self.section, "kernel": kernel, "grid": grid, "block": block,
                               "smem": smem, "kind": kind, "args": [], **extra}
        for j, a in enumerate(inputs):
            if isinstance(a, np.ndarray):
                key = f"{i}_in{j}"
                self.arrays[key] = np.ascontiguousarray(a, np.uint32)
                rec["args"].append({"array": key})
            else:
                rec["args"].append({"i32": int(a)})
        rec["out"] = f"{i}_out"
        rec["out_words"] = out_words
        try:
            self.arrays[rec["out"]] = self._run(rec)
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"[:2000]
            print(f"  {kernel} ({kind}): {rec['error'][:300]}", flush=True)
            if not DRY and ("context" in str(e).lower() or "illegal" in str(e).lower()):
                raise
        self.cases.append(rec)

    def _run(self, rec: dict[str, Any]) -> np.ndarray:
        if FAKE:
            if rec["kind"] == "ints":  # exact sums of small integers
                return self.rng.integers(-1024, 1025, rec["out_words"]).astype(np.float32).view(np.uint32)
            return self.rng.integers(0, 1 << 32, rec["out_words"], dtype=np.uint64).astype(np.uint32)
        return run_case(self.kernels, rec, self.arrays)


def run_case(kernels: dict, rec: dict[str, Any], arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Launch one recorded case (GPU or executor, whichever helpers.gpu runs on) and return its output words."""
    from helpers import gpu

    out = gpu.empty((rec["out_words"],), np.uint32).fill_bytes(0xEE)
    ptrs, ints = [], []
    for a in rec["args"]:
        if "array" in a:
            ptrs.append(gpu.to_device(arrays[a["array"]]))
        else:
            ints.append(np.int32(a["i32"]))
    gpu.launch(kernels[rec["kernel"]], rec["grid"], rec["block"], rec["smem"], *ptrs, out, *ints)
    return out.to_host()


# ----------------------------------------------------------------------------------------------- sections
def sec_wgmma(r: Runner) -> None:
    """Every kernel on random values (N <= 64) or small integers (larger N: exact sums, the fragment layout of
    every N, and a small fixture); at N = 64 every type also on special, tiny and cancelling values and with
    scale-d 0 over NaN accumulators; at N = 8 and 16, and with A from registers, special values too."""
    rng = r.rng
    for w in tp.WGMMA:
        plain = not (w.a_regs or w.neg_a or w.neg_b or w.trans_a or w.trans_b)
        if w.n > 64:
            kinds = ["ints"]
        elif plain and w.n == 64:
            kinds = ["rand", "special", "tiny", "cancel", "noscale"]
        elif plain and w.n in (8, 16) or (w.n == 64 and w.a_regs and not w.trans_b):
            kinds = ["rand", "special"]
        else:
            kinds = ["rand"]
        brows = 64 if w.trans_b else w.n
        for kind in kinds:
            gen = "rand" if kind == "noscale" else kind
            a = tp.typed_words(gen, w.atype, 2048, rng)
            b = tp.typed_words(gen, w.btype, brows * 32, rng)
            cw = 128 * w.dregs
            if kind == "noscale":
                c = np.full(cw, 0x7FC00001, np.uint32)  # scale-d 0: the accumulators' NaNs must not matter
            elif kind == "ints" or not plain or w.n != 64:  # accumulator inputs: the plain N = 64 kernels
                c = np.zeros(cw, np.uint32)
            else:
                c = tp.typed_words("special" if kind == "special" else "rand", w.dtype, cw, rng)
            ksteps = 4 if kind in ("rand", "ints") else 1
            if ksteps == 1:  # only the first K step's bytes matter: zeros elsewhere keep the fixture small
                a, b = _first_step(a, w.a_regs, w.trans_a), _first_step(b, False, w.trans_b)
            r.case(w.name, 1, 128, tp.wgmma_smem(w), [a, b, c, 0 if kind == "noscale" else 1, ksteps], cw, kind)


def _first_step(x: np.ndarray, regs: bool, trans: bool) -> np.ndarray:
    """Zero every word of an operand buffer (rows of 32 words) except those the first K step reads."""
    y = np.zeros_like(x)
    if regs:
        y[:512] = x[:512]
    elif trans:
        y[:16 * 32] = x[:16 * 32]
    else:
        y.reshape(-1, 32)[:, :8] = x.reshape(-1, 32)[:, :8]
    return y


def sec_mma(r: Runner) -> None:
    rng = r.rng
    for m in tp.MMAS:
        dt, at, bt, ct = m.types
        mult = 2 if m.wide else 1
        ints = at in ("s8", "u8", "s4", "u4", "b1")
        kinds = ["rand", "special", "rand2"] if ints else ["rand", "special", "tiny", "cancel", "rand2"]
        for kind in kinds:
            gen = "rand" if kind == "rand2" else kind
            rows = []
            for _t in range(32):
                rows.append(np.concatenate([tp.typed_words(gen, at, m.na * mult, rng),
                                            tp.typed_words(gen, bt, m.nb * mult, rng),
                                            tp.typed_words(gen if kind != "tiny" else "rand", ct, m.nc * mult, rng)]))
            r.case(m.name, 1, 32, 0, [np.concatenate(rows)], 32 * m.nc * mult, kind)


def sec_wmma(r: Runner) -> None:
    rng = r.rng
    for w in tp.WMMAS:
        m, n, k = w.dims
        eb, db = tp.ETYPE_BYTES[w.atype], tp.ETYPE_BYTES[w.dtype]
        kinds = ["rand", "special"] if w.atype == "s8" else ["rand", "special", "tiny", "cancel"]
        for kind in kinds:
            a = tp.typed_words(kind, w.atype, m * k * eb // 4, rng)
            b = tp.typed_words(kind, w.atype, k * n * eb // 4, rng)
            c = tp.typed_words("rand" if kind == "tiny" else kind, w.dtype, m * n * db // 4, rng)
            r.case(w.name, 1, 32, 0, [a, b, c], m * n * db // 4, kind)


def sec_ldmatrix(r: Runner) -> None:
    rng = r.rng
    for x, trans in tp.LDM:
        for kind in ("seq", "rand", "rand", "rand"):
            img = (np.arange(2048, dtype=np.uint32) * 0x9E37 & 0xFFFF).astype(np.uint16).view(np.uint32)  # 16-bit tags
            offs = (np.arange(32) * 16 if kind == "seq" else rng.permutation(256)[:32] * 16).astype(np.uint32)
            r.case(tp._ldm_name("ldm", x, trans), 1, 32, 0, [img, offs], 32 * x, kind)
            vals = rng.integers(0, 1 << 32, 32 * x, dtype=np.uint64).astype(np.uint32)
            r.case(tp._ldm_name("stm", x, trans), 1, 32, 0, [img, offs, vals], 1024, kind)
    for _ in range(3):
        r.case("movm", 1, 32, 0, [rng.integers(0, 1 << 32, 32, dtype=np.uint64).astype(np.uint32)], 32, "rand")


def sec_cpasync(r: Runner) -> None:
    for _ in range(2):
        src = r.rng.integers(0, 1 << 32, 1024, dtype=np.uint64).astype(np.uint32)
        r.case("cpasync_probe", 1, 32, 0, [src], 1504, "rand")


def _fake_sfu(fn: str, x: np.ndarray) -> np.ndarray:
    """Without a GPU: numpy's (correctly rounded-ish) values, so that --fake shows realistic fixture sizes."""
    if tp.SFU[fn][1] == "h":
        return np.zeros(x.size, np.uint32)
    f = {"ex2": np.exp2, "rcp": lambda v: 1 / v, "rsqrt": lambda v: 1 / np.sqrt(v), "sqrt": np.sqrt,
         "tanh": np.tanh, "lg2": np.log2, "sin": np.sin, "cos": np.cos}[fn.split(".")[0]]
    with np.errstate(all="ignore"):
        return f(x.view(np.float32).astype(np.float64)).astype(np.float32).view(np.uint32)


def _eval(r: Runner, fn: str, x: np.ndarray) -> np.ndarray:
    if FAKE:
        return _fake_sfu(fn, x)
    from helpers import gpu

    dx = gpu.to_device(np.ascontiguousarray(x, np.uint32))
    dy = gpu.empty((x.size,), np.uint32).fill_bytes(0xEE)
    gpu.launch(r.kernels["sfu_" + tp.sfu_name(fn)], 2048, 256, 0, dx, dy, np.int32(x.size))
    return dy.to_host()


def sec_sfu(r: Runner) -> None:
    starts = tp.sample_starts()
    xs = tp.sample_inputs(starts)
    r.arrays["sfu_sample_starts"] = starts
    info: dict[str, Any] = {}
    samples: dict[str, np.ndarray] = {}
    for fn, (_ins, c) in tp.SFU.items():
        t0 = time.time()
        rec: dict[str, Any] = {}
        if c == "h":
            y = _eval(r, fn, np.arange(65536, dtype=np.uint32))
            r.arrays[f"sfu_table16_{tp.sfu_name(fn)}"] = (y & 0xFFFF).astype(np.uint16)
            rec["table16"] = f"sfu_table16_{tp.sfu_name(fn)}"
        else:
            y = _eval(r, fn, xs)
            samples[fn] = y
            twin = fn.replace(".approx.", ".approx.ftz.")
            if twin in samples:  # without .ftz: only where it differs from the .ftz twin on the same inputs
                where = np.nonzero(y != samples[twin])[0].astype(np.uint32)
                r.arrays[f"sfu_diffidx_{tp.sfu_name(fn)}"] = where
                r.arrays[f"sfu_diffval_{tp.sfu_name(fn)}"] = y[where]
                rec["sample_vs"] = {"twin": twin, "index": f"sfu_diffidx_{tp.sfu_name(fn)}",
                                    "value": f"sfu_diffval_{tp.sfu_name(fn)}"}
            else:
                r.arrays[f"sfu_sample_{tp.sfu_name(fn)}"] = tp.delta_encode(y, tp.RUN)
                rec["sample"] = f"sfu_sample_{tp.sfu_name(fn)}"
            if FAKE:
                h = r.rng.integers(0, 1 << 63, 1 << (32 - tp.SWEEP_CHUNK_LOG), dtype=np.uint64)
            else:
                from helpers import gpu

                chunks = 1 << (32 - tp.SWEEP_CHUNK_LOG)
                dh = gpu.empty((chunks,), np.uint64).fill_bytes(0)
                gpu.launch(r.kernels["sweep_" + tp.sfu_name(fn)], chunks, 1024, 0, dh)
                h = dh.to_host()
            r.arrays[f"sfu_sweep_{tp.sfu_name(fn)}"] = h
            rec["sweep"] = f"sfu_sweep_{tp.sfu_name(fn)}"
        for tfn, first, count in TABLES:
            if tfn == fn:
                x = (np.uint64(first) + np.arange(count, dtype=np.uint64)).astype(np.uint32)
                ty = _eval(r, fn, x)
                key = f"sfu_tableb_{tp.sfu_name(fn)}"
                r.arrays[key] = tp.delta_encode(ty, count)
                rec["binade"] = {"key": key, "first": first, "count": count}
        info[fn] = rec
        print(f"  {fn}: {time.time() - t0:.1f} s", flush=True)
    r.cases.append({"id": "sfu", "section": "sfu", "functions": info, "run": tp.RUN, "runs_per_binade": tp.RUNS,
                    "sample_starts": "sfu_sample_starts", "sweep_chunk_log": tp.SWEEP_CHUNK_LOG})


# ----------------------------------------------------------------------------------------------- main
def run_section(section: str, out: Path) -> None:
    os.environ["HELPERS_EXECUTOR"] = "force" if DRY else os.environ.get("HELPERS_EXECUTOR", "off")
    t0 = time.time()
    r = Runner(section)
    print(f"{section}: compiled in {time.time() - t0:.1f} s", flush=True)
    try:
        globals()["sec_" + section](r)
    finally:
        np.savez_compressed(out / f"part_{section}.npz", **r.arrays)
        (out / f"part_{section}.json").write_text(json.dumps(r.cases))
        print(f"{section}: {len(r.cases)} records, {time.time() - t0:.1f} s", flush=True)


def main() -> int:
    args = [a for i, a in enumerate(sys.argv[1:]) if not a.startswith("--") and sys.argv[i] != "--only"]
    out = Path(args[0] if args else os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    if "--section" in sys.argv:
        run_section(sys.argv[sys.argv.index("--section") + 1], out)
        return 0
    work = out / "tensor_types_parts"
    work.mkdir(exist_ok=True)
    status: dict[str, Any] = {}
    if "--only" in sys.argv:  # e.g. --only mma,ldmatrix (with --dry: the sections the executor runs quickly)
        SECTIONS[:] = sys.argv[sys.argv.index("--only") + 1].split(",")
    for s in SECTIONS:
        t0 = time.time()
        cmd = [sys.executable, __file__, str(work), "--section", s] + [a for a in ("--fake", "--dry")
                                                                        if a in sys.argv]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
        print(p.stdout[-3000:], p.stderr[-3000:], flush=True)
        status[s] = {"rc": p.returncode, "seconds": round(time.time() - t0, 1),
                     "stderr_tail": p.stderr[-1500:] if p.returncode else ""}
    cases: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    for s in SECTIONS:
        try:
            cases += json.loads((work / f"part_{s}.json").read_text())
            with np.load(work / f"part_{s}.npz") as z:
                arrays.update({k: z[k] for k in z.files})
        except (OSError, ValueError) as e:
            status[s]["missing"] = str(e)
    np.savez_compressed(out / f"{FIXTURE}.npz", **arrays)
    sources = {s: tp.SOURCES[s]() for s in SECTIONS}
    record = {"meta": meta(), "sections": status, "cases": cases,
              "source_sha256": {s: __import__("hashlib").sha256(v.encode()).hexdigest() for s, v in sources.items()},
              "how": __doc__}
    (out / f"{FIXTURE}.json").write_text(json.dumps(record, indent=0))
    size = sum((out / f"{FIXTURE}.{e}").stat().st_size for e in ("json", "npz"))
    bad = [c["id"] + " " + c["kernel"] for c in cases if "error" in c]
    print(f"{len(cases)} cases, {len(bad)} with errors, fixture {size / 1e6:.2f} MB; sections: "
          + ", ".join(f"{s} rc={v['rc']} {v['seconds']} s" for s, v in status.items()))
    for b in bad[:40]:
        print("  error:", b)
    return 0 if all(v["rc"] == 0 for v in status.values()) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
