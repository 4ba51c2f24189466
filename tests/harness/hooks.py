"""pytest hook specifications added by tests/conftest.py."""

from __future__ import annotations

import pytest


@pytest.hookspec
def pytest_clockd_pg_template(dsn: str) -> None:
    """Prepare the session's template database at ``dsn`` (e.g. apply the migrations).

    Called once per session, before the first ``pg_dsn`` copy is made; every
    implementation runs (a plain function in any conftest.py:
    ``def pytest_clockd_pg_template(dsn): ...``; pytest only picks up unmarked hook
    functions whose name starts with ``pytest_``).
    """
