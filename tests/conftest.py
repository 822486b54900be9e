"""Test-suite wide rules: tests marked ``gpu`` run only where a Hopper GPU is present."""

from __future__ import annotations

import os

# One BLAS thread: the graders' small fp64 references run 30x faster than with threads fighting over a busy machine's
# cores (set before numpy loads its BLAS, which the first test module's import does).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    from helpers import gpu

    if gpu.hopper_available():
        return
    skip = pytest.mark.skip(reason=f"needs a Hopper (sm_90) GPU: {gpu.no_hopper_reason()}")
    for item in gpu_items:
        item.add_marker(skip)
