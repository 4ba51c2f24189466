"""clockd: a cron replacement whose clockwork survives a machine dying.

Importing ``clockd`` pins the zone database: ``zoneinfo`` reads zones only
from the pinned ``tzdata`` package, never from the host's ``/usr/share/zoneinfo``
(Debian's files and PyPI's tzdata disagree by an hour for several zones today,
and two nodes must never disagree about when 09:00 is). This happens here,
before any module can build a ``ZoneInfo``.
"""

from __future__ import annotations

import zoneinfo

zoneinfo.reset_tzpath(to=[])

__version__ = "0.1.0"
