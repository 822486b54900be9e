"""nbgrader's collect step, refusing submissions made in another student's name.

With nbgrader's file-system exchange, ``nbgrader submit --student=<someone else>`` files a submission under
another name; nbgrader's own collect only warns. :class:`OwnerCheckedCollect` collects, for each student, the
latest submission whose folder belongs to that student's account, and logs the others as refused. Configure it
with ``c.ExchangeFactory.collect = "helpers.course.autograde.exchange.OwnerCheckedCollect"``.

Whose account a folder belongs to: on one machine, the Unix account of the folder's owner. On Kubernetes there
are no shared accounts, so each user's pod runs as :func:`class_uid` of the user's name (deploy/z2jh-values.yaml),
and ``c.OwnerCheckedCollect.owners = "class_uid"`` checks the folder's uid against it.
"""

from __future__ import annotations

import datetime
import os
import pwd
import zlib

from nbgrader.exchange.default.collect import ExchangeCollect
from traitlets import Enum

__all__ = ["OwnerCheckedCollect", "class_uid"]


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
