"""Contract suites: one behavioural suite per port, run against every adapter.

* ``store/`` — the store port (``clockd.store``) over SQLite (and PostgreSQL).
* ``coord/`` — the coordinator port over the local and etcd coordinators.
"""
