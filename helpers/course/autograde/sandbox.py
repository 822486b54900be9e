"""The place a submission is graded: a temporary folder with the grader's read-only copy of ``helpers``, a copy
of the submitted files, the folder of the kernel's sockets, and the kernel's spec. The kernel runs in a
:mod:`~helpers.course.autograde.jail` that sees only the first two (read-only) and the sockets.

Layout (``root`` is private to the grader, or shared with the grading account's group when ``run_as`` is set)::

    root/grader/helpers/…     the copy the kernel imports (files 0444, folders 0555; read-only in the jail)
    root/submission/          the submitted regular files (read-only at /submission in the jail, copied into
                              the kernel's working folder, a tmpfs, when it starts)
    root/sockets/             the connection file and the kernel's Unix sockets (no network in the jail)
    root/kernels/hopper-grader/kernel.json
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import json
import os
import pkgutil
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import answerkey
from . import jail, kernel

KERNEL_NAME = "hopper-grader"
#: the longest path of a Unix socket Linux takes (sun_path holds 108 bytes with the closing NUL)
UNIX_SOCKET_PATH_MAX = 107


def _installed_helpers() -> Path:
    import helpers

    return Path(helpers.__file__).resolve().parent


def file_hashes(top: Path) -> dict[str, str]:
    """sha256 of every file under ``top``, by relative path."""
    return {str(p.relative_to(top)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(top.rglob("*")) if p.is_file()}


def _make_read_only(top: Path) -> None:
    for p in top.rglob("*"):
        p.chmod(0o555 if p.is_dir() else 0o444)
    top.chmod(0o555)


#: the most a submission folder may hold (what nbgrader collects is a notebook and a few files)
MAX_FILES, MAX_BYTES = 2000, 512 << 20


#: inside the jail: the kernel's HOME and working folder (both fresh tmpfs)
HOME, WORK = "/home/student", "/home/student/lab"


def _copy_submission(src: Path, dest: Path, skip: Path) -> None:
    """Copy the submitted files (regular files and folders only: a symbolic link could point anywhere; nothing
    whose name starts with a dot: no startup files, profiles or configuration)."""
    files = [p for p in src.rglob("*") if not p.is_symlink() and p.is_file() and skip not in p.parents
             and not any(part.startswith(".") for part in p.relative_to(src).parts)
             and not any(q.is_symlink() for q in p.relative_to(src).parents if q != Path("."))]
    size = sum(p.stat().st_size for p in files[:MAX_FILES + 1])
    if len(files) > MAX_FILES or size > MAX_BYTES:
        raise ValueError(f"the submission folder {src} holds {len(files)} files, {size >> 20} MB: more than a "
                         f"submission ({MAX_FILES} files, {MAX_BYTES >> 20} MB); grade a notebook in its own folder")
    for p in files:
        target = dest / p.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target)


class Sandbox:
    """A fresh grading place for one notebook; ``close()`` removes it."""

    def __init__(self, submission_dir: Path | None, *, run_as: str = "", work_root: str = "",
                 carried: dict[str, str] | None = None) -> None:
        self.run_as = run_as
        self.root = Path(tempfile.mkdtemp(prefix="hopper-grade-", dir=work_root or None))
        self.grader = self.root / "grader"
        self.work = self.root / "submission"
        self.sockets = self.root / "sockets"
        self.kernels = self.root / "kernels"
        if len(bytes(self.sockets / "k-65535")) > UNIX_SOCKET_PATH_MAX:
            shutil.rmtree(self.root)
            raise ValueError(f"IsolatedExecute.work_root {work_root!r} is too deep: the kernel's Unix sockets under "
                             f"it would need paths over {UNIX_SOCKET_PATH_MAX} bytes, the most Linux takes; choose "
                             "a shorter folder (the default is the temp directory)")
        self.name = f"{self.root.name}-{secrets.token_hex(4)}"
        self.uid, self.gid = 65534, 65534
        self.jails: list[str] = []
        self.leftovers: list[str] = []
        self.group = None
        if run_as:
            try:
                account = pwd.getpwnam(run_as)
                self.group, self.uid, self.gid = account.pw_gid, account.pw_uid, account.pw_gid
            except KeyError:
                shutil.rmtree(self.root)
                raise ValueError(f"IsolatedExecute.run_as names {run_as!r}, and there is no such account on this "
                                 "machine (hub/setup.sh creates it; see docs/hub.md)") from None
            self._share_with_group(self.root, 0o750)
        self.grader.mkdir()
        shutil.copytree(_installed_helpers(), self.grader / "helpers",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))
        # no answer in a jail: the copy's course data loses its answers, whatever the grader's install holds, and
        # gets back only the stand-in kernels of the labs before the graded one (helpers.course.answerkey)
        answerkey.strip_package(self.grader / "helpers")
        answerkey.add_carried(self.grader / "helpers", carried or {})
        self.hashes = file_hashes(self.grader)
        _make_read_only(self.grader)
        self.work.mkdir()
        if submission_dir is not None and submission_dir.is_dir():
            _copy_submission(submission_dir, self.work, self.root)
        for p in [self.work, *self.work.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        self.sockets.mkdir()
        if run_as:  # the kernel's account makes its sockets here; the grader (in its group) must be able to clean up
            self._share_with_group(self.sockets, 0o2770)
        elif os.geteuid() == 0:  # the jail drops to an unprivileged uid
            self.sockets.chmod(0o777)
        self.modules = self._module_names()
        self.gpu_locks = _gpu_lock_dir()
        self.log = (self.root / "kernel.log").open("wb")  # the kernel's own stdout/stderr (not the notebook's)

    def _share_with_group(self, path: Path, mode: int) -> None:
        try:
            os.chown(path, -1, self.group)
        except PermissionError:
            name = grp.getgrgid(self.group).gr_name
            raise PermissionError(
                f"autograding as {self.run_as!r} needs this account ({pwd.getpwuid(os.getuid()).pw_name}) in the "
                f"group {name!r} (usermod -aG {name} <instructor>; see docs/hub.md)") from None
        path.chmod(mode)

    def _module_names(self) -> set[str]:
        top = self.grader / "helpers"
        names = {"helpers"}
        for info in pkgutil.walk_packages([str(top)], prefix="helpers.", onerror=lambda _: None):
            names.add(info.name)
        return names

    def _jail_spec(self, suffix: str, limits: dict, env: dict[str, str]) -> dict:
        return {"name": f"{self.name}-{suffix}", "grader": str(self.grader), "submission": str(self.work),
                "sockets": str(self.sockets), "home": HOME, "work": WORK, "uid": self.uid, "gid": self.gid,
                "tmp_mb": limits.get("tmp_mb", 0), "env": env, "devices": _gpu_devices(),
                "read_only": [str(self.gpu_locks)] if self.gpu_locks else [],
                "limits": {k: limits.get(k) for k in ("memory_mb", "max_processes", "cpus", "file_mb")}}

    def jail_argv(self, command: list[str], suffix: str, limits: dict, env: dict[str, str] | None = None
                  ) -> list[str]:
        """The command line that runs ``command`` in a fresh jail of this sandbox (its own control group)."""
        spec = self._jail_spec(suffix, limits, env if env is not None else self.jail_env())
        argv = [sys.executable, "-P", "-s", "-c", jail.BOOT, str(self.grader), json.dumps(spec), "--", *command]
        if self.run_as and os.geteuid() != 0:
            argv = ["sudo", "-n", "-u", self.run_as, "--", *argv]
        self.jails.append(spec["name"])
        return argv

    def jail_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment inside a jail: fresh folders for IPython, Jupyter and caches, the grader's course."""
        locks = {"HELPERS_GPU_LOCK_DIR": str(self.gpu_locks)} if self.gpu_locks else {}
        return {"HOME": HOME, "IPYTHONDIR": "/tmp/.ipython", "JUPYTER_CONFIG_DIR": "/tmp/.jupyter",
                "JUPYTER_DATA_DIR": "/tmp/.jupyter-data", "MPLCONFIGDIR": "/tmp/.matplotlib",
                "PYTHONPATH": str(self.grader), "HELPERS_CUBIN_CACHE": "/tmp/.cubins", **(extra or {}), **locks}

    jail_work = WORK

    def cleanup_jail(self, suffix: str) -> None:
        """Kill what is left of one jail's processes and remove its control group."""
        self.leftovers += jail.cleanup(f"{self.name}-{suffix}")

    def kernel_spec(self, limits: dict, env: dict[str, str]) -> Path:
        """Write the kernel spec that starts :mod:`helpers.course.autograde.kernel` in the jail (through sudo with
        ``run_as`` when the grader is not root)."""
        jail_env = self.jail_env(env)
        inner = {"limits": limits, "submission": jail.SUBMISSION, "env": jail_env}
        command = [sys.executable, "-P", "-s", "-c", kernel.BOOT, str(self.grader), json.dumps(inner),
                   "-f", "{connection_file}", "--HistoryManager.hist_file=:memory:"]
        argv = self.jail_argv(command, "kernel", limits, jail_env)
        path = self.kernels / KERNEL_NAME
        path.mkdir(parents=True)
        (path / "kernel.json").write_text(json.dumps(
            {"argv": argv, "display_name": "Grading kernel", "language": "python", "interrupt_mode": "message"}))
        return self.kernels

    def lock_sockets(self) -> None:
        """Once the kernel has made its sockets: the folder is no longer writable from the jail (the sockets stay
        connectable), so the one host folder a jail shares cannot fill the disk or hold a tree left behind."""
        if self.run_as:
            self.sockets.chmod(0o2750)
        elif os.geteuid() == 0:
            self.sockets.chmod(0o755)

    def share_file(self, path: Path) -> None:
        """Let the kernel's account read a file the grader wrote (the connection file)."""
        if self.run_as:
            self._share_with_group(path, 0o640)
        elif os.geteuid() == 0:
            path.chmod(0o644)

    def tampered_files(self) -> list[str]:
        """Files of the grader's copy that differ from when it was made (or were added or removed)."""
        try:
            now = file_hashes(self.grader)
        except OSError as exc:  # a file made unreadable is a change too
            return [f"(unreadable: {exc.filename})"]
        return sorted(k for k in set(now) | set(self.hashes) if now.get(k) != self.hashes.get(k))

    def log_tail(self, lines: int = 5) -> str:
        """The last lines the kernel process printed outside the notebook (a crash message, say)."""
        self.log.flush()
        text = (self.root / "kernel.log").read_text(errors="replace").strip().splitlines()
        return "\n".join(line for line in text[-lines:] if "without encryption" not in line)

    def close(self) -> None:
        """Kill whatever the submission left running (its control group) and remove the whole folder."""
        self.log.close()
        for name in self.jails:
            self.leftovers += jail.cleanup(name)

        def writable(func, path, _exc):  # read-only copies and folders the kernel made: open them up and retry
            with contextlib.suppress(OSError):
                os.chmod(os.path.dirname(path), stat.S_IRWXU)
                os.chmod(path, stat.S_IRWXU)
                func(path)

        for p in [self.root, *self.root.rglob("*")]:
            with contextlib.suppress(OSError):
                if not p.is_symlink():
                    p.chmod(0o700 if p.is_dir() else 0o600)
        handler = {"onexc": writable} if sys.version_info >= (3, 12) else {"onerror": writable}
        shutil.rmtree(self.root, **handler)
        if self.root.exists() and self.run_as and os.geteuid() != 0:  # files the grading account made: as it
            subprocess.run(["sudo", "-n", "-u", self.run_as, "--", sys.executable, "-c",
                            "import shutil, sys; shutil.rmtree(sys.argv[1] + '/sockets', ignore_errors=True)",
                            str(self.root)], capture_output=True, timeout=60)
            shutil.rmtree(self.root, ignore_errors=True)


def _gpu_lock_dir() -> Path | None:
    """The GPU lock folder the jail sees read-only, so graded runs inside queue with every other run of the machine
    (helpers.gpu.gpulock); its lock file is made here first where the folder lets the grader. None: no lock."""
    from helpers.gpu import gpulock

    if os.environ.get("HELPERS_GPU_LOCK", "").lower() in ("off", "0", "no"):
        return None
    with contextlib.suppress(gpulock.GpuLockUnusable, OSError, ValueError):
        gpulock.ensure()
    folder = gpulock.lock_dir()
    return folder.resolve() if folder.is_dir() else None


def _gpu_devices() -> list[str]:
    """The NVIDIA device files the jail needs for GPU grading (none on a machine without a driver)."""
    return [str(p) for p in sorted(Path("/dev").glob("nvidia*")) if not p.is_dir()]
