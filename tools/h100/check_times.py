"""How long the labs' graded checks take on an H100, and how long each holds the GPU: the figures docs/hub.md uses
to say how many students one GPU serves. Run from the repository root on a machine with one H100:

    OUT=/tmp/out python3 tools/h100/check_times.py

Writes $OUT/time_checks.json (and prints a table):

- ``checks``: every graded check cell of every solution notebook, run as its check cell is (the solution's answers,
  then the check cell's code), ``repeat`` times: wall seconds (first run = cold compile cache, then warm), the
  seconds spent holding the GPU lock (inside ``gpu.run_isolated``), the number of GPU runs, and whether it passed;
- ``concurrent``: four processes running the same GPU check at once: each one's wall time and time waiting for the
  lock, and the makespan (the lock must serialize them);
- ``autograde``: each solution notebook autograded in the sandbox (helpers.course.autograde, RLIMIT_DATA on a GPU
  machine) when nbgrader/nbclient/ipykernel are installed: seconds and points.

Needs numpy, ml_dtypes, cuda-python (cuda-core, cuda-bindings) and the NVRTC wheels; no Jupyter for the first two
parts. About 2 minutes.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ.get("OUT", "/tmp/out"))
REPEAT = 3


def _cells(path: Path) -> list[dict]:
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if isinstance(cell["source"], list):
            cell["source"] = "".join(cell["source"])
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def solution_namespace(path: Path) -> dict:
    """Every code cell of the notebook except the graded checks, executed in order from the notebook's folder (the
    labs carry the student's wrappers from the earlier notebooks beside them), as a student's run would."""
    ns: dict = {"__name__": "__main__"}
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        for cell in _cells(path):
            if _meta(cell).get("grade"):
                continue
            try:
                exec(cell["source"], ns)  # noqa: S102 - the course's own notebooks
            except Exception as exc:  # noqa: BLE001 - a drawing cell may need a front end; the checks do not
                print(f"  ({path.name}: a cell raised {type(exc).__name__}: {str(exc)[:120]})", flush=True)
    finally:
        os.chdir(here)
    return ns


class GpuMeter:
    """Counts the runs through gpu.run_isolated and the seconds they held the GPU lock."""

    def __init__(self) -> None:
        from helpers.gpu import isolate

        self.isolate, self.original = isolate, isolate._run_child
        self.runs, self.seconds = 0, 0.0
        isolate._run_child = self._timed

    def _timed(self, job, timeout):
        t0 = time.perf_counter()
        try:
            return self.original(job, timeout)
        finally:
            self.runs += 1
            self.seconds += time.perf_counter() - t0

    def reset(self) -> None:
        self.runs, self.seconds = 0, 0.0


def time_checks() -> dict:
    from helpers.course import grading

    meter = GpuMeter()
    results = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        ns = solution_namespace(path)
        for cell in _cells(path):
            meta = _meta(cell)
            if not meta.get("grade"):
                continue
            runs = []
            for _ in range(REPEAT):
                meter.reset()
                t0 = time.perf_counter()
                here = os.getcwd()
                os.chdir(path.parent)
                try:
                    exec(cell["source"], ns)  # noqa: S102 - the check cell, as the notebook runs it
                    passed, error = True, None
                except grading.CheckFailed as exc:
                    passed, error = False, str(exc).splitlines()[0][:300]
                finally:
                    os.chdir(here)
                runs.append({"seconds": round(time.perf_counter() - t0, 3), "gpu_seconds": round(meter.seconds, 3),
                             "gpu_runs": meter.runs, "passed": passed, "error": error})
            results[meta["grade_id"]] = {
                "lab": path.stem, "points": meta.get("points"), "runs": runs,
                "median_seconds": statistics.median(r["seconds"] for r in runs[1:] or runs),
                "median_gpu_seconds": statistics.median(r["gpu_seconds"] for r in runs[1:] or runs),
                "passed": all(r["passed"] for r in runs)}
            print(f"{meta['grade_id']:24s} {results[meta['grade_id']]['median_seconds']:7.2f} s "
                  f"(GPU held {results[meta['grade_id']]['median_gpu_seconds']:6.2f} s, {runs[-1]['gpu_runs']} runs)"
                  f"{'' if results[meta['grade_id']]['passed'] else '  FAILED: ' + str(runs[-1]['error'])}",
                  flush=True)
    return results


def _one_concurrent(args: tuple[str, str, str]) -> dict:
    lab, grade_id, lock_dir = args
    os.environ["HELPERS_GPU_LOCK_DIR"] = lock_dir
    from helpers.gpu import gpulock

    path = ROOT / "solutions" / f"{lab}.ipynb"
    ns = solution_namespace(path)
    cell = next(c for c in _cells(path) if _meta(c).get("grade_id") == grade_id)
    waited = []
    original = gpulock.hold

    def counting_hold(*a, **k):
        cm = original(*a, **k)

        class Wrap:
            def __enter__(self):
                w = cm.__enter__()
                waited.append(w)
                return w

            def __exit__(self, *e):
                return cm.__exit__(*e)

        return Wrap()

    gpulock.hold = counting_hold
    t0 = time.perf_counter()
    exec(cell["source"], ns)  # noqa: S102
    return {"seconds": round(time.perf_counter() - t0, 3), "waited_for_gpu": round(sum(waited), 3)}


def concurrent(grade_id: str = "lab2-stream", lab: str = "lab2_mbarrier", n: int = 4) -> dict:
    lock_dir = tempfile.mkdtemp(prefix="gpu-locks-")
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(n) as pool:
        each = pool.map(_one_concurrent, [(lab, grade_id, lock_dir)] * n)
    return {"check": grade_id, "processes": n, "makespan_seconds": round(time.perf_counter() - t0, 3), "each": each}


def autograde_all() -> dict:
    try:
        from helpers.course.autograde import grade_notebook
    except Exception as exc:  # noqa: BLE001 - no nbgrader / nbclient here: say so
        return {"skipped": f"helpers.course.autograde needs nbgrader, nbclient and ipykernel ({exc})"}
    out = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        t0 = time.perf_counter()
        try:
            report = grade_notebook(path, timeout=600, notebook_seconds=900)
            out[path.stem] = {"seconds": round(time.perf_counter() - t0, 2), "points": report.points,
                              "max_points": sum(c.max_points for c in report.cells),
                              "errors": {c.grade_id: c.error for c in report.cells if c.error}}
        except Exception as exc:  # noqa: BLE001 - recorded for the report
            out[path.stem] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"autograde {path.stem}: {out[path.stem]}", flush=True)
    return out


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    from helpers import gpu

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except FileNotFoundError:
        smi = "no nvidia-smi"
    env = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "gpu": smi, "python": platform.python_version(),
           "hopper_available": gpu.hopper_available(), "no_hopper_reason": gpu.no_hopper_reason()}
    print(env, flush=True)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["HELPERS_CUBIN_CACHE"] = cache  # the first run of each check compiles: a cold cache
        result = {"env": env, "repeat": REPEAT, "checks": time_checks()}
        result["concurrent"] = concurrent()
        print("concurrent:", result["concurrent"], flush=True)
    result["autograde"] = autograde_all()
    (OUT / "time_checks.json").write_text(json.dumps(result, indent=1))
    failed = [k for k, v in result["checks"].items() if not v["passed"]]
    print(f"wrote {OUT / 'time_checks.json'}; {len(result['checks'])} checks, failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
