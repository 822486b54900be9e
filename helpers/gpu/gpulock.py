"""One graded GPU run at a time per GPU, machine-wide: a lock file per GPU that every graded run holds.

When a class submits at once, graded kernels that share a GPU would otherwise time each other (wrong speeds) and
compete for its memory (out-of-memory failures). ``gpu.run_isolated`` takes this lock around each child run, so
graded runs on one GPU queue up, whoever started them: students' check cells and the autograder alike.

The lock is ``flock`` on ``<lock dir>/gpu-<key>.lock``: the kernel releases it when the holder exits, even when
it crashes, so a dead run never blocks the queue. The lock directory is ``$HELPERS_GPU_LOCK_DIR``, by default
``hopper-gpu-locks`` in the system's temporary directory (made world-writable and sticky, like /tmp, so every
user of the machine queues on the same files). ``HELPERS_GPU_LOCK=off`` disables the lock (a machine with one
user).

Waiters are woken in no fixed order when the GPU frees up (flock's rule); with graded runs of a few seconds each,
every waiter gets its turn within a few runs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import GpuError

__all__ = ["GpuBusy", "gpu_key", "lock_dir", "lock_path", "hold"]

#: how long a graded run waits for its GPU before giving up, by default (seconds)
DEFAULT_WAIT = 900.0


class GpuBusy(GpuError):
    """The GPU stayed busy with other graded runs for longer than the wait allowed (a sentence, no traceback)."""


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


def lock_dir() -> Path:
    """The directory of the lock files (created world-writable and sticky when missing)."""
    path = Path(os.environ.get("HELPERS_GPU_LOCK_DIR") or Path(tempfile.gettempdir()) / "hopper-gpu-locks")
    if not path.is_dir():
        with contextlib.suppress(FileExistsError):
            path.mkdir(parents=True)
            os.chmod(path, 0o1777)
    return path


def lock_path(ordinal: int | None = None) -> Path:
    """The lock file of one GPU."""
    return lock_dir() / f"gpu-{gpu_key(ordinal)}.lock"


def _open_shared(path: Path) -> int:
    """Open (create if needed) a lock file that every user of the machine can open too."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        os.fchmod(fd, 0o666)  # whatever the umask
        return fd
    except FileExistsError:
        return os.open(path, os.O_RDWR)


def _default_say(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


@contextlib.contextmanager
def hold(ordinal: int | None = None, *, wait: float | None = None,
         say: Callable[[str], None] = _default_say) -> Iterator[float]:
    """Hold the GPU's lock for the duration of the block; yields how many seconds were spent waiting.

    Prints one line when the GPU is busy (so a student knows why the check pauses). Raises :class:`GpuBusy`
    after ``wait`` seconds (default ``$HELPERS_GPU_LOCK_WAIT`` or 900).
    """
    if os.environ.get("HELPERS_GPU_LOCK", "").lower() in ("off", "0", "no"):
        yield 0.0
        return
    if wait is None:
        wait = float(os.environ.get("HELPERS_GPU_LOCK_WAIT", DEFAULT_WAIT))
    path = lock_path(ordinal)
    fd = _open_shared(path)
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
                raise GpuBusy(f"the GPU ({path.name}) stayed busy with other graded runs for {waited:.0f} s, longer "
                              f"than this run may wait ({wait:g} s); run the check again in a while") from None
            if not told:
                say("waiting for the GPU: another graded run is using it (one graded run per GPU at a time) …")
                told = True
            time.sleep(0.05)
        waited = time.monotonic() - t0
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)  # who holds it, for a person looking at a stuck queue
        yield waited
    finally:
        os.close(fd)  # closing the descriptor releases the lock
