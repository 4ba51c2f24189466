"""The pure core: no I/O, no asyncio, no database or CLI imports (import-linter enforces it).

Invariants:
* every datetime that leaves this package is aware and in UTC, except the
  ``local`` views made for display;
* ``now`` is always a parameter — nothing here reads the wall clock;
* ``cronsim`` is imported only by ``clockd.core.cron``, and only to enumerate
  naive local wall-clock times; ``timeline`` turns those into real instants.
"""
