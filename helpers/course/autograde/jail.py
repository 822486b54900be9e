"""A throw-away jail for one submission: bubblewrap namespaces, a control group for the whole submission, and
nothing of it left when grading ends.

The grader starts the jail as ``python -P -s -c BOOT <grader dir> <spec json> -- <command...>`` (as the grading
account through sudo, or as root). :func:`main` then

1. puts itself into a fresh control group ``hopper-grading/<name>`` (cgroup v2, or the v1 ``memory``, ``pids`` and
   ``cpu`` controllers) with the submission's limits: memory (with swap), number of processes, CPU share. Where no
   cgroup hierarchy is writable it says so in the kernel's log, and ``RLIMIT_NPROC`` on the grading account stands
   in for the process limit;
2. replaces itself with ``bwrap``: new PID, mount, network (loopback only, nothing outside), IPC, UTS and, when not
   root, user namespaces; the system, the Python environment and the grader's copy of the course read-only; the
   submission's copy read-only at ``/submission``; the GPU lock folder read-only; a fresh ``tmpfs`` for ``/tmp``,
   ``HOME`` and the working folder; only the folder of the kernel's sockets shared with the grader. As root, the
   command inside drops to an unprivileged uid (``setpriv``), so no process of a submission runs as root.

When bwrap's first process ends, the PID namespace takes every process of the submission with it; the grader also
kills what is left in the control group and removes it (:func:`cleanup`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

#: the code after ``python -P -s -c``; argv: <grader dir> <spec json> -- <command...>
BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from helpers.course.autograde.jail import main; "
        "main(sys.argv[2:])")

CGROUP_ROOT = Path(os.environ.get("HOPPER_CGROUP_ROOT", "/sys/fs/cgroup"))
#: the control group every submission's group is made in (hub/setup.sh hands it to the grading account)
PARENT = "hopper-grading"
V1_CONTROLLERS = ("memory", "pids", "cpu")
#: where the submission's copy appears inside the jail
SUBMISSION = "/submission"


# ------------------------------------------------------------------------------------------------ control groups
def cgroup_version() -> int:
    """2 or 1 where this account can make a control group for a submission, 0 where it cannot."""
    v2 = CGROUP_ROOT / "cgroup.controllers"
    if v2.exists() and _writable_parent([CGROUP_ROOT]):
        return 2
    if all((CGROUP_ROOT / c).is_dir() for c in V1_CONTROLLERS) and \
            _writable_parent([CGROUP_ROOT / c for c in V1_CONTROLLERS]):
        return 1
    return 0


def _writable_parent(tops: list[Path]) -> bool:
    for top in tops:
        parent = top / PARENT
        if not parent.is_dir():
            try:
                parent.mkdir()
            except OSError:
                return False
        if not os.access(parent, os.W_OK):
            return False
    return True


def cgroup_dirs(name: str, version: int) -> list[Path]:
    """The control group folders of the submission called ``name``."""
    if version == 2:
        return [CGROUP_ROOT / PARENT / name]
    if version == 1:
        return [CGROUP_ROOT / c / PARENT / name for c in V1_CONTROLLERS]
    return []


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def make_cgroup(name: str, limits: dict) -> tuple[int, list[str]]:
    """Make the submission's control group with its limits and move this process in; (version, what applies)."""
    version = cgroup_version()
    applied: list[str] = []
    if version == 0:
        return 0, applied
    memory = (limits.get("memory_mb") or 0) << 20
    procs = limits.get("max_processes") or 0
    cpus = limits.get("cpus") or 0
    dirs = cgroup_dirs(name, version)
    for d in dirs:
        d.mkdir(exist_ok=True)
    if version == 2:
        (d,) = dirs
        _write(CGROUP_ROOT / PARENT / "cgroup.subtree_control", "+memory +pids +cpu")
        if memory and _write(d / "memory.max", str(memory)):
            _write(d / "memory.swap.max", "0")
            applied.append("memory")
        if procs and _write(d / "pids.max", str(procs)):
            applied.append("pids")
        if cpus and _write(d / "cpu.max", f"{int(cpus * 100000)} 100000"):
            applied.append("cpu")
        _write(d / "cgroup.procs", str(os.getpid()))
    else:
        mem, pids, cpu = dirs
        if memory and _write(mem / "memory.limit_in_bytes", str(memory)):
            _write(mem / "memory.memsw.limit_in_bytes", str(memory))
            applied.append("memory")
        if procs and _write(pids / "pids.max", str(procs)):
            applied.append("pids")
        if cpus and _write(cpu / "cpu.cfs_period_us", "100000") and \
                _write(cpu / "cpu.cfs_quota_us", str(int(cpus * 100000))):
            applied.append("cpu")
        for d in dirs:
            _write(d / "cgroup.procs", str(os.getpid()))
    return version, applied


