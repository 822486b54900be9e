"""One graded GPU run per GPU at a time (helpers.gpu.gpulock), across processes and users, and gpu.run_isolated
uses it. A hostile student against the lock folder: a private lock file, a linked one, holding the GPU; and a
graded run inside the autograding jail queues on the same lock as everyone else."""

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
    (tmp_path / "locks").mkdir()
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
        busy = (r"stayed busy with other graded runs \(held by process \d+ \(\w+\)\) for \d+ s, longer than this "
                r"run may wait \(0.5 s\)")
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
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # read-only is enough for flock
    assert path.read_text() == "", "a run writes nothing into the lock file"


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


# ------------------------------------------------------------------------------------------ a hostile student
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the attacks run as another account (nobody)")


def as_nobody(action, *, hold_for: float = 0.0, uid: int = NOBODY) -> tuple[int, str]:
    """Run ``action()`` in a forked child as the account nobody (or ``uid``); (its pid, what it said: "ok" or the
    error). With ``hold_for`` the child stays alive that long after saying so (to hold a lock it took)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            keep = action()
            os.write(write, b"ok\n")
            time.sleep(hold_for)
            del keep
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(write, f"{type(exc).__name__}: {exc}\n".encode())
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        said = f.readline().strip()
    if not hold_for:
        os.waitpid(pid, 0)
    return pid, said


@pytest.fixture
def open_tmp():
    """A temporary folder every account can enter (pytest's own are private to root)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="gpulock-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def service_dir(open_tmp, monkeypatch):
    """The lock folder as the class hub makes it (hub/setup.sh runs gpulock.prepare as root)."""
    folder = open_tmp / "gpu-locks"
    made = gpulock.prepare(folder, ["0", "GPU-1234abcd"])
    assert [p.name for p in made] == ["gpu-0.lock", "gpu-GPU-1234abcd.lock"]
    monkeypatch.setenv("HELPERS_GPU_LOCK_DIR", str(folder))
    monkeypatch.setenv("HELPERS_DEVICE", "0")
    monkeypatch.delenv("HELPERS_GPU_LOCK", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return folder


@as_root
def test_in_the_services_folder_a_student_can_make_no_file_but_still_queues(service_dir):
    """A student's private (0600) lock file or a link cannot even be made there; their own runs queue on the
    service's read-only files, and a run that gives up names who holds the GPU."""
    assert stat.S_IMODE(service_dir.stat().st_mode) == 0o755 and service_dir.stat().st_uid == 0
    lock = service_dir / "gpu-0.lock"

    def private_file():
        lock.unlink()

    def new_private_file():
        os.close(os.open(service_dir / "gpu-7.lock", os.O_WRONLY | os.O_CREAT, 0o600))

    def link():
        (service_dir / "gpu-7.lock").symlink_to(lock)

    for attack in (private_file, new_private_file, link):
        _, said = as_nobody(attack)
        assert said.startswith("PermissionError"), (attack.__name__, said)
    assert lock.is_file() and not (service_dir / "gpu-7.lock").exists()

    def take():
        held = gpulock.hold(wait=5, say=lambda _: None)
        held.__enter__()
        return held  # kept alive while the child sleeps: the lock stays held

    pid, said = as_nobody(take, hold_for=30)
    try:
        assert said == "ok", f"a student's own run could not queue on the service's file: {said}"
        with pytest.raises(gpulock.GpuBusy, match=rf"held by process {pid} \(nobody\)"), \
                gpulock.hold(wait=0.5, say=lambda _: None):
            pass
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    with gpulock.hold(wait=5, say=lambda _: None) as waited:
        assert waited < 2
    assert lock.read_bytes() == b"" and lock.stat().st_uid == 0


@as_root
def test_a_gpu_without_a_lock_file_in_the_services_folder_is_refused_with_a_sentence(service_dir, monkeypatch):
    monkeypatch.setenv("HELPERS_DEVICE", "3")
    _, said = as_nobody(lambda: gpulock.hold(wait=1, say=lambda _: None).__enter__())
    assert said.startswith("GpuLockUnusable: there is no lock file for this GPU") and "hub/setup.sh" in said, said


@as_root
def test_a_linked_lock_file_truncates_nothing_even_with_protected_symlinks_off(open_tmp, monkeypatch):
    """In a sticky world-writable folder (the default one), a student links gpu-0.lock to another student's
    notebook: the next run refuses the link, and the notebook is untouched (the run never writes the lock)."""
    shared = open_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = open_tmp / "victim.ipynb"
    victim.write_text('{"cells": []}')
    monkeypatch.setenv("HELPERS_GPU_LOCK_DIR", str(shared))
    monkeypatch.setenv("HELPERS_DEVICE", "0")
    monkeypatch.delenv("HELPERS_GPU_LOCK", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    _, said = as_nobody(lambda: (shared / "gpu-0.lock").symlink_to(victim))
    assert said == "ok" and (shared / "gpu-0.lock").is_symlink()
    with pytest.raises(gpulock.GpuLockUnusable, match=r"gpu-0.lock is a symbolic link, owned by nobody"), \
            gpulock.hold(wait=1, say=lambda _: None):
        pass
    assert victim.read_text() == '{"cells": []}'


@as_root
def test_a_private_lock_file_in_the_default_folder_is_named_not_a_bare_permission_error(open_tmp, monkeypatch):
    """Where any account may make lock files (the default folder, for a machine with one user), another
    account's private file stops a run with a sentence naming its owner; the hub's folder admits no such file."""
    shared = open_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("HELPERS_GPU_LOCK_DIR", str(shared))
    monkeypatch.delenv("HELPERS_GPU_LOCK", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("HELPERS_DEVICE", "0")
    _, said = as_nobody(lambda: os.close(os.open(shared / "gpu-0.lock", os.O_WRONLY | os.O_CREAT, 0o600)))
    assert said == "ok"
    _, said = as_nobody(lambda: gpulock.hold(wait=1, say=lambda _: None).__enter__(), uid=NOBODY - 1)
    assert said.startswith("GpuLockUnusable: the GPU's lock file") and \
        "gpu-0.lock is not readable (Permission denied), owned by nobody" in said, said
    os.mkfifo(shared / "gpu-1.lock")
    monkeypatch.setenv("HELPERS_DEVICE", "1")
    with pytest.raises(gpulock.GpuLockUnusable, match=r"gpu-1.lock is not a regular file"), \
            gpulock.hold(wait=1, say=lambda _: None):
        pass


def test_prepare_replaces_whatever_was_in_the_folder(tmp_path):
    folder = tmp_path / "gpu-locks"
    folder.mkdir()
    (folder / "gpu-0.lock").symlink_to(tmp_path / "elsewhere")
    (folder / "junk").write_text("x")
    gpulock.prepare(folder, ["0"])
    assert sorted(p.name for p in folder.iterdir()) == ["gpu-0.lock"]
    assert not (folder / "gpu-0.lock").is_symlink() and stat.S_IMODE((folder / "gpu-0.lock").stat().st_mode) == 0o644


def _bwrap_missing() -> str | None:
    import shutil

    if shutil.which("bwrap") is None:
        return "needs bubblewrap (apt-get install bubblewrap)"
    probe = subprocess.run(["bwrap", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "true"],
                           capture_output=True, text=True, timeout=30)
    return None if probe.returncode == 0 else f"bubblewrap cannot make namespaces here: {probe.stderr.strip()}"


@pytest.mark.skipif(_bwrap_missing() is not None, reason=str(_bwrap_missing()))
def test_a_graded_run_inside_the_grading_jail_queues_on_the_same_lock(lock_env, tmp_path):
    """The jail sees the lock folder read-only: a run in a grading kernel waits for a holder outside it."""
    import nbformat

    from helpers.course.autograde import grade_notebook

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import os\nfrom helpers.gpu import gpulock\nprint(os.environ['HELPERS_GPU_LOCK_DIR'])\ntry:\n"
        "    with gpulock.hold(wait=1, say=lambda _: None):\n        print('ran beside the holder')\n"
        "except gpulock.GpuBusy as e:\n    print('queued:', e)\n")]
    (tmp_path / "sub").mkdir()
    nbformat.write(nb, tmp_path / "sub" / "sub.ipynb")
    first = holder(lock_env, 60)
    try:
        report = grade_notebook(tmp_path / "sub" / "sub.ipynb", timeout=60, referee=False)
    finally:
        first.kill()
        first.wait(10)
    said = "".join(o.get("text", "") for o in report.notebook.cells[0].outputs)
    assert "queued: the GPU (gpu-0.lock) stayed busy" in said, said
    assert said.startswith(str(Path(lock_env["HELPERS_GPU_LOCK_DIR"]).resolve())), said
