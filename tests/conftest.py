"""Test-suite wide rules: tests marked ``gpu`` run only where a Hopper GPU is present; every test has a time limit.

The limit (pytest-timeout) is ``timeout`` in pyproject.toml for most tests; the ones that run kernels on the
emulator, execute notebooks or drive a browser get the longer limits of :data:`LIMITS` unless they name their own
with ``@pytest.mark.timeout``. A test past its limit fails, its fixtures' set-up included, and the run goes on.
"""

from __future__ import annotations

import os

# One BLAS thread: the graders' small fp64 references run 30x faster than with threads fighting over a busy machine's
# cores (set before numpy loads its BLAS, which the first test module's import does).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402

#: seconds: the limit of a test by what it does (a marker, or a fixture it uses), the first that applies
LIMITS: tuple[tuple[str, int], ...] = (("browser", 1200), ("hub", 1200), ("slow", 1200), ("executed", 1200),
                                       ("executor", 900), ("gpu", 900))


def _longer_limits(items) -> None:
    for item in items:
        if item.get_closest_marker("timeout"):
            continue
        for name, seconds in LIMITS:
            if item.get_closest_marker(name) or name in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.timeout(seconds))
                break


def pytest_collection_modifyitems(config, items):
    _longer_limits(items)
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    from helpers import gpu

    if gpu.hopper_available():
        return
    skip = pytest.mark.skip(reason=f"needs a Hopper (sm_90) GPU: {gpu.no_hopper_reason()}")
    for item in gpu_items:
        item.add_marker(skip)
