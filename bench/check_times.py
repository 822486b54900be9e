"""How long each graded check of every lab takes where it runs (on a machine without a GPU: the PTX executor, in
hazard mode, as the student's check cell runs it), one table per lab.

    python bench/check_times.py [--only lab2] [--repeat 1] [--cores 1] [--busy] [--write bench/results/NAME]

Each graded check cell of ``solutions/labN_*.ipynb`` runs after the notebook's other cells, as a student's correct
answer would; the first run of a check compiles (NVRTC cache cold for that source), later ones
reuse the cache. ``--cores 1`` pins the process to one core, as a laptop's single Python process is. The course's
aim is every check under 10 s on one core. Each run's CPU seconds (the process's own, ``time.process_time``) are
recorded beside its wall-clock seconds: on a machine shared with other jobs the wall clock includes the time the
core spent on them, the CPU seconds do not. The header gives the load average before and after. ``--busy`` keeps
the other cores busy all along (a process spinning on each), as a student's laptop always does something else (a
browser, JupyterLab, the widgets): the aim holds with the other core busy.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

AIM_S = 10.0


def graded_checks(path: Path) -> tuple[dict, list[tuple[str, str]]]:
    """The notebook's namespace (every code cell but the graded checks, run in order as a student's Run All would;
    a cell that fails there is skipped) and its graded check cells: [(grade_id, source)]."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    ns: dict = {"__name__": "__main__"}
    checks = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            checks.append((meta["grade_id"], cell.source))
            continue
        with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
            exec(compile(cell.source, f"<{path.name}>", "exec"), ns)  # noqa: S102 - the course's own cells
    return ns, checks


def time_lab(path: Path, repeat: int) -> list[dict]:
    """Every graded check of one solution notebook, ``repeat`` times: seconds of each run and whether it passed."""
    here = os.getcwd()
    os.chdir(path.parent)  # later labs read the student's earlier notebooks beside them
    try:
        ns, checks = graded_checks(path)
        rows = []
        for gid, source in checks:
            runs = []
            for _ in range(repeat):
                out = io.StringIO()
                t0, c0 = time.perf_counter(), time.process_time()
                try:
                    with contextlib.redirect_stdout(out):
                        exec(compile(source, f"<{gid}>", "exec"), dict(ns))  # noqa: S102 - the course's own cell
                    passed = True
                except Exception:  # noqa: BLE001 - a failing check is a row of the table, not a crash
                    passed = False
                runs.append({"seconds": round(time.perf_counter() - t0, 2),
                             "cpu_seconds": round(time.process_time() - c0, 2), "passed": passed})
            rows.append({"check": gid, "runs": runs, "median_s": statistics.median(r["seconds"] for r in runs),
                         "median_cpu_s": statistics.median(r["cpu_seconds"] for r in runs),
                         "passed": all(r["passed"] for r in runs)})
        return rows
    finally:
        os.chdir(here)


def table(lab: str, rows: list[dict]) -> str:
    lines = [f"### {lab}", "", "| check | seconds (median) | CPU seconds (median) | runs (seconds) | passed |",
             "|---|---:|---:|---|---|"]
    for r in rows:
        flag = "" if r["median_s"] <= AIM_S else f" (over {AIM_S:g} s)"
        lines.append(f"| `{r['check']}` | {r['median_s']:.1f}{flag} | {r['median_cpu_s']:.1f} | "
                     f"{', '.join(str(x['seconds']) for x in r['runs'])} | {'yes' if r['passed'] else 'NO'} |")
    total = sum(r["median_s"] for r in rows)
    slowest = max((r["median_s"] for r in rows), default=0)
    lines += ["", f"{len(rows)} checks, {total:.0f} s in all; slowest {slowest:.1f} s", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", default=None, help="labs, e.g. lab2 lab7")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--cores", type=int, default=1, help="pin to this many cores (0: leave as is)")
    p.add_argument("--write", type=Path, default=None, help="write NAME.md and NAME.json")
    p.add_argument("--busy", action="store_true", help="keep the other cores busy (one spinning process on each)")
    args = p.parse_args(argv)
    busy = []
    if args.cores and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, cores[:args.cores])
        if args.busy:
            import subprocess

            for core in cores[args.cores:] or cores[:1]:
                busy.append(subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"]))
    try:
        return _measure(args)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def _measure(args: argparse.Namespace) -> int:
    from helpers import gpu

    where = "the H100" if gpu.hopper_available() else "the PTX executor (no sm_90 GPU; hazard mode)"
    load0 = os.getloadavg() if hasattr(os, "getloadavg") else None
    head = [f"# Graded checks: seconds each ({time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}"
            f", {args.cores or os.cpu_count()} core(s) of {os.cpu_count()}"
            + (", the other cores kept busy" if args.busy else "") + f", on {where})", ""]
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "where": where, "cores": args.cores, "busy": args.busy,
                    "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
                    "cpus": os.cpu_count(), "load_before": load0, "labs": {}}
    text = list(head)
    for path in sorted((ROOT / "solutions").glob("lab*.ipynb")):
        lab = path.stem.split("_")[0]
        if args.only and lab not in args.only:
            continue
        rows = time_lab(path, args.repeat)
        result["labs"][lab] = rows
        text.append(table(lab, rows))
        print(text[-1], flush=True)
    result["load_after"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    if load0 is not None:
        text.insert(1, f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load0)}; after: "
                       f"{', '.join(f'{x:.2f}' for x in result['load_after'])}.")
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.with_suffix(".md").write_text("\n".join(text))
        args.write.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(r["passed"] for rows in result["labs"].values() for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
