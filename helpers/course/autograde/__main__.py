"""``python -m helpers.course.autograde grade NOTEBOOK [...]``: grade notebooks in the sandbox, print each check's
points."""

from __future__ import annotations

import argparse
import sys

from .execute import grade_notebook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.course.autograde", description=__doc__.split(":", 1)[1])
    sub = parser.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grade", help="run notebooks in the sandbox and print the points of each graded cell")
    g.add_argument("notebooks", nargs="+")
    g.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    g.add_argument("--notebook-seconds", type=int, default=1800, help="seconds for the whole notebook")
    g.add_argument("--memory-mb", type=int, default=4096)
    g.add_argument("--cpu-seconds", type=int, default=900)
    g.add_argument("--run-as", default="", help="Unix account to run the kernel as (through sudo)")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        report = grade_notebook(path, timeout=args.timeout, notebook_seconds=args.notebook_seconds,
                                memory_mb=args.memory_mb, cpu_seconds=args.cpu_seconds, run_as=args.run_as)
        print(f"== {path}\n{report.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
