"""The grading kernel: an IPython kernel that starts with resource limits and the course's graders already loaded.

It is started by :class:`helpers.course.autograde.IsolatedExecute` as::

    python -P -s -c BOOT <grader dir> <spec json> -f <connection file>

where ``<grader dir>`` holds the grader's read-only copy of ``helpers`` (put first on ``sys.path`` before
anything else is imported, so neither the student's environment nor files submitted beside the notebook can
stand in for it) and ``<spec json>`` gives the limits and the environment. ``-P`` keeps the working directory
(the submission) off ``sys.path``.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import pkgutil
import resource
import signal
import sys
import threading
import time

#: the code after ``python -P -s -c``; argv: <grader dir> <spec json> <kernel args...>
BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from helpers.course.autograde.kernel import main; "
        "main(sys.argv[2:])")

#: modules loaded before the first cell: what the graders use, so the fingerprint taken then covers them
PRELOAD = ("numpy", "ml_dtypes", "helpers", "helpers.course.grading", "helpers.hopper.tensormap", "helpers.hopper.tma",
           "helpers.hopper.mbarrier", "helpers.hopper.wgmma", "helpers.hopper.pipeline", "helpers.gpu",
           "helpers.gpu.gpulock")


def apply_limits(limits: dict) -> None:
    """Set this process's limits (inherited by anything it starts): memory, CPU seconds, file size, no core dumps.

    ``memory_rlimit`` says which limit bounds memory: ``as`` (all address space) or ``data`` (heap and private
    writable mappings; the CUDA driver reserves tens of GB of address space it never touches, so a GPU machine
    needs ``data``).
    """
    mb = limits.get("memory_mb")
    if mb:
        which = resource.RLIMIT_DATA if limits.get("memory_rlimit") == "data" else resource.RLIMIT_AS
        resource.setrlimit(which, (mb << 20, mb << 20))
    cpu = limits.get("cpu_seconds")
    if cpu:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))  # SIGXCPU at the soft limit, SIGKILL at the hard
    nproc = limits.get("nproc")
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    fsize = limits.get("file_mb")
    if fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize << 20, fsize << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _die_with_parent() -> None:
    """Ask Linux to kill this process when the process that started it goes (prctl PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the wall-clock watchdog below still ends the kernel
        pass


def _watchdog(seconds: float) -> None:
    """End the process after ``seconds`` of wall-clock time, whatever the notebook is doing."""

    def stop() -> None:
        time.sleep(seconds)
        os._exit(124)

    threading.Thread(target=stop, name="grading-time-limit", daemon=True).start()


def preload() -> list[str]:
    """Import the modules the graders rely on, and every grader (``helpers.course.checks.*``)."""
    names = list(PRELOAD)
    import helpers.course.checks as checks

    names += [f"helpers.course.checks.{m.name}" for m in pkgutil.iter_modules(checks.__path__)]
    for name in names:
        importlib.import_module(name)
    return names


def copy_submission(src: str, dest: str) -> None:
    """Copy the submitted files (read-only in the jail) into the working folder, regular files only."""
    import shutil
    from pathlib import Path

    top = Path(src)
    for p in sorted(top.rglob("*")) if top.is_dir() else []:
        target = Path(dest) / p.relative_to(top)
        if p.is_symlink():
            continue
        if p.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif p.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, target)


def main(argv: list[str]) -> None:
    """Apply the spec (environment, limits), load the graders, then run an IPython kernel with ``argv[1:]``.

    The kernel is set up in an empty folder (IPython reads configuration files from the working folder), then
    moves to the working folder with the copy of the submission: no file submitted beside the notebook is read as
    configuration, profile or startup file.
    """
    spec = json.loads(argv[0])
    for var in ("PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT"):
        os.environ.pop(var, None)
    os.environ.update(spec.get("env", {}))
    apply_limits(spec.get("limits", {}))
    _die_with_parent()
    if spec.get("limits", {}).get("wall_seconds"):
        _watchdog(float(spec["limits"]["wall_seconds"]))
    preload()
    from ipykernel.kernelapp import IPKernelApp

    work = os.getcwd()
    if spec.get("submission"):
        copy_submission(spec["submission"], work)
    empty = os.path.join(os.environ.get("IPYTHONDIR", "/tmp/.ipython") + "-boot")
    os.makedirs(empty, exist_ok=True)
    os.chdir(empty)
    sys.argv = ["grading-kernel", *argv[1:]]
    app = IPKernelApp.instance()
    # the kernel's Unix sockets: the grader connects as another account of the group (run_as through sudo), and
    # connecting needs write permission on the socket file
    before = os.umask(0o007)
    app.initialize(argv[1:])
    os.umask(before)
    os.chdir(work)
    app.start()
