"""How a clockctl command reaches the store: one asyncio run per command."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from clockd.config import load_settings, resolve_store
from clockd.core.clock import SystemClock
from clockd.ops import Ops
from clockd.wiring import egress_policy, make_store

if TYPE_CHECKING:
    from clockd.runner.egress import EgressPolicy

T = TypeVar("T")

# Set by the app callback from --store / CLOCKD_STORE.
state: dict[str, str | None] = {"store": None}


@functools.cache
def _egress() -> EgressPolicy:
    """The daemon config's egress policy (CLOCKD_CONFIG or /etc/clockd/clockd.yaml and
    CLOCKD_* variables), read only when an HTTP target is written."""
    return egress_policy(load_settings())


def with_ops(fn: Callable[[Ops], Awaitable[T]], *, create: bool = False) -> T:
    """``create``: a writing verb may create a missing embedded store; reads say it is missing."""
    # The result leaves through a list, not as the coroutine's return value: on Python
    # 3.11 asyncio.run formats the repr of what the main task returns (0.5 s for a
    # 20,000-schedule apply plan).
    result: list[T] = []

    async def go() -> None:
        store = make_store(resolve_store(state["store"]), create=create)
        await store.open()
        try:
            result.append(await fn(Ops(store, SystemClock(), egress=_egress)))
        finally:
            await store.close()

    asyncio.run(go())
    return result[0]
