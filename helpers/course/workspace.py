"""The student's workspace: ``my-work/``, a copy of the lessons and labs that is theirs to edit, save and run.

The course's own notebooks (``lessons/``, ``labs/``, ``solutions/``) stay as committed: ``make test``, ``make
labs``, ``make validate`` and ``make strip`` look only at those, so a student's saved work (outputs included)
never makes them fail or nag, and ``git pull`` never conflicts with it (``my-work/`` is git-ignored).

``python -m helpers.course.workspace`` (what ``make lab`` runs first):

- copies every lesson and lab that is not in ``my-work/`` yet;
- refreshes a copy the student never changed when the course's version changed (``git pull``);
- keeps a copy the student changed, and says once that a newer course version exists;
- says where JupyterLab opens (the first lesson's address).

"Changed" means the cells' sources (and kinds) differ: running a notebook adds outputs, and JupyterLab writes the
kernel's version into its metadata, which make a notebook the student only ran no less the course's.
- writes JupyterLab's settings for the course (no news pop-up on first start) and its server's (no WebSocket ping
  that a busy laptop's late answer turns into a lost kernel: :mod:`helpers.course.labserver`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = "my-work"
COURSE_DIRS = ("lessons", "labs")
MANIFEST = ".course.json"

#: JupyterLab settings for the course (``overrides.json`` of the environment's JupyterLab): never ask about, or
#: fetch, Jupyter news or updates
LAB_OVERRIDES = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}

__all__ = ["WORK", "prepare", "jupyterlab_settings", "server_settings", "main"]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cells_digest(data: bytes) -> str | None:
    """A digest of a notebook's cells' kinds and sources (not outputs, counts or metadata); None when unreadable."""
    try:
        cells = json.loads(data)["cells"]
        text = [(c["cell_type"], c["source"] if isinstance(c["source"], str) else "".join(c["source"])) for c in cells]
    except (ValueError, KeyError, TypeError):
        return None
    return _digest(json.dumps(text, ensure_ascii=False).encode())


def course_notebooks(root: Path = ROOT) -> list[Path]:
    """The lessons and labs a student works through, relative to the course root."""
    found = []
    for d in COURSE_DIRS:
        found += [p.relative_to(root) for p in sorted((root / d).glob("*.ipynb")) if not p.name.endswith(".new.ipynb")]
    return found


def prepare(root: Path = ROOT, work: Path | None = None) -> list[str]:
    """Bring ``my-work/`` up to date with the course without touching the student's changes; returns what it did,
    one line each."""
    work = work or root / WORK
    manifest_path = work / MANIFEST
    manifest: dict[str, dict[str, str]] = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    said = []
    for rel in course_notebooks(root):
        course = (root / rel).read_bytes()
        now = cells_digest(course)
        mine = work / rel
        entry = manifest.get(str(rel), {})
        if not mine.exists():
            mine.parent.mkdir(parents=True, exist_ok=True)
            mine.write_bytes(course)
            manifest[str(rel)] = {"cells": now}
            said.append(f"copied {rel} to {WORK}/{rel}")
            continue
        copied = entry.get("cells")
        if copied is None and entry.get("copied") == _digest(mine.read_bytes()):
            copied = cells_digest(mine.read_bytes())  # a manifest of the file's bytes, and the copy is untouched
        if now == copied:
            continue  # the course's cells did not change since the copy
        if copied is not None and cells_digest(mine.read_bytes()) == copied:
            mine.write_bytes(course)  # the student never changed a cell: take the course's new version
            manifest[str(rel)] = {"cells": now}
            said.append(f"updated {WORK}/{rel} (you had not changed it)")
        elif entry.get("told") != now:
            manifest[str(rel)] = {**entry, "told": now}
            said.append(f"kept your {WORK}/{rel}; the course's version changed since you copied it: see {rel} "
                        f"(to start over from it, delete your copy and run `make lab` again)")
    work.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return said


def jupyterlab_settings(prefix: Path | None = None) -> Path:
    """Merge :data:`LAB_OVERRIDES` into the environment's JupyterLab ``overrides.json``; returns its path."""
    path = Path(prefix or sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    settings = json.loads(path.read_text()) if path.exists() else {}
    for plugin, values in LAB_OVERRIDES.items():
        settings[plugin] = {**settings.get(plugin, {}), **values}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2) + "\n")
    return path


def server_settings(prefix: Path | None = None) -> Path:
    """Write the course's JupyterLab server settings into the environment's ``etc/jupyter`` (every server started
    there reads them); returns the file's path."""
    from helpers.course import labserver

    path = Path(prefix or sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "course.json"
    return labserver.write_server_config(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.course.workspace", description=__doc__.split("\n")[0])
    parser.add_argument("--settings-only", action="store_true", help="only write JupyterLab's settings")
    args = parser.parse_args(argv)
    jupyterlab_settings()
    server_settings()
    if not args.settings_only:
        for line in prepare():
            print(line)
        print(f"your notebooks are in {WORK}/ (lessons/ and labs/): edit, run and save them there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
