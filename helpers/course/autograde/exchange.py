"""nbgrader's collect step, per submission and on the server's clock.

Each submission in the exchange's ``inbound`` folder is judged on its own: its folder name (``<student>+<assignment>
+<time>[+<random>]``), its owner, what it is (a folder, not a link or a file), its size (files, bytes, depth) and
its time. One that fails is refused with its reason, in the log and in the instructor's report
(``collect-<assignment>.txt`` in the course folder, one line per submission), and collection goes on for everyone
else: no submission can stop it for the class. A submission is copied to a staging folder first; only a complete
copy replaces the student's earlier one (one refused while it is copied removes the earlier one and its scores).

The submission's time is the server's: the latest status-change time (``ctime``) of its folder and everything in
it, which the kernel sets from the server's clock and no account can set back (``touch -d`` changes the
modification time, and moves ``ctime`` to now). The time a student writes in the folder's name or in
``timestamp.txt`` is ignored: the collected copy's ``timestamp.txt`` (what nbgrader reads for lateness) is rewritten
with the server's time.

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
import glob
import os
import pwd
import re
import shutil
import stat
import tempfile
import zlib
from dataclasses import dataclass, field

from nbgrader.exchange.default.collect import ExchangeCollect
from traitlets import Enum, Integer

__all__ = ["OwnerCheckedCollect", "class_uid", "copy_regular_files", "UnsafeSubmission", "Submission",
           "server_time"]


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

#: a student id as nbgrader's exchange names folders with it (no "+", no "/", no leading dot)
_STUDENT = re.compile(r"^[A-Za-z0-9_@-][A-Za-z0-9_.@-]{0,63}$")


@dataclass
class Submission:
    """One folder of ``inbound``: whose it claims to be, when it arrived (server time), and why it is refused."""

    filename: str
    username: str = ""
    arrived: datetime.datetime | None = None
    refused: str = ""
    files: int = 0
    size: int = 0
    notes: list[str] = field(default_factory=list)


def server_time(path: str, *, max_files: int, max_bytes: int, max_depth: int) -> tuple[datetime.datetime, int, int]:
    """(the latest ctime under ``path``, entries, bytes), walking without following links, by folder descriptors (no
    recursion, no path longer than a name, at most ``max_depth`` + 1 folders open); ValueError in words when the
    tree is more than a submission may be (files and folders, bytes, depth) or cannot be read."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    latest, entries, size = os.lstat(path).st_ctime, 0, 0
    top = os.open(path, flags)
    stack = [(top, os.scandir(top), "")]
    try:
        while stack:
            fd, listing, rel = stack[-1]
            try:
                entry = next(listing, None)
            except OSError as exc:
                raise ValueError(f"{rel or 'its folder'} could not be read ({exc.strerror})") from None
            if entry is None:
                stack.pop()
                listing.close()
                os.close(fd)
                continue
            info = entry.stat(follow_symlinks=False)
            latest = max(latest, info.st_ctime)
            entries += 1
            size += info.st_size if not stat.S_ISDIR(info.st_mode) else 0
            if entries > max_files:
                raise ValueError(f"it holds more than {max_files} files and folders")
            if size > max_bytes:
                raise ValueError(f"it holds more than {max_bytes >> 20} MB")
            if stat.S_ISDIR(info.st_mode):
                if len(stack) > max_depth:
                    raise ValueError(f"its folders are nested deeper than {max_depth}")
                try:
                    child = os.open(entry.name, flags, dir_fd=fd)
                except OSError as exc:
                    raise ValueError(f"{os.path.join(rel, entry.name)} could not be read ({exc.strerror})") from None
                stack.append((child, os.scandir(child), os.path.join(rel, entry.name)))
    finally:
        for fd, listing, _ in stack:
            listing.close()
            os.close(fd)
    return datetime.datetime.fromtimestamp(latest, datetime.UTC), entries, size


