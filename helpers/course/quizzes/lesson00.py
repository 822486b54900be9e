"""Quick checks of Lesson 00 (the big picture): tiles, blocks, K steps, registers, intensity."""

from __future__ import annotations

from helpers.course.grading import Quiz
from helpers.course.quizzes._judges import near

blocks = Quiz(
    "An 8192×8192 C is cut into 64×64 tiles, one thread block per tile. How many blocks does the launch have?",
    answer=16384,
    hint="tiles per row × tiles per column; each is 8192 / 64",
    explanation="128 × 128 = 16,384 blocks.",
    wrong=(128, 8192, 4096, 256),
)

k_steps = Quiz(
    "With K = 8192 and 64-wide K steps, how many iterations does each block's K loop run?",
    answer=128,
    hint="one iteration per 64 columns of A (and 64 rows of B)",
    explanation="8192 / 64 = 128 K steps, all accumulating into the same registers.",
    wrong=(64, 512, 8192, 16384),
)

wgmma_per_step = Quiz(
    "How many wgmma.m64n64k16 instructions does one 64-wide K step of a 64×64 tile need?",
    answer=4,
    hint="each instruction consumes 16 values of K",
    explanation="64 / 16 = 4 instructions, each adding a 64×16 · 16×64 product to the accumulators.",
    wrong=(1, 16, 64, 256),
)

accumulators = Quiz(
    "The 64×64 fp32 accumulator tile is spread over the 128 threads of one warpgroup. "
    "How many accumulator registers does each thread hold?",
    answer=32,
    hint="4096 values shared out over 128 threads",
    explanation="64·64 / 128 = 32 fp32 registers per thread (Lesson 03 shows which thread holds which element).",
    wrong=(64, 16, 128, 4096),
)

step_bytes = Quiz(
    "How many bytes does one K step bring into shared memory for a 64×64 tile (a 64×64 bf16 tile of A "
    "and one of B)?",
    answer=16384,
    hint="64 × 64 elements × 2 bytes, for each of A and B",
    explanation="2 × 64 × 64 × 2 B = 16 KiB: that is the transaction count the mbarrier will wait for.",
    wrong=(8192, 32768, 4096, 65536),
)

intensity = Quiz(
    "Arithmetic intensity of the whole 8192³ GEMM (bf16 A and B read once, fp32 C written once), in FLOP "
    "per byte?",
    answer=2048,
    hint="2·M·N·K FLOPs over 2·(M·K + K·N) + 4·M·N bytes",
    explanation="1.0995e12 FLOP / 536,870,912 B = 2048 FLOP/B, far above the ridge point: compute-bound.",
    wrong=(4096, 1024, 2730.67, 32),
)

ridge = Quiz(
    "The H100 SXM does about 989 TFLOP/s of dense bf16 and moves about 3.35 TB/s from HBM3. "
    "What is its ridge point in FLOP/B (to the nearest whole number)?",
    near(989 / 3.35, 0.005, "divide the FLOP rate by the byte rate (both per second)",
          "divide 989e12 by 3.35e12; the units are FLOP per byte"),
    right=295,
    hint="ridge = peak FLOP/s ÷ bytes/s",
    explanation="989e12 / 3.35e12 ≈ 295 FLOP/B.",
    wrong=(0.0034, 3.35, 989, 2048, 330),
)

lone_block = Quiz(
    "One 64×64 block, if all of its A and B reads came from HBM, does 2·64·64·8192 FLOPs over "
    "2·(64·8192 + 8192·64) + 4·64·64 bytes. Is it compute-bound or memory-bound?",
    answer="memory-bound",
    choices=["compute-bound", "memory-bound"],
    hint="compare its intensity (≈ 32 FLOP/B) with the ridge point (≈ 295 FLOP/B)",
    explanation="≈ 32 FLOP/B is far below 295: alone it would be capped near 3.35e12 × 32 ≈ 106 TFLOP/s. "
    "Reuse through L2 is what lets the real kernel go faster.",
    wrong=("compute-bound",),
)

edge_blocks = Quiz(
    "Now M = N = 3000 (K still 8192) with 64×64 tiles. How many blocks does the launch need?",
    answer=2209,
    hint="a partial tile at the edge still needs a block: round 3000 / 64 up",
    explanation="⌈3000/64⌉ = 47, and 47² = 2209; the last row and column of tiles are partial.",
    wrong=(2116, 2197, 2304, 47),
)
