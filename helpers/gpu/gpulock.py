"""One graded GPU run at a time per GPU, machine-wide: a lock file per GPU that every graded run holds.

When a class submits at once, graded kernels that share a GPU would otherwise time each other (wrong speeds) and
compete for its memory (out-of-memory failures). ``gpu.run_isolated`` takes this lock around each child run, so
graded runs on one GPU queue up, whoever started them: students' check cells and the autograder alike.

The lock is ``flock`` on ``<lock dir>/gpu-<key>.lock``, opened **read-only** (``flock`` needs no write access) and
without following links (``O_NOFOLLOW``): a run never writes to, truncates or creates a file through a link, and it
queues on a file it does not own. The kernel releases the lock when the holder exits, even when it crashes, so a
dead run never blocks the queue.

The lock directory is ``$HELPERS_GPU_LOCK_DIR``. On a shared machine it belongs to the grading service (root):
the class hub (``hub/setup.sh``) makes it ``0755`` with one ``0644`` lock file per GPU, so no student can put a file
there (a private ``0600`` file, a link) that blocks or harms the others. Without the setting it is
``hopper-gpu-locks`` in the system's temporary directory, sticky and world-writable like /tmp, where the first run
makes each lock file (``0644``) — for a machine with one user. ``HELPERS_GPU_LOCK=off`` disables the lock.

Waiters are woken in no fixed order when the GPU frees up (flock's rule); with graded runs of a few seconds each,
every waiter gets its turn within a few runs. A run that gives up names the process holding the GPU.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import GpuError

__all__ = ["GpuBusy", "GpuLockUnusable", "gpu_key", "lock_dir", "lock_path", "holders", "hold", "ensure", "prepare"]

#: how long a graded run waits for its GPU before giving up, by default (seconds)
DEFAULT_WAIT = 900.0


class GpuBusy(GpuError):
    """The GPU stayed busy with other graded runs for longer than the wait allowed (a sentence, no traceback)."""


class GpuLockUnusable(GpuError):
    """The GPU's lock file is missing where only the grading service may make it, or is not a plain readable file."""


def gpu_key(ordinal: int | None = None) -> str:
    """Which physical GPU ``ordinal`` (default ``$HELPERS_DEVICE`` or 0) is, as a file-name-safe key.

    With ``CUDA_VISIBLE_DEVICES`` set, ordinal ``i`` is its ``i``-th entry (an index or a ``GPU-<uuid>``), so two
    processes that see the same GPU under different ordinals still share one lock.
    """
    if ordinal is None:
        ordinal = int(os.environ.get("HELPERS_DEVICE", "0"))
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    key = visible[ordinal] if ordinal < len(visible) else str(ordinal)
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)


def _default_dir() -> Path:
    return Path(tempfile.gettempdir()) / "hopper-gpu-locks"


def lock_dir() -> Path:
    """The directory of the lock files: ``$HELPERS_GPU_LOCK_DIR``, or the default one in the temporary directory
    (created sticky and world-writable when missing)."""
    configured = os.environ.get("HELPERS_GPU_LOCK_DIR")
    path = Path(configured) if configured else _default_dir()
    if not configured and not path.is_dir():
        with contextlib.suppress(FileExistsError):
            path.mkdir(parents=True)
            os.chmod(path, 0o1777)
    return path


