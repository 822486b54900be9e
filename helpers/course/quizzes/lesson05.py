"""Quick checks for lesson 05 (kernel design): intensity and ridge points, waves, the raster order, clusters and
multicast, cooperative vs ping-pong."""

from __future__ import annotations

import re

from helpers.course.grading import Quiz
from helpers.hopper import parts


def _near(expected: float, tolerance: float, mistakes: dict[float, str], unit: str = ""):
    """A judge for a number within ``tolerance`` of ``expected``; a few wrong values get their own message."""

    def judge(response) -> tuple[bool, str]:
        m = re.search(r"-?\d+(?:[.,]\d+)?", str(response).replace(",", ""))
        if not m:
            return False, f"{response!r} is not a number"
        value = float(m.group(0))
        if abs(value - expected) <= tolerance:
            return True, ""
        for wrong, why in mistakes.items():
            if abs(value - wrong) <= tolerance:
                return False, why
        return False, f"{value:g}{unit} is not it"

    return judge


def _pair(expected: tuple[int, int], mistakes: dict[tuple[int, int], str]):
    def judge(response) -> tuple[bool, str]:
        numbers = re.findall(r"-?\d+", str(response))
        if len(numbers) != 2:
            return False, f"{response!r}: answer with two numbers, (pm, pn)"
        got = (int(numbers[0]), int(numbers[1]))
        return (True, "") if got == expected else (False, mistakes.get(got, f"{got} is not it"))

    return judge


#: the bf16 ridge point
ridge = Quiz(
    "The H100 SXM's datasheet gives 989 TFLOP/s of dense bf16 tensor-core math and 3.35 TB/s of HBM3. Above how "
    "many FLOP per byte is a kernel compute-bound (to the nearest whole number)?",
    _near(295, 3, {20: "that is the FP32 CUDA-core ridge (67 TFLOP/s ÷ 3.35 TB/s)",
                   3313: "divide the FLOP/s by the bytes/s, not the other way round"}),
    right="295", hint="peak FLOP/s ÷ bytes/s", wrong=("20", "3313", "989"))

#: a 128×256 tile's intensity
tile_intensity = Quiz(
    "Each K step, a block with a 128×256 tile loads a 128×64 bf16 tile of A and a 256×64 tile of B and does "
    "2·128·256·64 FLOPs with them. How many FLOP per loaded byte is that (round to a whole number)?",
    _near(85.33, 0.7, {128: "that is 256×256 (or 128×256 with B shared by two CTAs)",
                       64: "that is a 128×128 tile", 32: "that is a 64×64 tile"}),
    right="85", hint="BM·BN / (BM + BN) for bf16", wrong=("128", "64", "32", "43"))

