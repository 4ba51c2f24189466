"""Test harness: real PostgreSQL and etcd servers on free loopback ports.

* ``PostgresServer`` — initdb + pg_ctl in a temp dir (as the ``postgres`` user when
  root); ``dsn()``, ``create_database()``, ``drop_database()``, ``restart()``,
  ``kill()``, ``stop()``.
* ``EtcdServer`` / ``EtcdCluster`` — ``start()``, ``kill()``, ``restart()``,
  ``freeze()``/``thaw()``, ``stop()``, ``endpoints``; ``cluster.members[i]`` for one member.
* ``require_binary(name)`` — skip when a server binary is missing, fail under CI=true.

Invariants: servers bind 127.0.0.1 only, never the default ports 5432/2379; every
process started is stopped by PID at teardown, and an atexit hook kills leftovers.
"""

from __future__ import annotations

from .etcd import EtcdCluster, EtcdError, EtcdServer
from .postgres import PostgresError, PostgresServer
from .procs import find_binary, free_port, freeze_process, in_ci, require_binary, teardown_on_sigterm, until, wait_until

__all__ = [
    "EtcdCluster",
    "EtcdError",
    "EtcdServer",
    "PostgresError",
    "PostgresServer",
    "find_binary",
    "free_port",
    "freeze_process",
    "in_ci",
    "require_binary",
    "teardown_on_sigterm",
    "until",
    "wait_until",
]
