"""The environment a job starts from (before its schedule's own ``env``).

A job never inherits the daemon's environment wholesale: that environment holds the
store's DSN (``CLOCKD_STORE=postgresql://…:password@…``), libpq's ``PG*`` variables
and whatever cloud credentials the host gave the daemon, and a job's output is stored
where read-only operators can see it. A job runs from:

* ``PATH`` (the daemon's, else ``/usr/local/bin:/usr/bin:/bin``), ``HOME``, ``LANG``
  and ``TZ`` when the daemon has them (a job with ``user`` gets that user's ``HOME``
  and a fixed ``PATH`` instead, see ``clockd.runner.process``);
* the variables the daemon config lists in ``job_env_passthrough`` (exact names, or a
  prefix ending in ``*``), restoring cron's inherit-everything with ``["*"]``;
* never any ``CLOCKD_STORE``, ``CLOCKD_ETCD`` or ``PG*`` value, whatever the list says
  (the schedule's own ``env`` may still set such names: that is the schedule's choice);

then the ``env_from_file`` pairs, the schedule's ``env`` and the ``CLOCKD_*`` job
variables on top.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
KEPT: Final = ("PATH", "HOME", "LANG", "TZ")
_NEVER: Final = re.compile(r"CLOCKD_STORE|CLOCKD_ETCD|PG[A-Z0-9_]*")


def never_passed(name: str) -> bool:
    """Daemon variables no job receives from the daemon's environment."""
    return _NEVER.fullmatch(name) is not None


def _listed(name: str, passthrough: Iterable[str]) -> bool:
    for pattern in passthrough:
        if pattern.endswith("*") and name.startswith(pattern[:-1]):
            return True
        if name == pattern:
            return True
    return False


def base_environment(environ: Mapping[str, str], passthrough: Iterable[str] = ()) -> dict[str, str]:
    """The daemon-side part of a job's environment (see the module docstring)."""
    patterns = tuple(passthrough)
    env = {key: environ[key] for key in KEPT if key in environ}
    env.setdefault("PATH", DEFAULT_PATH)
    if patterns:
        env.update(
            (key, value)
            for key, value in environ.items()
            if key not in env and _listed(key, patterns) and not never_passed(key)
        )
    return env
