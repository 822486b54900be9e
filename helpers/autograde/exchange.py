"""nbgrader's collect step, refusing submissions made in another student's name.

With nbgrader's file-system exchange, ``nbgrader submit --student=<someone else>`` files a submission under
another name; nbgrader's own collect only warns. :class:`OwnerCheckedCollect` collects, for each student, the
latest submission whose folder belongs to that student's account, and logs the others as refused. Configure it
with ``c.ExchangeFactory.collect = "helpers.autograde.exchange.OwnerCheckedCollect"``.
"""

from __future__ import annotations

import datetime
import os
import pwd

from nbgrader.exchange.default.collect import ExchangeCollect

__all__ = ["OwnerCheckedCollect"]

#: stands in for "no honest submission" so nbgrader's own choice of the latest one keeps working
_NONE = {"username": None, "filename": None, "timestamp": datetime.datetime.min}


class OwnerCheckedCollect(ExchangeCollect):
    """Collect only submissions owned by the account they name."""

    def _owner(self, record: dict) -> str:
        try:
            return pwd.getpwuid(os.stat(os.path.join(self.inbound_path, record["filename"])).st_uid).pw_name
        except (KeyError, OSError):
            return "an unknown account"

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
