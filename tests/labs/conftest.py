"""Fixtures of the lab grader tests: the solutions' own definitions, read from the solution notebooks."""

from __future__ import annotations

import pytest
from labtools import ROOT

from helpers.course import labgen


@pytest.fixture(scope="session")
def sol1() -> dict:
    return labgen.solution_namespace(ROOT / "solutions" / "lab1_tma.ipynb")


@pytest.fixture(scope="session")
def sol2() -> dict:
    return labgen.solution_namespace(ROOT / "solutions" / "lab2_mbarrier.ipynb")


@pytest.fixture(scope="session")
def sol3() -> dict:
    return labgen.solution_namespace(ROOT / "solutions" / "lab3_wgmma.ipynb")


@pytest.fixture(scope="session")
def wrappers(sol1: dict, sol2: dict) -> str:
    """The wrappers Labs 2 and 3 carry from the earlier labs, as the solutions write them."""
    return sol1["TMA_LOAD"] + sol2["MBAR_INIT_ARRIVE"] + sol2["MBAR_TX_WAIT"]


@pytest.fixture()
def no_gpu(monkeypatch):
    """Pretend there is no GPU (the CPU path of every CUDA check), whatever the machine."""
    from helpers.gpu import device

    monkeypatch.setattr(device, "_probe", lambda: ("no NVIDIA driver (pretend, for the test)", None))
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")  # the compile-only path (tests/ptx runs kernels on the emulator)




@pytest.fixture()
def executor(monkeypatch):
    """Run kernels on the course's PTX executor, whatever the machine (the run path of every CUDA check without an
    H100)."""
    monkeypatch.setenv("HELPERS_EXECUTOR", "force")
