"""Labs 5 to 9 on an H100, through their graders: each solution kernel checked on random non-square shapes and timed
(Labs 5, 6 and 7 at 4096³ beside cuBLAS, Lab 8 beside Lab 7, the course's Lab 8 and cuBLAS, square and short-K, Lab 9
beside Lab 7 and cuBLAS on its two wave-quantized shapes), then the wrong kernels only a run can catch (their PTX
passes every static check), which the graders must reject on the GPU (or on the executor beside it, where the
mistake is in the work) as they do on the course's PTX executor.

Usage (no pytest or Jupyter needed): ``python tests/labs/gpu_lab5679.py [OUT_DIR]``. Writes ``gpu_lab5679.json`` (every
expectation, its outcome and the grader's output) into OUT_DIR; exit status 0 when every expectation held. The lab
tests (``test_lab5.py`` … ``test_lab9.py``) run the same wrong kernels on the executor.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402


def _swap(src: str, old: str, new: str) -> str:
    if old not in src:
        raise ValueError(f"the solution kernel no longer contains {old!r}")
    return src.replace(old, new)


#: a run-only wrong kernel: (its source, words the grader's failure must hold, whether the H100 shows it every time
#: too: a mistake that is a race there may slip through a run, where the executor's fixed schedule catches it)
WrongKernel = tuple[str, tuple[str, ...], bool]


def caught_where(every_time: bool) -> str:
    """The words saying which run caught a wrong kernel: the H100's when it shows the mistake every time, else the
    H100's or the executor's run beside it, whichever failed first."""
    here = f"ran on {gpu.where_name()}"
    return here if every_time else f"{here}|ran on the emulator"


def lab5_run_only(src: str) -> dict[str, WrongKernel]:
    """Lab 5 kernels whose PTX passes every static check, each with one mistake in a region."""
    return {
        "no swizzle in the sub-tile": (_swap(src, "const int chunk = (j / 4) ^ (r % 8);", "const int chunk = (j / 4);"),
                                       ("r % 8 == 0 are right", "not swizzled"), True),
        "both warpgroups store at row m0": (_swap(src, "n0 + sub * SUB, m0 + 64 * c);", "n0 + sub * SUB, m0);"),
                                            ("never written",), True),
        "the fragment's row without its 8-row half": (_swap(src, "const int r = 16 * w + l / 4 + 8 * ((j / 2) % 2);",
                                                            "const int r = 16 * w + l / 4;"), ("8-row half",), True),
        "every thread of a consumer releases the last stage (no t == 0)": (
            _swap(src, "if (nk > 0 && t == 0) my_mbar_arrive(&empty[(nk - 1) % STAGES]);",
                  "if (nk > 0) my_mbar_arrive(&empty[(nk - 1) % STAGES]);"),
            # a warp's 32 lanes arrive at once on a barrier whose phase awaits 2: the H100 stops the kernel (a trap),
            # and the executor with it (tests/data/mbarrier_warp_arrivals_h100.json)
            (f"lanes in one mbarrier.arrive|failed when it ran on {gpu.where_name()}",), True),
    }


def lab6_run_only(src: str) -> dict[str, WrongKernel]:
    """Lab 6 kernels whose PTX passes every static check, each with one mistake in a region."""
    loop = "for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {"
    return {
        "the scheduler skips the last, partial wave": (
            _count_swap(src, loop, "for (int tile = blockIdx.x; tile < tiles / gridDim.x * gridDim.x; "
                                   "tile += gridDim.x) {", 2), ("never written", "a tile no block took"), True),
        "the tile's last stage never released": (
            _swap(src, "      if (nk > 0 && t == 0) my_mbar_arrive(&empty[(it - 1) % STAGES]);  // the tile's last "
                       "stage\n", ""), ("deadlock",), True),
        # every tile once, each block the same tiles as the grouped order gives it (3 × 3 tiles on the executor's two
        # blocks), in another order: C is right everywhere; the order of each block's stores, as the executor beside
        # the H100 recorded them, shows it
        "the tiles of a group walked along a row first": (
            _swap(src, "  tm = first + in_group % rows;\n  tn = in_group / rows;\n",
                  "  tm = first + in_group / tiles_n;\n  tn = in_group % tiles_n;\n"),
            ("the tiles are not taken in the order the schedule prescribes",
             "run down a column of the group first"), False),
        "the group sized along the other dimension (GROUP columns of tiles)": (
            _swap(src, "  const int per_group = LAB6_GROUP * tiles_n;\n  const int first = (tile / per_group) * "
                       "LAB6_GROUP;\n  const int rows = min(tiles_m - first, LAB6_GROUP);\n  const int in_group = "
                       "tile % per_group;\n  tm = first + in_group % rows;\n  tn = in_group / rows;\n",
                  "  const int per_group = LAB6_GROUP * tiles_m;\n  const int first = (tile / per_group) * "
                  "LAB6_GROUP;\n  const int cols = min(tiles_n - first, LAB6_GROUP);\n  const int in_group = "
                  "tile % per_group;\n  tn = first + in_group % cols;\n  tm = in_group / cols;\n"),
            ("the tiles are not taken in the order the schedule prescribes",), False),
        # the group's first row of tiles without · GROUP: right while one group holds every row (3 × 3 tiles); the
        # second group of the 10 × 1 shape starts at row 1, not 8
        "the group's first row taken as the group's number": (
            _swap(src, "  const int first = (tile / per_group) * LAB6_GROUP;\n",
                  "  const int first = tile / per_group;\n"),
            ("never written|computed and stored 2 times",), True),
        "the last raster group not clipped": (_swap(src, "const int rows = min(tiles_m - first, LAB6_GROUP);",
                                                    "const int rows = LAB6_GROUP;"),
                                              ("never written", "a tile no block took"), True),
        "a stage released at a tile's first K step too (it > 0: the tile before's last stage again)": (
            _swap(src, "if (k > 0 && t == 0) my_mbar_arrive(&empty[(it - 1) % STAGES]);",
                  "if (it > 0 && t == 0) my_mbar_arrive(&empty[(it - 1) % STAGES]);"),
            # the executor's schedule gives the right C: only the ring's releases show it (the H100 may race)
            ("released more times than it was used", "count the releases of one tile"), False),
    }


def lab7_run_only(src: str) -> dict[str, WrongKernel]:
    """Lab 7 kernels whose PTX passes every static check, each with one mistake in a region."""
    producer_m0 = "        const int m0 = pm * 2 * BM + rank * BM, n0 = pn * BN;"  # (the consumers' is indented less)
    return {
        "both shares of B land on each other": (_swap(src, "tma_load_2d_multicast(smem + s * STAGE_BYTES + A_BYTES "
                                                           "+ rank * B_HALF,",
                                                      "tma_load_2d_multicast(smem + s * STAGE_BYTES + A_BYTES,"),
                                                ("sub-tile|a stage refilled",), True),
        "both CTAs load the same half of B": (_swap(src, "n0 + rank * (BN / CLUSTER), (1u << CLUSTER) - 1);",
                                                    "n0, (1u << CLUSTER) - 1);"), ("sub-tiles of C",), True),
        "the producer loads CTA 0's rows of A in both CTAs": (_swap(src, producer_m0, producer_m0.replace(
            " + rank * BM", "")), ("sub-tiles of C are wrong",), True),
        "the last raster group not clipped": (_swap(src, "const int rows = min(tiles_m - first, LAB6_GROUP);",
                                                    "const int rows = LAB6_GROUP;"),
                                              ("never written", "a pair no cluster took"), True),
        "a pair's last stage released only when another pair follows (the cluster's last pair holds it)": (
            _swap(src, "if (nk > 0 && t < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], t);",
                  "if (p + clusters < pairs && t < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], "
                  "t);"),
            # C is right (no one waits on that stage again): only the ring's releases show it
            ("each fill is released once by every consumer that reads it", "count the releases of one pair"), False),
    }


def _count_swap(src: str, old: str, new: str, count: int) -> str:
    if src.count(old) != count:
        raise ValueError(f"the solution kernel holds {old!r} {src.count(old)} times, not {count}")
    return src.replace(old, new)


def lab8_run_only(src: str) -> dict[str, WrongKernel]:
    """Lab 8 kernels whose PTX passes every static check, each with one mistake: three in the sequence barrier (the
    H100 may run them to the right C; the executor beside it rejects them), four that give the right C everywhere and
    the wrong work (only the executor's work log, beside the H100, shows them), one that leaves a stage held (only the
    ring's releases, as the executor recorded them, show it)."""
    loop_end = "p < pairs; p +="  # the producer's loop over pairs and the consumers'
    twice = "p < cluster_id + CONSUMERS * clusters * ((pairs - cluster_id + clusters - 1) / clusters); p +="
    coords = "tile_coords(p, pairs_m, pairs_n, pm, pn);"
    return {
        "the two warpgroups' order inverted": (_swap(src, "c == 0 ? 1u : 0u", "c == 0 ? 0u : 1u"),
                                               ("read before the barrier phase|every element against fp64|deadlock",),
                                               True),
        "a slot reused a lap early (the phase never flips)": (_swap(src, "      phase ^= 1;\n", ""),
                                                              ("read before the barrier phase|every element against "
                                                               "fp64|deadlock",), True),
        "a warpgroup that never arrives on the other's slot (it arrives on its own)": (
            _swap(src, "&order[index * CONSUMERS + (group + 1) % CONSUMERS]", "&order[index * CONSUMERS + group]"),
            ("deadlock", "order"), True),
        "both consumers compute each pair (the block takes every pair twice)": (
            _count_swap(_count_swap(src, loop_end, twice, 2), coords,
                        "tile_coords(cluster_id + (p - cluster_id) / clusters / CONSUMERS * clusters, pairs_m, "
                        "pairs_n, pm, pn);", 2),
            ("was computed and stored 2 times", "C is right"), True),
        "the persistent loop steps by one cluster too few": (
            _count_swap(src, "clusters = gridDim.x / CLUSTER;", "clusters = gridDim.x / CLUSTER - 1;", 1),
            # NVRTC 13.0 (the H100 machine's) spills 24-28 bytes in this variant, and the static check rejects it first
            ("was computed and stored 2 times|spilled", "(cluster 1, rank 0)|spilled"), True),
        "the two blocks of a cluster swap their tiles": (
            _count_swap(src, "rank * BM, n0", "(CLUSTER - 1 - rank) * BM, n0", 2),
            # NVRTC 13.0 spills 20 bytes in this variant too
            ("was stored by block (1,0) (cluster 0, rank 1); the schedule gives it to block (0,0)|spilled",), True),
        "the two consumers swap their tiles (consumer 1 takes tile 0 and goes first)": (
            _count_swap(_count_swap(src, "for (int p = cluster_id + c * clusters;",
                                    "for (int p = cluster_id + (CONSUMERS - 1 - c) * clusters;", 1),
                        "c == 0 ? 1u : 0u", "c == 1 ? 1u : 0u", 1),
            ("was computed by warpgroup 2 (consumer 1)", "the schedule gives that tile to consumer 0"), True),
        # the cursor's wait names the slot of the section after the one it enters (a wrong slot): the sections still
        # come out in turn on the executor's schedule; the record of the waits shows the slot
        "a section entered through the other section's slot": (
            _swap(src, "my_mbar_wait(&order[index * CONSUMERS + group], phase, \"order\", index * CONSUMERS + group);",
                  "my_mbar_wait(&order[(index ^ 1) * CONSUMERS + group], phase, \"order\", (index ^ 1) * CONSUMERS + "
                  "group);"),
            ("entered its section 0 with a wait on order[2]|deadlock",), False),
        # the cursor moves on, then arrives: the arrival names the next section's slot of the other warpgroup
        "the arrival after the cursor moved on": (
            _swap(src, "    my_mbar_arrive(&order[index * CONSUMERS + (group + 1) % CONSUMERS]);\n    if (++index == "
                       "ORDER_DEPTH) {\n      index = 0;\n      phase ^= 1;\n    }\n",
                  "    if (++index == ORDER_DEPTH) {\n      index = 0;\n      phase ^= 1;\n    }\n"
                  "    my_mbar_arrive(&order[index * CONSUMERS + (group + 1) % CONSUMERS]);\n"),
            ("handed its section 0 on through order[3]|deadlock",), False),
        # after a tile's K loop the release names it % STAGES (the next tile's first stage), a stale index: C can
        # come out right; the record shows the release of a stage the consumer did not read
        "a tile's last stage released through a stale index (it, not it - 1)": (
            _swap(src, "if (nk > 0 && t < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], t);",
                  "if (nk > 0 && t < CLUSTER) hopper::mbar_arrive_cluster(&empty[it % STAGES], t);"),
            ("but its read #|read before the barrier phase|deadlock",), False),
        "a tile's last stage released only when another pair follows (the block's last tile holds it)": (
            _swap(src, "if (nk > 0 && t < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], t);",
                  "if (p + clusters < pairs && t < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], "
                  "t);"),
            # C is right (no one waits on that stage again): only the ring's releases show it
            ("each fill is released once by every consumer that reads it", "count the releases of one tile"), False),
    }


def lab9_run_only(src: str) -> dict[str, WrongKernel]:
    """Lab 9 kernels whose PTX passes every static check, each with one mistake in a region."""
    wait = 'hopper::flag_wait_geq(flag, order, "flags"'
    return {
        "both warpgroups share one part of the slot": (_swap(src, "+ c * (64 * BN) + t;", "+ t;"),
                                                       ("computed whole are right", "computed in splits, are wrong"),
                                                       True),
        "the owner from the pair's last iteration": (_swap(
            src, "const int owner = (int)(first_g / W.per);",
            "const int owner = (int)((first_g + nk - 1) / W.per);"), ("deadlock", "flags[|empty["), True),
        "the Stream-K pairs numbered from 0": (_swap(src, "const long long t0 = (long long)(p - dp_pairs) * steps;",
                                                     "const long long t0 = (long long)p * steps;"),
                                               ("not only split ones", "the work list"), True),
        "both blocks of a cluster share one flag": (_swap(src, "unsigned* flag = flags + owner * CLUSTER + rank;",
                                                          "unsigned* flag = flags + owner * CLUSTER;"),
                                                    ("deadlock", "flags["), False),
        "a split waits for one split too few": (_swap(src, wait, 'hopper::flag_wait_geq(flag, order - 1, "flags"'),
                                                ("computed in splits, are wrong",), False),
        "per not divided by the clusters (no pair is ever split)": (_swap(
            src, "W.per = (total + clusters - 1) / clusters;", "W.per = total + clusters - 1;"),
            ("nothing reached the workspace",), True),
        "a fresh sum only at K step 0 as in Lab 7 (a piece starting inside a pair adds the last one's sums)": (
            _swap(src, "kslice_desc(b, kk), k > ka || kk > 0);", "kslice_desc(b, kk), k > 0 || kk > 0);"),
            ("computed in splits, are wrong",), True),
        "a stage released at a piece's first K step too (k > 0, as in Lab 7)": (
            _swap(src, "if (k > ka && t < CLUSTER) hopper::mbar_arrive_cluster",
                  "if (k > 0 && t < CLUSTER) hopper::mbar_arrive_cluster"),
            # the extra release at a cluster's first piece lands on empty[-1], i.e. full[STAGES - 1]
            ("released more times than it was used|each fill is released once",), False),
    }


def _solutions() -> dict[str, str]:
    from helpers.course import labgen

    out = {}
    for name, var in (("lab5_epilogue", "LAB5_SRC"), ("lab6_persistent", "LAB6_SRC"), ("lab7_clusters", "LAB7_SRC"),
                      ("lab8_pingpong", "LAB8_SRC"), ("lab9_streamk", "LAB9_SRC")):
        out[var] = labgen.solution_namespace(ROOT / "solutions" / f"{name}.ipynb")[var]
    # the kernels of Labs 5 to 9 are built on the wrappers of Labs 1 and 2 (as the solutions write them)
    out["WRAPPERS"] = (labgen.solution_namespace(ROOT / "solutions" / "lab1_tma.ipynb")["TMA_LOAD"]
                       + "".join(labgen.solution_namespace(ROOT / "solutions" / "lab2_mbarrier.ipynb")[v]
                                 for v in ("MBAR_INIT_ARRIVE", "MBAR_TX_WAIT")))
    return out


def names_all(message: str, needles: tuple[str, ...]) -> bool:
    """Every needle is in the message; a needle "a|b" is either (the H100's failure and the executor's hazard report
    name one mistake in their own words)."""
    return all(any(alt in message for alt in n.split("|")) for n in needles)


def rejects_naming(grader, answer, *needles: str) -> str:
    """``grader(answer)`` fails and its message names every needle (alternatives with "|"); returns the message."""
    from helpers.course import grading

    with contextlib.redirect_stdout(io.StringIO()):
        try:
            grader(answer)
        except grading.CheckFailed as exc:
            text = str(exc)
        else:
            raise AssertionError("the grader accepted a wrong answer")
    assert names_all(text, needles), f"{needles} not all in the failure message:\n{text}"
    return text


def _expect(results: list[dict], name: str, grade, source: str, needles: tuple[str, ...] | None) -> None:
    """Run one grader; ``needles`` None: it must pass; else it must fail with every needle in its message."""
    from helpers.course import grading

    t0 = time.time()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            grade(source)
            msg = None
        except grading.CheckFailed as exc:
            msg = str(exc)
    if needles is None:
        ok = msg is None
    else:
        # rejected by the run, or (where its needles allow it) by the compile report before any run: NVRTC 13.0 on
        # the H100 machine spills a few bytes in some wrong ping-pong kernels that NVRTC 13.5 compiles without
        ok = msg is not None and names_all(msg, needles) and (any(
            w in msg for w in (f"on {gpu.where_name()}", "on the GPU", "when it ran", f"beside {gpu.where_name()}"))
            or ("bytes spilled" in msg and any("|spilled" in n for n in needles)))
    verdict = "passed" if msg is None else "rejected"
    print(f"{'OK  ' if ok else 'BAD '} {name}: {verdict} ({time.time() - t0:.1f} s)")
    if not ok or needles is None:
        print(buf.getvalue() + (msg or ""))
    results.append({"name": name, "expected": "pass" if needles is None else f"reject, naming {list(needles)}",
                    "outcome": verdict, "ok": ok, "output": buf.getvalue(), "message": msg,
                    "seconds": round(time.time() - t0, 1)})


def main(out: Path) -> int:
    from helpers import gpu
    from helpers.course.checks import lab5, lab6, lab7, lab8, lab9

    out.mkdir(parents=True, exist_ok=True)
    if not gpu.hopper_available():
        print(f"no Hopper GPU ({gpu.no_hopper_reason()}): nothing to run; the lab tests run these on the executor")
        return 0
    info = gpu.device_info()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; device: {info}")
    src = _solutions()
    results: list[dict] = []
    _expect(results, "Lab 5 solution (timed at 4096³)",
            lambda s: lab5.check_epilogue_kernel(s, sizes=(4096,), wrappers=src["WRAPPERS"]), src["LAB5_SRC"], None)
    _expect(results, "Lab 6 solution (timed at 4096³)",
            lambda s: lab6.check_persistent_kernel(s, sizes=(4096,), wrappers=src["WRAPPERS"]), src["LAB6_SRC"], None)
    _expect(results, "Lab 7 solution (timed at 4096³)",
            lambda s: lab7.check_cluster_kernel(s, sizes=(4096,), wrappers=src["WRAPPERS"]), src["LAB7_SRC"], None)
    _expect(results, "Lab 8 solution (timed beside Lab 7 and the course's Lab 8, square and short-K)",
            lambda s: lab8.check_pingpong_kernel(s, benchmark=True, wrappers=src["WRAPPERS"]), src["LAB8_SRC"], None)
    _expect(results, "Lab 9 solution (timed beside Lab 7 on the quantized shapes)",
            lambda s: lab9.check_streamk_kernel(s, benchmark=True, wrappers=src["WRAPPERS"]), src["LAB9_SRC"],
            None)
    graders = {"lab5": lambda s: lab5.check_epilogue_kernel(s, benchmark=False, wrappers=src["WRAPPERS"]),
               "lab6": lambda s: lab6.check_persistent_kernel(s, benchmark=False, wrappers=src["WRAPPERS"]),
               "lab7": lambda s: lab7.check_cluster_kernel(s, benchmark=False, wrappers=src["WRAPPERS"]),
               "lab8": lambda s: lab8.check_pingpong_kernel(s, benchmark=False, wrappers=src["WRAPPERS"]),
               "lab9": lambda s: lab9.check_streamk_kernel(s, benchmark=False, wrappers=src["WRAPPERS"])}
    tables = {"lab5": lab5_run_only(src["LAB5_SRC"]), "lab6": lab6_run_only(src["LAB6_SRC"]),
              "lab7": lab7_run_only(src["LAB7_SRC"]), "lab8": lab8_run_only(src["LAB8_SRC"]),
              "lab9": lab9_run_only(src["LAB9_SRC"])}
    for lab, table in tables.items():
        for name, (source, needles, on_gpu) in table.items():
            if on_gpu:
                _expect(results, f"{lab} wrong · {name}", graders[lab], source, needles)
    meta = {"gpu": info.name, "driver": ".".join(map(str, info.driver_version)),
            "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}", "script": "tests/labs/gpu_lab5679.py"}
    (out / "gpu_lab5679.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    bad = [r["name"] for r in results if not r["ok"]]
    print("\n".join(["PROBLEMS:"] + bad) if bad else "all expectations held")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/out")))
