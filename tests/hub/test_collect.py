"""Collect against a class where one student does each thing a submission can do wrong: every other student is
still collected, each bad one is refused with its reason in the instructor's report, and the time that counts is
the server's.

Runs nbgrader's collect step (the course's ``OwnerCheckedCollect``) on an exchange in a temporary folder, as root
(the owners are the per-user uids of a Kubernetes class, so no account is made).
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import nbformat
import pytest
from traitlets.config import Config

from helpers.course.autograde.exchange import OwnerCheckedCollect, class_uid, server_time

COURSE, LAB = "hopper-gemm", "lab1_tma"
BACK = "2020-01-01 00:00:00.000000 UTC"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (it gives each submission its student's uid)")


@pytest.fixture(autouse=True)
def _alembic_on_path(monkeypatch):
    """nbgrader's gradebook runs `alembic` by name: this environment's scripts first on PATH."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def submit(inbound: Path, name: str, owner: str, *, when: str = "", extra=None) -> Path:
    """A submission folder as ``nbgrader submit`` makes it, owned by ``owner``'s uid."""
    folder = inbound / name
    folder.mkdir()
    nbformat.write(nbformat.v4.new_notebook(), folder / f"{LAB}.ipynb")
    (folder / "timestamp.txt").write_text(when or datetime.datetime.now(datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S.%f UTC"))
    if extra:
        extra(folder)
    for path in [folder, *folder.rglob("*")]:
        os.lchown(path, class_uid(owner), class_uid(owner))
    return folder


def collect(course: Path, exchange: Path, **traits) -> OwnerCheckedCollect:
    from nbgrader.api import Gradebook
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory

    c = Config()
    c.CourseDirectory.root = str(course)
    c.CourseDirectory.course_id = COURSE
    c.CourseDirectory.assignment_id = LAB
    c.Exchange.root = str(exchange)
    c.ExchangeCollect.update = True
    c.OwnerCheckedCollect.owners = "class_uid"
    for key, value in traits.items():
        setattr(c.OwnerCheckedCollect, key, value)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE) as gb:
        gb.update_or_create_assignment(LAB)
    coursedir = CourseDirectory(config=c)
    step = OwnerCheckedCollect(coursedir=coursedir, authenticator=Authenticator(config=c), config=c)
    step.start()
    return step


def deep(folder: Path, levels: int = 40) -> None:
    here = folder
    for _ in range(levels):
        here = here / "d"
    here.mkdir(parents=True)
    (here / "x").write_text("x")


def test_one_bad_submission_of_each_kind_is_refused_with_its_reason_and_everyone_else_is_collected(tmp_path):
    exchange, course = tmp_path / "exchange", tmp_path / "course"
    inbound = exchange / COURSE / "inbound"
    inbound.mkdir(parents=True)
    course.mkdir()
    now = datetime.datetime.now(datetime.UTC)
    submit(inbound, f"ana+{LAB}+{BACK}", "ana")
    submit(inbound, f"ben+{LAB}+2026+x+y", "ben")                                 # a malformed name
    submit(inbound, f"ben two+{LAB}+{BACK}", "ben")                               # not a student id
    carl = submit(inbound, f"carl+{LAB}+{BACK}", "carl", when=BACK)               # back-dated, name and file
    os.utime(carl, (0, 0))
    os.utime(carl / f"{LAB}.ipynb", (0, 0))
    submit(inbound, f"dora+{LAB}+{BACK}", "dora",
           extra=lambda f: (f / "big.bin").write_bytes(b"\0" * (2 << 20)))         # over the size cap
    (inbound / f"eve+{LAB}+{BACK}").symlink_to(course)                             # a link for a folder
    os.lchown(inbound / f"eve+{LAB}+{BACK}", class_uid("eve"), class_uid("eve"))
    submit(inbound, f"fay+{LAB}+{BACK}", "fay", extra=deep)                          # a tree too deep
    submit(inbound, f"gus+{LAB}+{BACK}", "gus",
           extra=lambda f: (f / "answers").symlink_to("/etc/passwd"))             # a link inside
    submit(inbound, f"ana+{LAB}+2030-01-01 00:00:00.000000 UTC", "hal")            # in another's name
    os.mkfifo(inbound / f"ivy+{LAB}+{BACK}")                                       # not a folder
    os.chown(inbound / f"ivy+{LAB}+{BACK}", class_uid("ivy"), class_uid("ivy"))
    submit(inbound, f"zed+{LAB}+{BACK}", "zed")

    collect(course, exchange, max_mb=1, max_depth=16)

    collected = {p.parent.name for p in (course / "submitted").glob(f"*/{LAB}")}
    assert collected == {"ana", "carl", "zed"}, collected
    report = (course / f"collect-{LAB}.txt").read_text()
    reasons = {
        "ben+lab1_tma+2026+x+y": "its name is not",
        f"ben two+{LAB}": "its name is not",
        f"dora+{LAB}": "more than 1 MB",
        f"eve+{LAB}": "it is a symbolic link",
        f"fay+{LAB}": "nested deeper than 16",
        f"gus+{LAB}": "answers is a symbolic link",
        f"ana+{LAB}+2030": f"claims to be from ana but was submitted by uid {class_uid('hal')}",
        f"ivy+{LAB}": "it is not a folder",
    }
    lines = report.splitlines()
    for name, why in reasons.items():
        line = next((x for x in lines if x.startswith(name)), "")
        assert "REFUSED" in line and why in line, f"{name}: {line!r}\n{report}"
    # the time that counts is the server's: carl's back-dated name, file and modification times count for nothing
    stamp = (course / "submitted" / "carl" / LAB / "timestamp.txt").read_text()
    arrived = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=datetime.UTC)
    assert abs((arrived - now).total_seconds()) < 120, stamp
    assert "arrived" in next(x for x in lines if x.startswith(f"carl+{LAB}"))


