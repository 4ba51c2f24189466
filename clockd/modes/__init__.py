"""The four modes as asyncio services: leader, materializer, relay, worker.

Each takes ports (store, coordinator, runner), a ``Clock`` and its settings,
and exposes ``run(stopping)`` that returns once ``stopping`` is set and its
work is drained. Modes import only core, ports and obs (import-linter).

Where to find things:
* the materializer's transaction: ``materializer.Materializer.tick`` → ``Store.materialize``;
* the fence check: every ``Fence`` passed to the store (adapters' ``_advance_fence``);
* the worker's claim: ``worker.Worker._claim_loop`` → ``Store.claim``.
"""