def cleanup(name: str) -> list[str]:
    """Kill every process left in the submission's control group and remove it; the leftovers, in words."""
    left = []
    for version in (2, 1):
        for d in cgroup_dirs(name, version):
            if not d.is_dir():
                continue
            for _ in range(50):
                try:
                    pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.05)
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                left.append(f"{d} ({exc.strerror})")
    return left


def _remove_empty_siblings() -> None:
    """Control groups of earlier submissions that the grader could not remove (owned by the grading account)."""
    for top in [CGROUP_ROOT / PARENT, *(CGROUP_ROOT / c / PARENT for c in V1_CONTROLLERS)]:
        if top.is_dir():
            for d in top.iterdir():
                if d.is_dir():
                    with contextlib.suppress(OSError):
                        d.rmdir()


# ------------------------------------------------------------------------------------------------ bubblewrap
def _system_binds() -> list[str]:
    args = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"):
        p = Path(top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), top]
        elif p.is_dir():
            args += ["--ro-bind", top, top]
    return args


def _python_tops() -> list[str]:
    tops: list[str] = []
    for top in sorted({sys.base_prefix, sys.prefix, str(Path(sys.executable).resolve().parent.parent)}):
        if not any(top == t or top.startswith(t + "/") for t in tops) and top != "/usr" \
                and not top.startswith(("/usr/", "/etc/")):
            tops.append(top)
    return tops


def _open_parents(dest: str, made: set[str]) -> list[str]:
    """bwrap arguments making the folders above ``dest`` enterable (bwrap would copy the host's modes: a
    ``0700`` home above the Python environment would shut the unprivileged kernel out)."""
    args = []
    for parent in reversed(Path(dest).parents):
        if str(parent) not in made:
            made.add(str(parent))
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def bwrap_argv(spec: dict, command: list[str]) -> list[str]:
    """The bwrap command line for a spec (paths, environment, uid) and the command to run inside."""
    bwrap = shutil.which("bwrap") or "bwrap"
    root = os.geteuid() == 0
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--hostname", "grading"]
    if not root:
        args += ["--unshare-user", "--disable-userns"]
    args += _system_binds() + ["--proc", "/proc", "--dev", "/dev"]
    tmp_mb = int(spec.get("tmp_mb") or 0)
    # every writable place a size of its own (and all of them in the control group's memory): /dev/shm too
    for path in ("/tmp", spec["home"], spec["work"], "/dev/shm"):  # first: the binds below may lie under /tmp
        args += (["--size", str(tmp_mb << 20)] if tmp_mb else []) + ["--perms", "1777", "--tmpfs", path]
    made = {"/", "/tmp", "/usr", spec["home"], spec["work"], "/dev/shm"}
    for top in _python_tops():
        args += _open_parents(top, made) + ["--ro-bind", top, top]
    for dest in (spec["grader"], spec["sockets"]):
        args += _open_parents(dest, made)
    args += ["--ro-bind", spec["grader"], spec["grader"], "--ro-bind", spec["submission"], SUBMISSION,
             "--bind", spec["sockets"], spec["sockets"]]
    for path in spec.get("read_only", []):  # the GPU lock folder: graded runs queue with the machine's others
        if os.path.isdir(path):
            args += _open_parents(path, made) + ["--ro-bind", path, path]
    for dev in spec.get("devices", []):
        if os.path.exists(dev):
            args += ["--dev-bind", dev, dev]
    args += ["--chdir", spec["work"], "--clearenv"]
    for key, value in spec.get("env", {}).items():
        args += ["--setenv", key, value]
    if root:
        uid, gid = spec.get("uid", 65534), spec.get("gid", 65534)
        command = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs",
                   "--inh-caps=-all", "--bounding-set=-all", "--", *command]
    return [*args, "--", *command]


def main(argv: list[str]) -> None:
    """Join a fresh control group with the submission's limits, then become bwrap running the command."""
    spec = json.loads(argv[0])
    command = argv[argv.index("--") + 1:]
    _remove_empty_siblings()
    version, applied = make_cgroup(spec["name"], spec.get("limits", {}))
    from .kernel import apply_limits

    limits = dict(spec.get("limits", {}))
    if "pids" not in applied and limits.get("max_processes"):
        limits["nproc"] = limits["max_processes"]  # per account: the grading account runs one submission at a time
    who = f"root, dropping to uid {spec.get('uid', 65534)}" if os.geteuid() == 0 else "user namespace"
    sys.stderr.write(f"jail: cgroup v{version} limits {', '.join(applied) or 'none'}; {who}\n")
    sys.stderr.flush()
    apply_limits({k: v for k, v in limits.items() if k in ("nproc", "file_mb")})
    os.execvp("bwrap", bwrap_argv(spec, command))
