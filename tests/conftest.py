"""Test-suite wide rules: tests marked ``gpu`` run only where a Hopper GPU is present."""

from __future__ import annotations

import pytest


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
