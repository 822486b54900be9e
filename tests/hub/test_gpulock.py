"""One graded GPU run per GPU at a time (helpers.gpu.gpulock), across processes and users, and gpu.run_isolated
uses it."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import gpu
from helpers.gpu import gpulock

HOLD = """
import sys, time
from helpers.gpu import gpulock
with gpulock.hold(say=lambda line: print(line, flush=True)) as waited:
    print(f"holding after {waited:.2f}", flush=True)
    time.sleep(float(sys.argv[1]))
print("released", flush=True)
"""


@pytest.fixture
def lock_env(tmp_path, monkeypatch):
    env = dict(os.environ, HELPERS_GPU_LOCK_DIR=str(tmp_path / "locks"), HELPERS_DEVICE="0")
    env.pop("HELPERS_GPU_LOCK", None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("HELPERS_GPU_LOCK", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return env


def holder(env: dict, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(seconds)], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("holding"), "the first holder did not get the lock"
    return proc


def test_a_second_run_waits_for_the_first_and_says_why(lock_env):
    first = holder(lock_env, 1.5)
    lines: list[str] = []
    t0 = time.monotonic()
    with gpulock.hold(say=lines.append) as waited:
        assert first.poll() is not None or first.stdout.readline().strip() == "released"
    assert waited >= 1.0 and time.monotonic() - t0 >= 1.0
    assert lines == ["waiting for the GPU: another graded run is using it (one graded run per GPU at a time) …"]
    first.wait(10)


def test_an_idle_gpu_is_taken_at_once_without_a_message(lock_env):
    lines: list[str] = []
    with gpulock.hold(say=lines.append) as waited:
        assert waited < 0.5
    assert lines == []


def test_a_holder_that_crashes_releases_the_gpu(lock_env):
    first = holder(lock_env, 60)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    with gpulock.hold(wait=5, say=lambda _: None) as waited:
        assert waited < 2


def test_waiting_too_long_raises_a_sentence(lock_env):
    first = holder(lock_env, 30)
    try:
        busy = r"stayed busy with other graded runs for \d+ s, longer than this run may wait \(0.5 s\)"
        with pytest.raises(gpulock.GpuBusy, match=busy), gpulock.hold(wait=0.5, say=lambda _: None):
            pass
    finally:
        first.kill()
        first.wait(10)
    assert isinstance(gpulock.GpuBusy("x"), gpu.GpuError), "a GpuError: graders report it as a failed check"


def test_other_gpus_do_not_wait(lock_env):
    first = holder(lock_env, 30)
    try:
        with gpulock.hold(1, wait=0.5, say=lambda _: None) as waited:
            assert waited < 0.5
    finally:
        first.kill()
        first.wait(10)


def test_the_lock_follows_the_physical_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234abcd,3")
    assert gpulock.gpu_key(0) == "GPU-1234abcd" and gpulock.gpu_key(1) == "3"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("HELPERS_DEVICE", "2")
    assert gpulock.gpu_key() == "2"


def test_every_user_of_the_machine_can_queue_on_the_files(lock_env):
    old = os.umask(0o077)
    try:
        with gpulock.hold(say=lambda _: None):
            pass
    finally:
        os.umask(old)
    path = gpulock.lock_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o666
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o1777


def test_the_lock_can_be_switched_off(lock_env, monkeypatch):
    first = holder(lock_env, 30)
    try:
        monkeypatch.setenv("HELPERS_GPU_LOCK", "off")
        with gpulock.hold(wait=0.2, say=lambda _: None) as waited:
            assert waited == 0
    finally:
        first.kill()
        first.wait(10)


def test_run_isolated_queues_on_the_lock(lock_env, monkeypatch):
    """Every graded GPU run goes through gpu.run_isolated; with the GPU held elsewhere it waits, then gives up."""
    first = holder(lock_env, 30)
    try:
        monkeypatch.setenv("HELPERS_GPU_LOCK_WAIT", "1")
        with pytest.raises(gpulock.GpuBusy):
            gpu.run_isolated("helpers.gpu.gpulock:gpu_key")
    finally:
        first.kill()
        first.wait(10)
    assert gpu.run_isolated("helpers.gpu.gpulock:gpu_key") == "0"
    assert Path(lock_env["HELPERS_GPU_LOCK_DIR"], "gpu-0.lock").exists()
