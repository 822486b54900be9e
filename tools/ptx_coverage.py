"""Compile every kernel of the course and list the PTX opcodes NVRTC emits, with whether the executor
(helpers.gpu.executor) emulates each one. Exit status 1 when an instruction is not emulated.

    python tools/ptx_coverage.py            # the table
    python tools/ptx_coverage.py --missing  # only what is not emulated
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from helpers import gpu
    from helpers.course import ptx_coverage as coverage

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--missing", action="store_true", help="print only what the executor does not emulate")
    args = ap.parse_args(argv)
    total: Counter = Counter()
    where: dict[str, set[str]] = {}
    missing: list[str] = []
    for k in coverage.course_kernels():
        try:
            kern = gpu.compile(k.source, k.name)
        except gpu.CompileError as e:
            print(f"{k.where} {k.name}: does not compile ({str(e).splitlines()[1].strip()})")
            continue
        ops = coverage.opcodes(kern.ptx)
        total.update(ops)
        for op in ops:
            where.setdefault(op, set()).add(k.name)
        missing += [f"{k.where} {k.name}: {m}" for m in coverage.unsupported(kern.ptx, kern.lowered_name)]
    if not args.missing:
        print(f"{'opcode':<90} {'count':>6}  kernels")
        for op, n in sorted(total.items()):
            print(f"{op:<90} {n:>6}  {', '.join(sorted(where[op]))[:80]}")
    print(f"\n{len(total)} distinct opcodes; {len(missing)} instructions not emulated")
    for m in missing:
        print("  " + m)
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
