"""Lessons 05-06 / Labs 5-6 truth from silicon, on one H100 (about 20 s): writes OUT/lab56_h100.json.

- rounding: ``cvt.rn.bf16x2.f32`` (``__floats2bfloat162_rn``) of every named rounding edge case of Lab 5's check,
  random values, and NaN patterns — the bits the emulator's ``epilogue.to_bf16_bits`` must reproduce;
- epilogue: Lab 5's sub-tile epilogue on random fragments (``probes.EPILOGUE_KERNEL``): the raw 128B-swizzled shared
  image and the bf16 C after the TMA store (into a NaN-poisoned C, at an edge so the store clips);
- clusters: co-resident clusters (``cuOccupancyMaxActiveClusters``) of the Lab 5 kernel's footprint (384 threads,
  ~225 KiB dynamic shared memory) for clusters of 1, 2, 4 and 8, and of the Lab 7 kernel (compiled for 2).

    python tools/h100/epilogue.py OUT_DIR
Then copy OUT_DIR/lab56_h100.json to tests/data/ (tests/emulator/test_epilogue.py and test_cluster.py replay it).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402
from helpers.course.checks import lab5  # noqa: E402
from helpers.gpu import probes  # noqa: E402
from helpers.hopper import epilogue  # noqa: E402


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gpu.compile(probes.EPILOGUE_KERNEL, "epilogue_probe")
    if not gpu.hopper_available():  # never record an emulator's answers as the H100's
        print(f"no Hopper GPU ({gpu.no_hopper_reason()}): this script records the H100's answers; nothing written")
        return 1
    info = gpu.device_info()
    result: dict = {"meta": {"gpu": info.name, "driver_cuda": list(info.driver_version),
                             "nvrtc": list(gpu.nvrtc_version() or ()),
                             "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                             "script": "tools/h100/epilogue.py"}}
    # rounding
    x, _ = lab5.rounding_cases(np.random.default_rng(2026))
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FBFFFFF], np.uint32)
    x = np.concatenate([x, nans.view(np.float32)])
    if x.size % 2:
        x = np.concatenate([x, np.zeros(1, np.float32)])
    bits = probes.round_on_gpu(x)
    result["rounding"] = {"how": "cvt.rn.bf16x2.f32 (__floats2bfloat162_rn) of pairs of floats, one thread a pair",
                          "inputs": x.view(np.uint32).tolist(), "bits": bits.tolist(),
                          "emulator_agrees": bool(np.array_equal(bits, epilogue.to_bf16_bits(x)))}
    print("rounding: emulator agrees:", result["rounding"]["emulator_agrees"])
    # the epilogue image and store
    rng = np.random.default_rng(7)
    cases = []
    for shape, row0, col0 in (((64, 64), 0, 0), ((200, 136), 128, 64), ((100, 120), 64, 64)):
        frags = (rng.standard_normal((128, 32)) * 3).astype(np.float32)
        image, c = probes.epilogue_on_gpu(frags, shape, row0, col0)
        want_img = epilogue.stage_subtile(frags)
        from ml_dtypes import bfloat16

        want_c = np.full(shape, 0xFFFF, np.uint16).view(bfloat16)  # gpu.poison: 0xFF bytes
        epilogue.store_subtile(want_img, want_c, row0, col0)
        cases.append({"shape": list(shape), "row0": row0, "col0": col0, "frags": frags.view(np.uint32).tolist(),
                      "image": image.tobytes().hex(), "c_bits": c.tobytes().hex(),
                      "image_agrees": bool(np.array_equal(image, want_img)),
                      "c_agrees": bool(np.array_equal(c, want_c.view(np.uint16)))})
        print(f"epilogue {shape} at ({row0}, {col0}): image agrees {cases[-1]['image_agrees']}, "
              f"C agrees {cases[-1]['c_agrees']}")
    result["epilogue"] = {"how": "probes.EPILOGUE_KERNEL: one warpgroup, Lab 5's stage_subtile, fence.proxy.async, "
                                 "__syncthreads, raw shared image copied out, TMA store into a NaN-poisoned bf16 C",
                          "cases": cases}
    # co-resident clusters
    k5 = gpu.compile((ROOT / "bench/kernels/lab5_epilogue.cu").read_text(), "lab5_gemm")
    k6 = gpu.compile((ROOT / "bench/kernels/lab7_clusters.cu").read_text(), "lab7_gemm")
    smem = lab5.SMEM_BYTES
    counts = {}
    for size in (1, 2, 4, 8):
        try:
            counts[str(size)] = gpu.max_active_clusters(k5, 384, smem, size)
        except gpu.GpuError as exc:
            counts[str(size)] = f"error: {exc}"
    result["clusters"] = {"how": f"cuOccupancyMaxActiveClusters, 384 threads, {smem} B dynamic shared memory, "
                                 f"{k5.report.registers} registers (lab5_gemm)", "sm_count": info.sm_count,
                          "lab5_gemm": counts, "lab6_gemm_cluster2": gpu.max_active_clusters(k6, 384, smem, 2)}
    print("co-resident clusters:", result["clusters"])
    (out / "lab56_h100.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/out"))
