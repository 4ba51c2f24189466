"""How a clockctl command reaches the store: one asyncio run per command.

Start-up is part of the CLI's contract (``clockctl list`` within 0.5 s through the
frozen executable, issue 20): this module is imported by every command, so it imports
the store, the use cases and the HTTP client only inside :func:`with_ops`, and the HTTP
client only when a server is configured. ``tests/cli/test_startup.py`` keeps it so.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar, cast

from clockctl.contexts import resolve

if TYPE_CHECKING:
    from clockd.runner.egress import EgressPolicy
    from clockd.services.ops import Ops

T = TypeVar("T")

# Set by the app callback from --store / CLOCKD_STORE and --server / --token / --context.
state: dict[str, str | None] = {"store": None, "server": None, "token": None, "context": None}


@functools.cache
def _egress() -> EgressPolicy:
    """The daemon config's egress policy (CLOCKD_CONFIG or /etc/clockd/clockd.yaml and
    CLOCKD_* variables), read only when an HTTP target is written."""
    from clockd.config import load_settings
    from clockd.wiring import egress_policy

    return egress_policy(load_settings())


def server() -> tuple[str, str | None] | None:
    """(server URL, token) when the command goes through the API, else None (the store).
    --server beats --store (or CLOCKD_STORE), which beats CLOCKD_SERVER and the contexts."""
    if state["server"] is None and state["store"] is not None:
        return None
    return resolve(state["server"], state["token"], state["context"])


def with_ops(fn: Callable[[Ops], Awaitable[T]], *, create: bool = False) -> T:
    """Run ``fn`` with the use cases: over the HTTP API when a server is configured
    (``--server``, ``CLOCKD_SERVER`` or a context; ``clockctl.remote``), else on the store.
    ``create``: a writing verb may create a missing embedded store; reads say it is missing."""
    # The result leaves through a list, not as the coroutine's return value: on Python
    # 3.11 asyncio.run formats the repr of what the main task returns (0.5 s for a
    # 20,000-schedule apply plan).
    result: list[T] = []

    remote = server()

    async def over_api(server: str, token: str | None) -> None:
        from clockctl.remote import RemoteOps
        from clockd.client import AsyncClient

        async with AsyncClient(server, token) as client:
            # RemoteOps answers the Ops methods the commands call (clockctl.remote), with
            # the same models; the cast says so to the type checker.
            result.append(await fn(cast("Ops", RemoteOps(client))))

    if remote is not None:
        asyncio.run(over_api(*remote))
        return result[0]

    from clockd.config import resolve_store
    from clockd.core.clock import SystemClock
    from clockd.services.ops import Ops
    from clockd.wiring import make_store

    async def go() -> None:
        store = make_store(resolve_store(state["store"]), create=create)
        await store.open()
        try:
            result.append(await fn(Ops(store, SystemClock(), egress=_egress)))
        finally:
            await store.close()

    asyncio.run(go())
    return result[0]
