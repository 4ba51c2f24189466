"""The store contract suite: every guarantee of ``clockd.store.Store``, one test per
guarantee, run against every backend in ``conftest.STORE_FACTORIES``.

Tests pass fixed instants as ``now`` (``support.T0``), never sleep, and use only the
port (plus ``Backend`` hooks for what the port cannot do, such as faking a future
schema). Adapter-specific behaviour (file handling, error translation) lives in
``test_<adapter>_adapter.py``.
"""
