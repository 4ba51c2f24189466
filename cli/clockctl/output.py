"""The CLI's only place that writes to the terminal, and the one map from errors to exit codes."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import StrEnum
from functools import wraps
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console

from clockd.errors import ClockdError

PIPED_WIDTH = 100_000


def _width(stream: object) -> int | None:
    # Piped output is read by scripts, grep and pagers: one row per line, never a cell
    # wrapped (or cut) to fit 80 or COLUMNS columns; a terminal gets its own width.
    isatty = getattr(stream, "isatty", None)
    return None if isatty is not None and isatty() else PIPED_WIDTH


console = Console(highlight=False, soft_wrap=True, width=_width(sys.stdout))
err_console = Console(stderr=True, highlight=False, soft_wrap=True, width=_width(sys.stderr))


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


def emit_json(data: Any) -> None:
    """Stable machine-readable output: one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def fail(message: str, code: int) -> typer.Exit:
    """Print a one-line error on stderr and return the Exit to raise."""
    err_console.print(f"[red]error:[/red] {message}", markup=True, highlight=False)
    return typer.Exit(code)


P = ParamSpec("P")
R = TypeVar("R")


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Map ``ClockdError`` to a one-line message and its exit code, once for every command."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ClockdError as exc:
            raise fail(_escape(exc.message), exc.exit_code) from None

    return wrapper


def _escape(text: str) -> str:
    return text.replace("[", r"\[")
