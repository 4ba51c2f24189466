"""The one validator every front end runs before a definition is written.

``clockctl add``/``update`` (through ``clockd.services.ops``), schedule files and
crontab imports (``schedfile``, ``crontab``) and ``apply`` all call
:func:`normalize`, so each refuses the same things with the same message, naming
the field first (``timeout: must be positive``) so a file refusal can put its
``file:line`` in front. It lives below the use cases so a parser never imports them.

Invariants: :func:`normalize` is idempotent and returns its argument unchanged (the
same object) when it is already canonical; it reads nothing but the definition and
the host's user and group names (``clockd.runner.targets``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Final

from clockd.core.durations import format_duration
from clockd.core.limits import check_name, check_retries, check_schedule_name
from clockd.core.model import ScheduleDef, Target
from clockd.core.planning import MAX_WINDOW, MIN_LATENESS
from clockd.core.spec import validate_definition
from clockd.errors import InvalidInput

MAX_CATCH_UP_LIMIT: Final = 10_000

# ``apply`` marks what it creates with this label, and only ever updates or prunes
# schedules that carry it: a schedule added by hand (``clockctl add``) is never taken over.
MANAGED_BY = "clockd.managed-by"
MANAGED_BY_APPLY = "apply"


_TargetChecks = tuple[Callable[[ScheduleDef], None], Callable[[Target], Target]]
_target_checks: _TargetChecks | None = None


def _load_target_checks() -> _TargetChecks:
    """The target checks (users and groups, HTTP, secret references), imported when the
    first definition is validated: the use cases import this module, and a read such as
    ``clockctl list`` validates nothing (start-up, issue 20). Kept once loaded: an import
    statement in ``normalize`` cost ~1 µs a call, and an apply validates every create."""
    global _target_checks
    from clockd.runner.targets import check_strings, validate_target

    _target_checks = (check_strings, validate_target)
    return _target_checks


def normalize(definition: ScheduleDef) -> ScheduleDef:
    """Validate a definition and return it with its expression in canonical form."""
    check_strings, validate_target = _target_checks or _load_target_checks()
    check_strings(definition)  # NUL anywhere: refused with the field's name
    # The limits every front end shares (clockd.core.limits): the CLI, files and the API.
    check_schedule_name(definition.name)
    check_name(definition.tenant, "tenant")
    check_name(definition.queue, "queue")
    expr = validate_definition(definition.kind, definition.expr, definition.tz)
    check_retries(definition.retry.retries)
    if definition.timeout is not None and definition.timeout.total_seconds() <= 0:
        raise InvalidInput("timeout: must be positive")
    _check_policies(definition)
    target = validate_target(definition.target)  # users, limits, HTTP, secret references
    if expr == definition.expr and target == definition.target:
        return definition  # already canonical: no copy (apply normalizes thousands)
    return dataclasses.replace(definition, expr=expr, target=target)


def _check_policies(definition: ScheduleDef) -> None:
    if definition.window < timedelta(0) or definition.window > MAX_WINDOW:
        raise InvalidInput(
            f"window: {format_duration(definition.window)} is not between 0 (strict) and {format_duration(MAX_WINDOW)}"
        )
    if definition.max_lateness < MIN_LATENESS:
        raise InvalidInput(f"max_lateness: must be at least {format_duration(MIN_LATENESS)}")
    if not 0 <= definition.catch_up_limit <= MAX_CATCH_UP_LIMIT:
        raise InvalidInput(f"catch_up_limit: must be 0 to {MAX_CATCH_UP_LIMIT}")
    bad = [c for c in definition.retry.permanent_exit_codes if not 0 <= c <= 255]
    if bad:
        raise InvalidInput(f"permanent_exit_codes: {bad[0]} is not an exit code (0-255)")