def lock_path(ordinal: int | None = None) -> Path:
    """The lock file of one GPU."""
    return lock_dir() / f"gpu-{gpu_key(ordinal)}.lock"


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _open_read_only(path: Path) -> int:
    """A read-only descriptor of the lock file, never through a link; made (``0644``) where the folder lets us."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    for _ in range(3):
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            try:
                made = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            except FileExistsError:
                continue  # another run made it just now
            except OSError as exc:
                raise GpuLockUnusable(
                    f"there is no lock file for this GPU ({path}) and this account may not make one "
                    f"({exc.strerror}): the folder belongs to the grading service, which makes one per GPU "
                    "(hub/setup.sh); ask the course's staff to run it again") from None
            os.fchmod(made, 0o644)  # whatever the umask
            os.close(made)
            continue
        except OSError as exc:
            what = "a symbolic link" if exc.errno == errno.ELOOP else f"not readable ({exc.strerror})"
            owner = ""
            with contextlib.suppress(OSError):
                owner = f", owned by {_owner(os.lstat(path).st_uid)}"
            raise GpuLockUnusable(
                f"the GPU's lock file {path} is {what}{owner}: graded runs do not use it. Lock files belong in a "
                "folder only the grading service writes (HELPERS_GPU_LOCK_DIR; hub/setup.sh makes one)") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise GpuLockUnusable(f"the GPU's lock file {path} is not a regular file: graded runs do not use it")
        return fd
    raise GpuLockUnusable(f"the GPU's lock file {path} kept changing while it was being opened")


def ensure(ordinal: int | None = None) -> Path:
    """The GPU's lock file, made now where this account may make it (the grader does, before a jail that sees the
    folder read-only); raises :class:`GpuLockUnusable` as :func:`hold` would."""
    path = lock_path(ordinal)
    os.close(_open_read_only(path))
    return path


def prepare(folder: Path | str, keys: list[str]) -> list[Path]:
    """Make ``folder`` the grading service's lock folder (``hub/setup.sh`` runs this as root): owned by this
    account, ``0755``, one empty ``0644`` lock file per GPU key and nothing else (whatever was there before, links
    and other accounts' files included, is removed first)."""
    import shutil

    folder = Path(folder)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink()
    elif folder.is_dir():
        shutil.rmtree(folder)  # does not follow links inside
    folder.mkdir(parents=True)
    os.chmod(folder, 0o755)
    made = []
    for key in dict.fromkeys(re.sub(r"[^A-Za-z0-9_.-]", "_", k) for k in keys):
        path = folder / f"gpu-{key}.lock"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        os.fchmod(fd, 0o644)
        os.close(fd)
        made.append(path)
    return made


def holders(fd: int) -> list[str]:
    """The processes holding the lock open on ``fd``, as "process <pid> (<account>)", from /proc/locks."""
    info = os.fstat(fd)
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/locks").read_text().splitlines():
            parts = line.split()
            if len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == inode and parts[4].isdigit():
                pid = int(parts[4])
                try:
                    who = _owner(os.stat(f"/proc/{pid}").st_uid)
                except OSError:
                    who = "an account out of sight"
                found.append(f"process {pid} ({who})")
    return found


def _default_say(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


@contextlib.contextmanager
def hold(ordinal: int | None = None, *, wait: float | None = None,
         say: Callable[[str], None] = _default_say) -> Iterator[float]:
    """Hold the GPU's lock for the duration of the block; yields how many seconds were spent waiting.

    Prints one line when the GPU is busy (so a student knows why the check pauses). Raises :class:`GpuBusy`
    after ``wait`` seconds (default ``$HELPERS_GPU_LOCK_WAIT`` or 900), naming who holds the GPU, and
    :class:`GpuLockUnusable` when the lock file cannot be used safely.
    """
    if os.environ.get("HELPERS_GPU_LOCK", "").lower() in ("off", "0", "no"):
        yield 0.0
        return
    if wait is None:
        wait = float(os.environ.get("HELPERS_GPU_LOCK_WAIT", DEFAULT_WAIT))
    path = lock_path(ordinal)
    fd = _open_read_only(path)
    t0 = time.monotonic()
    try:
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            waited = time.monotonic() - t0
            if waited >= wait:
                who = holders(fd)
                held = f" (held by {', '.join(who)})" if who else ""
                raise GpuBusy(f"the GPU ({path.name}) stayed busy with other graded runs{held} for {waited:.0f} s, "
                              f"longer than this run may wait ({wait:g} s); run the check again in a while") from None
            if not told:
                say("waiting for the GPU: another graded run is using it (one graded run per GPU at a time) …")
                told = True
            time.sleep(0.05)
        yield time.monotonic() - t0
    finally:
        os.close(fd)  # closing the descriptor releases the lock
