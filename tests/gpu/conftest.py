"""Shared fixtures of the GPU-runtime tests."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> str:
    """Pretend there is no GPU, whatever this machine has, and no emulator fallback (HELPERS_EXECUTOR=off: the
    one-line 'needs a Hopper GPU' path; tests/ptx covers the fallback)."""
    from helpers.gpu import device

    reason = "no NVIDIA driver (pretend, for the test)"
    monkeypatch.setattr(device, "_probe", lambda: (reason, None))
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")
    return reason


@pytest.fixture()
def cubin_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty CUBIN cache."""
    d = tmp_path / "cubins"
    monkeypatch.setenv("HELPERS_CUBIN_CACHE", str(d))
    return d


@pytest.fixture(scope="session")
def reference_source() -> str:
    return (ROOT / "bench" / "kernels" / "gemm_64x64.cu").read_text()
