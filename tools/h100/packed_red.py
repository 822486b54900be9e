"""Lesson 07's packed reduction, from silicon (a few seconds): writes OUT/packed_red_h100.json.

``red.global.add.noftz.bf16x2``: 64 blocks of 128 threads each add their own bf16 pair into the same 128 words of
a workspace (every word receives 64 adds, in whatever order the blocks arrive). The values are chosen so every
partial sum is exact in bf16 (small integers, and subnormal multiples of the smallest subnormal): the result then
does not depend on the order, and it shows whether subnormal inputs and sums survive (``.noftz``) or are flushed.
The emulator's ``striped.reduce_add_bf16x2`` must give the same words.

    python tools/h100/packed_red.py OUT_DIR
Then copy OUT_DIR/packed_red_h100.json to tests/data/ (tests/emulator/test_striped.py replays it).
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
from helpers.hopper import striped  # noqa: E402

KERNEL = r"""
extern "C" __global__ void packed_red(unsigned* ws, const unsigned* partials, int words) {
  const int t = threadIdx.x;
  if (t < words) {
    const unsigned v = partials[blockIdx.x * words + t];
    asm volatile("red.global.add.noftz.bf16x2 [%0], %1;" :: "l"(ws + t), "r"(v) : "memory");
  }
}
"""
BLOCKS, WORDS = 64, 128


def partials(rng: np.random.Generator) -> np.ndarray:
    """(BLOCKS, WORDS) uint32: each word two bf16, low half a small integer (exact sums), high half 0 or the
    smallest subnormal 2^-133 (bits 0x0000 or 0x0001: 64 of them stay below the smallest normal 2^-126, exact)."""
    ints = rng.integers(-4, 5, (BLOCKS, WORDS)).astype(np.float32)
    low = (ints.view(np.uint32) >> 16).astype(np.uint32)  # small integers are exact in bf16
    high = rng.integers(0, 2, (BLOCKS, WORDS)).astype(np.uint32)  # 0 or 2^-133
    return low | (high << 16)


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kernel = gpu.compile(KERNEL, "packed_red")
    on_h100 = gpu.hopper_available()
    parts = partials(np.random.default_rng(2026))
    ws = gpu.to_device(np.zeros(WORDS, np.uint32))
    gpu.launch(kernel, BLOCKS, 128, 0, ws, gpu.to_device(parts.reshape(-1)), np.int32(WORDS))
    got = gpu.to_host(ws)
    want = np.zeros(WORDS, np.uint32)
    striped.reduce_add_bf16x2(want, list(parts), range(BLOCKS))
    flushed = np.zeros(WORDS, np.uint32)
    striped.reduce_add_bf16x2(flushed, list(parts), range(BLOCKS), flush=True)
    high = got >> 16
    subnormal = int(np.count_nonzero(((high & 0x7F80) == 0) & ((high & 0x7F) != 0)))
    info = gpu.device_info() if on_h100 else None
    result = {"meta": {"gpu": info.name if info else "emulator (no Hopper GPU)",
                       "driver_cuda": list(info.driver_version) if info else None,
                       "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                       "script": "tools/h100/packed_red.py"},
              "how": f"{BLOCKS} blocks × {WORDS} threads, each red.global.add.noftz.bf16x2 of its own pair into "
                     "word t of one workspace (64 adds a word, any order; exact sums)",
              "partials": parts.reshape(-1).tolist(), "words": got.tolist(),
              "model_agrees": bool(np.array_equal(got, want)),
              "subnormal_halves_kept": subnormal,
              "a_flushing_add_would_differ_in": int(np.count_nonzero(flushed != got))}
    print({k: v for k, v in result.items() if k not in ("partials", "words")})
    if not on_h100:
        print(f"no Hopper GPU ({gpu.no_hopper_reason()}): ran on the emulator; nothing written")
        return 1
    (out / "packed_red_h100.json").write_text(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/out"))
