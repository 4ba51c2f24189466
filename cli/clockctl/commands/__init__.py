"""clockctl commands, one module per noun; each exposes ``register(app)``."""

from __future__ import annotations

import importlib
import pkgutil

import typer

# Help lists commands in registration order: the everyday verbs first.
ORDER = ("schedules", "preview", "runs")


def register_all(app: typer.Typer) -> None:
    names = [m.name for m in pkgutil.iter_modules(__path__)]
    for name in sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n)):
        module = importlib.import_module(f"{__name__}.{name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)
