"""The options ``add`` and ``update`` share: scheduling policies (DESIGN.md §4), the
job's stdin and its notifications. One definition each, so both commands spell, explain
and validate them alike.

Each option left out keeps what the definition has (``add``: the defaults).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from clockd.core.model import MisfirePolicy, OverlapPolicy
from clockd.errors import InvalidInput

Misfire = Annotated[
    MisfirePolicy | None,
    typer.Option(
        "--misfire",
        metavar="skip|fire_once|catch_up",
        help="a run that could not start within --max-lateness: skip it, run only the latest "
        "(fire_once, the default), or run up to --catch-up-limit of them (catch_up)",
    ),
]
MaxLateness = Annotated[
    str | None,
    typer.Option("--max-lateness", metavar="DURATION", help="how late a run may still start (default 10m)"),
]
CatchUpLimit = Annotated[
    int | None,
    typer.Option("--catch-up-limit", metavar="N", help="misfire catch_up: at most N late runs (default 10)"),
]
Overlap = Annotated[
    OverlapPolicy | None,
    typer.Option(
        "--overlap",
        metavar="allow|skip|queue_one",
        help="while a run is still running: start the next anyway (allow, the default), skip it, "
        "or let one wait (queue_one)",
    ),
]
Window = Annotated[
    str | None,
    typer.Option(
        "--window",
        metavar="DURATION|strict",
        help="spread starts over up to 5m after the instant, at a fixed offset per run (default strict)",
    ),
]
PermanentExitCodes = Annotated[
    str | None,
    typer.Option(
        "--permanent-exit-codes",
        metavar="CODES",
        help="exit codes that mean 'do not retry', e.g. 2,64 (go straight to the dead-letter queue); none clears",
    ),
]


Stdin = Annotated[
    str | None,
    typer.Option("--stdin", metavar="TEXT", help="text written to the job's standard input (newlines kept)"),
]
_NOTIFY = "CMD|URL|mail:ADDR"
OnFailure = Annotated[
    str | None,
    typer.Option(
        "--on-failure",
        metavar=_NOTIFY,
        help="notify when an attempt fails: a shell command, an http(s) URL (JSON POST) or mail:ADDR",
    ),
]
OnDead = Annotated[str | None, typer.Option("--on-dead", metavar=_NOTIFY, help="notify when an occurrence goes DEAD")]
OnMissed = Annotated[
    str | None, typer.Option("--on-missed", metavar=_NOTIFY, help="notify when an occurrence is MISSED")
]
OnSuccess = Annotated[
    str | None, typer.Option("--on-success", metavar=_NOTIFY, help="notify when an occurrence succeeds")
]


def policy_fields(
    *,
    misfire: MisfirePolicy | None = None,
    max_lateness: str | None = None,
    catch_up_limit: int | None = None,
    overlap: OverlapPolicy | None = None,
    window: str | None = None,
    permanent_exit_codes: str | None = None,
) -> dict[str, Any]:
    """The given options as schedule-file fields (validated with the rest of the job by
    ``clockd.formats.schedfile.validate_job``); options left out are absent."""
    fields: dict[str, Any] = {
        "misfire": misfire.value if misfire is not None else None,
        "max_lateness": max_lateness,
        "catch_up_limit": catch_up_limit,
        "overlap": overlap.value if overlap is not None else None,
        "window": window,
        "permanent_exit_codes": list(exit_codes(permanent_exit_codes)) if permanent_exit_codes is not None else None,
    }
    return {key: value for key, value in fields.items() if value is not None}


def exit_codes(text: str) -> tuple[int, ...]:
    """``2,64`` → ``(2, 64)``; ``none`` (or empty) → ``()``."""
    if text.strip().lower() in ("", "none"):
        return ()
    try:
        codes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise InvalidInput(f"--permanent-exit-codes: expected codes such as 2,64, got {text!r}") from None
    return tuple(codes)
