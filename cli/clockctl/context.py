"""How a clockctl command reaches the store: one asyncio run per command."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from clockd.config import resolve_store
from clockd.core.clock import SystemClock
from clockd.ops import Ops
from clockd.wiring import make_store

T = TypeVar("T")

# Set by the app callback from --store / CLOCKD_STORE.
state: dict[str, str | None] = {"store": None}


def with_ops(fn: Callable[[Ops], Awaitable[T]]) -> T:
    async def go() -> T:
        store = make_store(resolve_store(state["store"]))
        await store.open()
        try:
            return await fn(Ops(store, SystemClock()))
        finally:
            await store.close()

    return asyncio.run(go())
