"""The one exception tree of clockd. Each class's docstring is its default message.

::

    ClockdError                      exit 1
    ├── InvalidInput                 exit 2   bad expression, zone, duration, instant, file
    │   ├── InvalidCron
    │   ├── UnknownZone
    │   ├── NeverFires
    │   └── InvalidSchedule
    ├── NotFound                     exit 1   unknown schedule / occurrence
    ├── Conflict                     exit 1   duplicate name, idempotency-key mismatch
    │   ├── QuotaExceeded                         a tenant limit (clockctl tenant set) refuses it
    │   ├── IdempotencyMismatch                   the key was used for another definition (HTTP 422)
    │   └── VersionMismatch                       not the version the caller expected (HTTP 412)
    ├── StoreError                   exit 4   database unreachable, locked, unreadable
    │   ├── StoreUnavailable
    │   ├── StoreLocked
    │   ├── SchemaMismatch
    │   ├── StorePermissionDenied             the database role lacks the right
    │   └── FencedOut                         a stale token's write, nothing committed
    └── CoordError                   exit 5   etcd unreachable, lease lost

Adapters translate driver exceptions (sqlite3, psycopg, grpc) into these; each
edge (``clockctl``, ``clockd``) maps them to exit codes in one place, using
``exit_code``.
"""

from __future__ import annotations


class ClockdError(Exception):
    """clockd failed."""

    exit_code = 1

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message if message is not None else (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidInput(ClockdError):
    """The input is not valid."""

    exit_code = 2


class InvalidCron(InvalidInput):
    """The cron expression is not valid."""


class UnknownZone(InvalidInput):
    """Unknown time zone."""


class NeverFires(InvalidInput):
    """The schedule can never fire."""

    def __init__(self, message: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field  # the definition's field it is about (schedule, at or every), if known


class InvalidSchedule(InvalidInput):
    """The schedule definition is not valid."""


class NotFound(ClockdError):
    """Not found."""

    exit_code = 1


class Conflict(ClockdError):
    """That conflicts with what is stored."""

    exit_code = 1


class QuotaExceeded(Conflict):
    """The tenant is at one of its limits."""


class IdempotencyMismatch(Conflict):
    """That idempotency key was already used with another definition."""


class VersionMismatch(Conflict):
    """The schedule is not at the version the caller expected."""


class StoreError(ClockdError):
    """The store failed."""

    exit_code = 4


class StoreUnavailable(StoreError):
    """The store cannot be reached or opened."""


class StoreLocked(StoreError):
    """Another clockd already runs on this store."""


class SchemaMismatch(StoreError):
    """The store's schema is not the one this clockd knows."""


class StorePermissionDenied(StoreError):
    """The store refused: this database role may not do that."""


class FencedOut(StoreError):
    """A newer holder owns this resource; the write was rejected and nothing was committed."""


class CoordError(ClockdError):
    """The coordinator (etcd) failed."""

    exit_code = 5