#: waves at 8192²
_SXM = parts.PROFILES["h100-sxm"]
waves_8192 = Quiz(
    f"An 8192×8192 C in 128×256 tiles on an {_SXM.name} ({_SXM.sms} SMs), one block per SM: how many waves of "
    "blocks?",
    answer=-(-2048 // _SXM.sms), hint=f"tiles ÷ {_SXM.sms}, rounded up: a partial wave still takes a whole wave's time",
    explanation=f"64 × 32 = 2048 tiles; 2048 / {_SXM.sms} = {2048 / _SXM.sms:.1f}, so {-(-2048 // _SXM.sms)} waves, "
                "the last half full",
    wrong=(15, 2048, 8))

#: wave quantization of a small C
small_c_busy = Quiz(
    "Lab 7 computes 256×256 pairs on 66 clusters. For a 1024×1024 C (any K), what percentage of the clusters has "
    "work (to the nearest percent)?",
    _near(24.2, 0.8, {100: "count the pairs: 4 × 4", 16: "16 is the number of pairs, not the percentage"}, "%"),
    right="24", hint="pairs ÷ clusters", wrong=("100", "16", "50"))

#: the grouped order
grouped_p9 = Quiz(
    "Grouped raster order with group = 8 on a 16×16 grid of pairs: which pair (pm, pn) is number p = 9?",
    _pair((1, 1), {(0, 9): "that is row-major order; the grouped order walks down a column of the group first",
                   (9, 0): "that is column-major over the whole grid; a group holds only 8 rows",
                   (1, 0): "each column of the group has 8 pairs: p = 8 starts the second column"}),
    right="1, 1", hint="a group of 8 rows is walked column by column, 8 pairs per column",
    wrong=("0, 9", "9, 0", "1, 0"))

#: expect-tx of a stage in Lab 7
expect_bytes = Quiz(
    "In Lab 7, how many bytes does each CTA's full[s] expect per stage? (A 128×64 bf16 tile of its own; the 256×64 "
    "B slice arrives as two halves, one loaded by each CTA and multicast to both.)",
    _near(49152, 0, {32768: "that counts only this CTA's own loads: the half the other CTA multicasts lands here "
                            "and counts on this same barrier",
                     16384: "that is one box", 98304: "that is both CTAs' stages together"}),
    right="49152", hint="every byte that lands in this CTA's stage", wrong=("32768", "16384", "98304"))

#: empty count in Lab 7
empty_count = Quiz(
    "In Lab 7 (2 consumer warpgroups per CTA, 2 CTAs per cluster), how many arrivals complete a phase of empty[s]?",
    answer=4, hint="who reads the bytes a refill of this stage writes?",
    explanation="the refill lands in both CTAs, so every consumer warpgroup of both waits: 2 × 2",
    wrong=(2, 1, 256))

#: clusters of 4
idle_sms = Quiz(
    "On the course's H100, clusters of 4 blocks of the Lab 7 kernel's size fit 30 at a time. How many of the 132 "
    "SMs stay idle?", answer=12, hint="30 clusters × 4 blocks, one block per SM",
    explanation="120 busy, 12 idle for the whole run: 9 % of the GPU, more than multicasting to 4 saves",
    wrong=(0, 2, 30))

#: which arrive
remote_arrive = Quiz(
    "A Lab 7 consumer tells the other CTA's producer it is done with stage s. Which PTX arrive does the kernel use?",
    answer="mbarrier.arrive.shared::cluster.b64 (after mapa)",
    choices=["mbarrier.arrive.shared::cluster.b64 (after mapa)",
             "mbarrier.arrive.release.cluster.shared::cluster.b64 (after mapa)",
             "mbarrier.arrive.shared::cta.b64 on its own barrier, twice"],
    hint="what does the consumer need to publish, and at what cost does the other form publish more?",
    explanation="the plain remote arrive hands a stage back the way CUTLASS's ClusterBarrier::arrive(cta_id) does "
                "(a convention the hardware honours, not a memory-model guarantee to another block); the "
                ".release.cluster form puts a MEMBAR.ALL.GPU before every arrive in the K loop (Lesson 05 shows "
                "what it costs, both forms timed in one run)",
    wrong=("mbarrier.arrive.release.cluster.shared::cluster.b64 (after mapa)",
           "mbarrier.arrive.shared::cta.b64 on its own barrier, twice"))

#: cooperative vs ping-pong
pingpong = Quiz(
    "K is short, so a tile's epilogue takes almost as long as its mainloop (but no longer). Which design keeps the "
    "tensor cores busy during epilogues?", answer="ping-pong", choices=["cooperative", "ping-pong"],
    hint="in which design does one warpgroup's epilogue run while the other's mainloop uses the tensor cores?",
    explanation="ping-pong: the consumers alternate tiles, and a mainloop at least as long as an epilogue hides it "
                "completely; the cost is a smaller tile per warpgroup (128×128, 64 FLOP/B against 85.3)",
    wrong=("cooperative",))

#: ping-pong's tile
pingpong_intensity = Quiz(
    "In a ping-pong kernel each consumer warpgroup owns a whole tile in its 128 fp32 accumulators per thread "
    "(128 threads). For the largest such tile that is square, how many FLOP does each loaded bf16 byte feed?",
    _near(64, 0.5, {51.2: "that is a 64×256 tile: the same registers, but a narrower tile feeds fewer FLOPs",
                    85.33: "that is the cooperative's 128×256, two warpgroups' registers",
                    128: "that is 256×256"}),
    right="64", hint="128 × 128 accumulators = 16384 = 128 threads × 128; then BM·BN / (BM + BN)",
    wrong=("51.2", "85.3", "128"))