class OwnerCheckedCollect(ExchangeCollect):
    """Collect each student's latest submission of their own, judged on its own and timed by the server."""

    owners = Enum(["passwd", "class_uid"], "passwd", help=(
        "how a folder's owner is named: by the machine's accounts (passwd), or by the per-user uids of a "
        "Kubernetes class (class_uid)")).tag(config=True)
    max_files = Integer(1000, help="the most files one submission may hold").tag(config=True)
    max_mb = Integer(100, help="the most megabytes one submission may hold").tag(config=True)
    max_depth = Integer(16, help="the deepest folder nesting one submission may have").tag(config=True)

    def _owner(self, path: str, username: str) -> str:
        uid = os.lstat(path).st_uid
        if self.owners == "class_uid":
            return username if uid == class_uid(username) else f"uid {uid}"
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return f"uid {uid}"

    def judge(self, path: str) -> Submission:
        """One folder of inbound, judged on its own (module doc)."""
        sub = Submission(os.path.basename(path))
        parts = sub.filename.split("+")
        try:
            info = os.lstat(path)
            if len(parts) not in (3, 4) or parts[1] != self.coursedir.assignment_id or not _STUDENT.match(parts[0]):
                raise ValueError("its name is not <student>+<assignment>+<time>[+<random>], as nbgrader submit "
                                 "makes it")
            sub.username = parts[0]
            if not stat.S_ISDIR(info.st_mode):
                raise ValueError("it is a symbolic link" if stat.S_ISLNK(info.st_mode) else "it is not a folder")
            owner = self._owner(path, sub.username)
            if owner != sub.username:
                raise ValueError(f"it claims to be from {sub.username} but was submitted by {owner}")
            sub.arrived, sub.files, sub.size = server_time(path, max_files=self.max_files,
                                                           max_bytes=self.max_mb << 20, max_depth=self.max_depth)
        except (OSError, ValueError) as exc:
            sub.refused = str(exc) if isinstance(exc, ValueError) else f"it could not be read ({exc.strerror})"
        return sub

    def init_src(self) -> None:
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        student = self.coursedir.student_id or "*"
        pattern = os.path.join(glob.escape(self.inbound_path), f"{student}+{self.coursedir.assignment_id}+*")
        self.submissions = [self.judge(path) for path in sorted(glob.glob(pattern))]
        latest: dict[str, Submission] = {}
        for sub in self.submissions:
            if not sub.refused and (sub.username not in latest or sub.arrived > latest[sub.username].arrived):
                latest[sub.username] = sub
        self.src_records = [{"username": s.username, "filename": s.filename, "timestamp": s.arrived}
                            for s in latest.values()]
        self.report: list[str] = []
        for sub in self.submissions:
            if sub.refused:
                self._refuse(sub.filename, sub.refused)
            elif latest.get(sub.username) is not sub:
                self.report.append(f"{sub.filename}: not collected, {sub.username} submitted again later")

    def _refuse(self, what: str, why: str) -> None:
        self.log.error("refused the submission %s: %s", what, why)
        self.report.append(f"{what}: REFUSED, {why}")

    def copy_files(self) -> None:
        """Each student's submission on its own: a failure is that submission's, named in the report."""
        for rec in self.src_records:
            student = rec["username"]
            try:
                self._collect_one(rec)
            except Exception as exc:  # noqa: BLE001 - one submission's failure never stops the class
                self._refuse(rec["filename"], f"collecting it failed ({type(exc).__name__}: {exc})")
                self._forget_earlier(student)
        self._write_report()

    def _collect_one(self, rec: dict) -> None:
        student, arrived = rec["username"], rec["timestamp"]
        src = os.path.join(self.inbound_path, rec["filename"])
        dest = self.coursedir.format_path(self.coursedir.submitted_directory, student, self.coursedir.assignment_id)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if os.path.isdir(dest):
            existing = self.coursedir.get_existing_timestamp(dest)
            if existing is not None and existing.tzinfo is None:  # nbgrader reads times as naive UTC
                existing = existing.replace(tzinfo=datetime.UTC)
            if not self.update or (existing is not None and arrived <= existing):
                self.report.append(f"{rec['filename']}: already collected ({student}, {arrived:%Y-%m-%d %H:%M:%S} UTC)")
                return
        staging = tempfile.mkdtemp(prefix=".hopper-collect-", dir=self.coursedir.root)  # beside, to rename
        try:
            try:
                copy_regular_files(src, os.path.join(staging, "s"))
            except (UnsafeSubmission, OSError) as exc:
                why = str(exc) if isinstance(exc, UnsafeSubmission) else f"it could not be read ({exc.strerror})"
                self._refuse(rec["filename"], why)
                self._forget_earlier(student)
                return
            ExchangeCollect.do_copy(self, os.path.join(staging, "s"), os.path.join(staging, "copy"))
            with open(os.path.join(staging, "copy", "timestamp.txt"), "w") as fh:  # the server's time, not theirs
                fh.write(arrived.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))
            if os.path.isdir(dest):
                shutil.rmtree(dest)
            os.rename(os.path.join(staging, "copy"), dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.log.info("collected %s's %s, arrived %s", student, self.coursedir.assignment_id, arrived)
        self.report.append(f"{rec['filename']}: collected ({student}, arrived {arrived:%Y-%m-%d %H:%M:%S} UTC)")

    def _write_report(self) -> None:
        path = os.path.join(self.coursedir.root, f"collect-{self.coursedir.assignment_id}.txt")
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        try:
            with open(path, "a") as fh:
                fh.write(f"== collect at {stamp}\n" + "".join(f"{line}\n" for line in self.report))
        except OSError as exc:
            self.log.error("could not write the collect report %s (%s)", path, exc.strerror)

    def _forget_earlier(self, student: str) -> None:
        """A submission refused while it is copied replaces the earlier one: the earlier copy, its scores and its
        autograded notebook go, so the gradebook shows no score for work that was not graded."""
        from .gradebook import forget

        assignment = self.coursedir.assignment_id
        url = self.coursedir.db_url
        if url.startswith("sqlite:///"):
            cleared = forget(url[len("sqlite:///"):], assignment, student)
            if cleared:
                self.log.error("cleared %d earlier scores of %s's %s: the newer submission was refused", cleared,
                               student, assignment)
        for folder in (self.coursedir.autograded_directory, self.coursedir.submitted_directory):
            earlier = self.coursedir.format_path(folder, student, assignment)
            if os.path.isdir(earlier):
                shutil.rmtree(earlier, ignore_errors=True)
