"""Child-process side of gpu.run_isolated (``python -m helpers.gpu._child``)."""

from __future__ import annotations

import importlib
import importlib.util
import pickle
import sys
from typing import Any


def _resolve(spec: tuple[str, str]) -> Any:
    mod_name, qual = spec
    if mod_name.endswith(".py"):
        s = importlib.util.spec_from_file_location("isolated_target", mod_name)
        mod = importlib.util.module_from_spec(s)
        assert s.loader is not None
        s.loader.exec_module(mod)
    else:
        mod = importlib.import_module(mod_name)
    obj: Any = mod
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def _launch(job: dict[str, Any]) -> list[Any]:
    import numpy as np

    from helpers import gpu

    args = list(job["args"])
    dev: dict[int, Any] = {}
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            dev[i] = gpu.to_device(a)
    real: list[Any] = []
    keep: list[Any] = []
    for i, a in enumerate(args):
        if i in dev:
            real.append(dev[i])
        elif isinstance(a, gpu.TensorMapArg):
            src = gpu.to_device(a.array)
            keep.append(src)
            real.append(gpu.tensor_map(src, a.box, swizzle=a.swizzle, via=a.via))
        else:
            real.append(a)
    gpu.launch(job["kernel"], job["grid"], job["block"], job["smem"], *real, cluster=job["cluster"],
               timeout=job["timeout"] + 5)  # the parent's limit comes first
    return [dev[i].to_host() for i in sorted(dev)]


def main() -> None:
    answer = sys.argv[1]
    raw = sys.stdin.buffer.read()
    try:
        job = pickle.loads(raw)  # a Kernel unpickles by recompiling (a cache hit)
        if job["kind"] == "launch":
            result: Any = ("ok", _launch(job))
        else:
            fn = _resolve(tuple(job["spec"]))
            result = ("ok", fn(*job["args"], **job["kwargs"]))
    except BaseException as e:  # everything goes back to the parent as (class name, sentence)
        result = ("error", (type(e).__name__, str(e)))
    sys.stdout.flush()
    try:
        data = pickle.dumps(result)
    except Exception as e:
        data = pickle.dumps(("error", ("TypeError", f"the result could not be sent back (not picklable: {e})")))
    with open(answer, "wb") as f:
        f.write(data)
    sys.stdout.flush()
    # Skip interpreter teardown: a faulted CUDA context can make finalizers slow.
    import os

    os._exit(0)


if __name__ == "__main__":
    main()