def test_a_newer_submission_replaces_the_collected_one_only_when_it_is_collected_whole(tmp_path):
    exchange, course = tmp_path / "exchange", tmp_path / "course"
    inbound = exchange / COURSE / "inbound"
    inbound.mkdir(parents=True)
    course.mkdir()
    submit(inbound, f"ana+{LAB}+{BACK}", "ana", extra=lambda f: (f / "notes.txt").write_text("first"))
    collect(course, exchange)
    kept = course / "submitted" / "ana" / LAB / "notes.txt"
    assert kept.read_text() == "first"
    submit(inbound, f"ana+{LAB}+2021-01-01 00:00:00.000000 UTC", "ana",
           extra=lambda f: (f / "notes.txt").write_text("second"))
    collect(course, exchange)
    assert kept.read_text() == "second", "the later arrival (server time) is the one collected"
    assert not list(course.glob(".hopper-collect-*")), "no staging folder left behind"


def _deeper_than_a_path_can_name(top: Path, levels: int) -> None:
    """A chain of ``levels`` folders made by descriptors: its full path is longer than Linux takes (4096 bytes)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("dd", dir_fd=fd)
        child = os.open("dd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("x", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)


def _remove_chain(top: Path) -> None:
    """Remove a tree of any depth by descriptors, one level at a time (shutil.rmtree recurses)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    stack, names = [os.open(top, flags)], []
    while stack:
        fd, sub = stack[-1], None
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                sub = entry.name
                break
            os.unlink(entry.name, dir_fd=fd)
        if sub is not None:
            stack.append(os.open(sub, flags, dir_fd=fd))
            names.append(sub)
        else:
            os.close(stack.pop())
            if names:
                os.rmdir(names.pop(), dir_fd=stack[-1])


def test_the_server_time_walks_a_deep_tree_without_recursion_and_stops_at_its_caps(tmp_path):
    top = tmp_path / "chain"
    top.mkdir()
    try:
        _deeper_than_a_path_can_name(top, 3000)  # deeper than Python's recursion, longer than a path
        with pytest.raises(ValueError, match="nested deeper than 16"):
            server_time(str(top), max_files=5000, max_bytes=1 << 20, max_depth=16)
        when, entries, size = server_time(str(top), max_files=5000, max_bytes=1 << 20, max_depth=5000)
        assert entries == 3001 and size == 0 and when.tzinfo is datetime.UTC
        with pytest.raises(ValueError, match="more than 100 files"):
            server_time(str(top), max_files=100, max_bytes=1 << 20, max_depth=5000)
    finally:
        _remove_chain(top)
