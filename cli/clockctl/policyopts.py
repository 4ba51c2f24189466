"""The scheduling-policy options ``add`` and ``update`` share (DESIGN.md §4).

Each option left out keeps what the definition has (``add``: the defaults).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Annotated

import typer

from clockd.core.durations import parse_duration
from clockd.core.model import MisfirePolicy, OverlapPolicy, ScheduleDef
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


def apply_policies(
    definition: ScheduleDef,
    *,
    misfire: MisfirePolicy | None = None,
    max_lateness: str | None = None,
    catch_up_limit: int | None = None,
    overlap: OverlapPolicy | None = None,
    window: str | None = None,
    permanent_exit_codes: str | None = None,
) -> ScheduleDef:
    """``definition`` with the given options set (validated later by ``Ops``)."""
    changes: dict[str, object] = {}
    if misfire is not None:
        changes["misfire"] = misfire
    if max_lateness is not None:
        changes["max_lateness"] = parse_duration(max_lateness)
    if catch_up_limit is not None:
        changes["catch_up_limit"] = catch_up_limit
    if overlap is not None:
        changes["overlap"] = overlap
    if window is not None:
        changes["window"] = timedelta(0) if window.strip().lower() == "strict" else parse_duration(window)
    if permanent_exit_codes is not None:
        changes["retry"] = dataclasses.replace(definition.retry, permanent_exit_codes=exit_codes(permanent_exit_codes))
    return dataclasses.replace(definition, **changes)  # type: ignore[arg-type]


def exit_codes(text: str) -> tuple[int, ...]:
    """``2,64`` → ``(2, 64)``; ``none`` (or empty) → ``()``."""
    if text.strip().lower() in ("", "none"):
        return ()
    try:
        codes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise InvalidInput(f"--permanent-exit-codes: expected codes such as 2,64, got {text!r}") from None
    return tuple(codes)
