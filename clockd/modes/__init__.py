"""The four modes as asyncio services: leader, materializer, relay, worker.

Each takes ports (store, coordinator, runner), a ``Clock`` and its settings,
and exposes ``run(stopping)`` that returns once ``stopping`` is set and its
work is drained. Modes import only core, services, ports and obs (import-linter);
``clockd.wiring`` builds them (``MODES``) and the supervisor runs them.

Where to find things (docs/architecture.md has the whole path of an occurrence):
* the materializer's transaction: ``materializer.Materializer.tick`` → ``Store.materialize``;
* the fence check: every ``Fence`` passed to the store, advanced in the same transaction;
* the worker's claim: ``worker.Worker._claim_loop`` → ``Store.claim``.
"""
