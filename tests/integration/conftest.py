"""Stores for the integration tests: the same two backends as the store contract suite
(``tests/contract/store/conftest.py``), so a policy test runs on SQLite and PostgreSQL.

The PostgreSQL template is migrated by the contract suite's ``pytest_clockd_pg_template``
hook, imported here so it is registered when only ``tests/integration`` is collected (if
both directories are, it runs twice; the second ``migrate`` applies nothing).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.contract.store.conftest import _MARKS, STORE_FACTORIES, make_backend
from tests.contract.store.conftest import pytest_clockd_pg_template as pytest_clockd_pg_template
from tests.contract.store.support import Backend


@pytest.fixture(params=[pytest.param(kind, marks=_MARKS.get(kind, [])) for kind in STORE_FACTORIES])
async def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """A fresh, empty database on each store kind (``sqlite``, ``postgres``)."""
    made = await make_backend(request.param, tmp_path, request)
    try:
        yield made
    finally:
        await made.aclose()
