"""Real clockd processes serving the API, over real HTTP, on both stores.

``api`` is parametrized: ``sqlite`` (one ``clockd run`` with every mode, the
embedded store) and ``postgres`` (PostgreSQL + etcd: one process with the scheduling
modes and TWO ``--mode api`` processes; requests alternate between them, so nothing
may depend on which one answers). Tokens are made with the real ``clockctl token
create``.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.conftest import BIN, Clockd, wait_for


@dataclass
class ApiServer:
    urls: list[str]
    env: dict[str, str]
    ns: str = ""  # each test's tenants are namespaced: the servers are shared by a module
    store: str = ""  # the SQLite file, or the PostgreSQL DSN, the processes share
    _turn: Iterator[str] = field(init=False)

    def tenant(self, name: str) -> str:
        return f"{self.ns}{name}"

    def __post_init__(self) -> None:
        self._turn = itertools.cycle(self.urls)

    def url(self) -> str:
        return next(self._turn)

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(BIN / "clockctl"), *args], env=self.env, capture_output=True, text=True, timeout=60
        )
        if check and result.returncode != 0:
            raise AssertionError(f"clockctl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result

    def token(self, tenant: str = "acme", role: str = "operator", name: str | None = None) -> str:
        name = name or f"{role}-{uuid.uuid4().hex[:6]}"
        args = ("token", "create", "--tenant", self.tenant(tenant), "--role", role, "--name", name, "-o", "json")
        doc = json.loads(self.ctl(*args).stdout)
        return str(doc["token"])

    def client(self, token: str | None, url: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=url or self.url(), headers=headers, timeout=30)

    def clients(self, token: str) -> list[httpx.Client]:
        """One client per api process."""
        return [self.client(token, url) for url in self.urls]

    def async_client(self, token: str, url: str | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=url or self.url(), headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _wait_listening(url: str) -> None:
    def up() -> bool:
        try:
            return httpx.get(url + "/v1/openapi.json", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(f"the api at {url}", up, 30)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.etcd])]
)
def servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The processes, shared by a module's tests (each test works in its own tenants)."""
    tmp_path = tmp_path_factory.mktemp("api")
    if request.param == "sqlite":
        daemon = Clockd(tmp_path / "home")
        daemon.home.mkdir(mode=0o700)
        daemon.start("--api-addr", "127.0.0.1:0")  # the port it binds: from its log
        url = daemon.api_url()
        _wait_listening(url)
        try:
            yield ApiServer([url], daemon.env, store=str(daemon.home / "clockd.db"))
        finally:
            daemon.stop(timeout=30)
        return
    pg_server = request.getfixturevalue("pg_server")
    etcd_server = request.getfixturevalue("etcd_server")
    name = f"api_{uuid.uuid4().hex[:10]}"
    dsn = pg_server.create_database(name)
    cluster = Cluster(dsn, etcd_server.endpoints, tmp_path)
    cluster.migrate()
    try:
        cluster.start("core", "leader,materializer,relay,worker", "--api-addr", "off")
        urls = [cluster.start(f"api{n}", "api", "--api-addr", "127.0.0.1:0").api_url() for n in (1, 2)]
        for url in urls:
            _wait_listening(url)
        yield ApiServer(urls, cluster.env, store=dsn)
    finally:
        cluster.stop_all()
        pg_server.drop_database(name)


@pytest.fixture
def api(servers: ApiServer) -> ApiServer:
    return ApiServer(servers.urls, servers.env, f"t{uuid.uuid4().hex[:8]}-", servers.store)


def job(name: str = "email", **fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name, "schedule": "0 10 * * 5", "tz": "Europe/Paris", "command": ["/bin/true"]}
    doc.update(fields)
    return doc
