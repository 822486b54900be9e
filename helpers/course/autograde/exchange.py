"""nbgrader's collect step, refusing submissions made in another student's name.

With nbgrader's file-system exchange, ``nbgrader submit --student=<someone else>`` files a submission under
another name; nbgrader's own collect only warns. :class:`OwnerCheckedCollect` collects, for each student, the
latest submission whose folder belongs to that student's account, and logs the others as refused. Configure it
with ``c.ExchangeFactory.collect = "helpers.course.autograde.exchange.OwnerCheckedCollect"``.

Whose account a folder belongs to: on one machine, the Unix account of the folder's owner. On Kubernetes there
are no shared accounts, so each user's pod runs as :func:`class_uid` of the user's name (deploy/z2jh-values.yaml),
and ``c.OwnerCheckedCollect.owners = "class_uid"`` checks the folder's uid against it.

It copies **regular files only**: a symbolic link (to the instructor's solution, the gradebook, a kernel's
connection file), a hard link to someone else's file, a device or a FIFO in a submission is refused, the file
named in the log, and nothing of that submission is collected; the student's earlier scores and autograded notebook
are cleared (:mod:`helpers.course.autograde.gradebook`): nbgrader has already removed the earlier submission.
Each file is opened without following links (``O_NOFOLLOW``, folder by folder), so swapping a file for a link while
collect runs does not help either.
"""

from __future__ import annotations

import datetime
import os
import pwd
import shutil
import stat
import tempfile
import zlib

from nbgrader.exchange.default.collect import ExchangeCollect
from traitlets import Enum

__all__ = ["OwnerCheckedCollect", "class_uid", "copy_regular_files", "UnsafeSubmission"]


class UnsafeSubmission(ValueError):
    """A submission holding something other than regular files and folders."""


def copy_regular_files(src: str, dest: str) -> None:
    """Copy the folder ``src`` to ``dest`` (made here), regular files and folders only; UnsafeSubmission names the
    first entry that is anything else (a link, a hard link, a device, a FIFO, a socket)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

    def walk(dir_fd: int, rel: str, out: str) -> None:
        os.mkdir(out, 0o700)
        for name in sorted(os.listdir(dir_fd)):
            path = os.path.join(rel, name)
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                fd = os.open(name, flags | os.O_DIRECTORY, dir_fd=dir_fd)
                try:
                    walk(fd, path, os.path.join(out, name))
                finally:
                    os.close(fd)
                continue
            what = ("a symbolic link" if stat.S_ISLNK(info.st_mode) else
                    "not a regular file" if not stat.S_ISREG(info.st_mode) else
                    "a hard link to another file" if info.st_nlink != 1 else None)
            if what is None:
                try:
                    fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=dir_fd)
                except OSError as exc:
                    raise UnsafeSubmission(f"{path} could not be opened as a regular file ({exc.strerror})") from None
                with os.fdopen(fd, "rb") as f:
                    opened = os.fstat(f.fileno())
                    if not stat.S_ISREG(opened.st_mode) or opened.st_nlink != 1:
                        raise UnsafeSubmission(f"{path} changed into something other than a regular file")
                    with open(os.path.join(out, name), "xb") as g:
                        shutil.copyfileobj(f, g)
                continue
            raise UnsafeSubmission(f"{path} is {what}; a submission holds regular files and folders only")

    top = os.open(src, flags | os.O_DIRECTORY)
    try:
        walk(top, "", dest)
    finally:
        os.close(top)


def class_uid(name: str) -> int:
    """The uid a user's pod runs as on Kubernetes: 100000 + crc32(name) mod 2·10⁹ (distinct for a class)."""
    return 100_000 + zlib.crc32(name.encode()) % 2_000_000_000

#: stands in for "no honest submission" so nbgrader's own choice of the latest one keeps working
_NONE = {"username": None, "filename": None, "timestamp": datetime.datetime.min}


class OwnerCheckedCollect(ExchangeCollect):
    """Collect only submissions owned by the account they name."""

    owners = Enum(["passwd", "class_uid"], "passwd", help=(
        "how a folder's owner is named: by the machine's accounts (passwd), or by the per-user uids of a "
        "Kubernetes class (class_uid)")).tag(config=True)

    def _owner(self, record: dict) -> str:
        try:
            uid = os.stat(os.path.join(self.inbound_path, record["filename"])).st_uid
        except OSError:
            return "an unknown account"
        if self.owners == "class_uid":
            return record["username"] if uid == class_uid(record["username"]) else f"uid {uid}"
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return f"uid {uid}"

    def _sort_by_timestamp(self, records: list[dict]) -> list[dict]:
        honest = []
        for record in records:
            owner = self._owner(record)
            if owner == record["username"]:
                honest.append(record)
            else:
                self.log.error("refused %s: it claims to be from %s but was submitted by %s",
                               record["filename"], record["username"], owner)
        return super()._sort_by_timestamp(honest) or [_NONE]

    def copy_files(self) -> None:
        self.src_records = [r for r in self.src_records if r is not _NONE]
        super().copy_files()

    def _forget_earlier(self, student: str) -> None:
        """A refused submission replaces the earlier one (nbgrader removed it already): its scores and autograded
        notebook go too, so the gradebook shows no score for work that was not graded."""
        from .gradebook import forget

        assignment = self.coursedir.assignment_id
        url = self.coursedir.db_url
        if url.startswith("sqlite:///"):
            cleared = forget(url[len("sqlite:///"):], assignment, student)
            if cleared:
                self.log.error("cleared %d earlier scores of %s's %s: the newer submission was refused", cleared,
                               student, assignment)
        graded = self.coursedir.format_path(self.coursedir.autograded_directory, student, assignment)
        if os.path.isdir(graded):
            shutil.rmtree(graded, ignore_errors=True)

    def do_copy(self, src: str, dest: str, log: object = None) -> None:
        """Copy regular files only (see the module's docstring); refuse the whole submission otherwise."""
        staging = tempfile.mkdtemp(prefix="hopper-collect-")
        try:
            try:
                copy_regular_files(src, os.path.join(staging, "s"))
            except UnsafeSubmission as exc:
                self.log.error("refused the submission %s: %s", src, exc)
                self._forget_earlier(os.path.basename(os.path.dirname(dest)))
                return
            super().do_copy(os.path.join(staging, "s"), dest, log)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
