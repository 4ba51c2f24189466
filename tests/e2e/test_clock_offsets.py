"""Every node's clock offset, on the status screen and the dashboard (issue 17).

Two real ``clockd run`` processes on real PostgreSQL and etcd: ``n1`` with a right clock
(and the api mode, so the dashboard), ``s1`` under libfaketime (``tests.harness.faketime``,
the clock-jump drill's hook) 30 s ahead. Each publishes what its clock watch measured
in its etcd member record; ``clockctl status`` and the dashboard's health page show
both, ``s1`` flagged as beyond its ``max_clock_skew``.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.cluster import BIN, Cluster
from tests.e2e.conftest import wait_for
from tests.e2e.test_drills import cluster  # noqa: F401  # fixture
from tests.harness.faketime import FakeClock

pytestmark = [pytest.mark.e2e]

AHEAD = 30.0  # seconds: s1's clock, well beyond the 2 s default limit


def status(c: Cluster, *extra: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(BIN / "clockctl"), "status", *extra, "--etcd", ",".join(c.etcd), "--cluster", c.name],
        env={**c.env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result


def clocks(c: Cluster) -> dict[str, dict[str, Any]]:
    doc = json.loads(status(c, "-o", "json").stdout)
    return {m["node"]: m["clock"] for m in doc["coordination"]["members"] if m.get("clock")}


def signed_in(url: str, token: str) -> httpx.Client:
    """A dashboard session, signed in through the sign-in form as a browser would."""
    client = httpx.Client(base_url=url, timeout=20, follow_redirects=False)
    form = client.get("/ui/login")
    nonce = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert nonce, form.text
    done = client.post("/ui/login", data={"token": token, "csrf": nonce.group(1), "next": "/ui/health"})
    assert done.status_code == 303, done.text
    return client


def test_each_nodes_clock_offset_is_shown_and_the_one_beyond_its_limit_flagged(
    cluster: Cluster,  # noqa: F811  # the imported fixture
    tmp_path: Path,
) -> None:
    fake = FakeClock(tmp_path / "faketime")
    fake.jump(AHEAD)
    n1 = cluster.start("n1", "leader,materializer,relay,worker,api")
    cluster.start("s1", "worker", env=fake.env)

    found = wait_for("both nodes to publish their offset", lambda: len(c := clocks(cluster)) == 2 and c, 30)
    assert abs(found["n1"]["offset_seconds"]) < 0.5 and found["n1"]["within_limit"] is True
    assert abs(found["s1"]["offset_seconds"] - AHEAD) < 0.5, found["s1"]
    assert found["s1"]["within_limit"] is False and found["s1"]["limit_seconds"] == 2.0
    assert found["s1"]["stale"] is False and found["s1"]["age_seconds"] < 30

    table = status(cluster).stdout
    s1_row = next(line for line in table.splitlines() if line.lstrip().startswith("s1"))
    # The table rounds the same measured offset the JSON carries (within 0.5 s of AHEAD; a
    # loaded machine measures +29.9 as well as +30.1), and flags it.
    shown = re.search(r"\+(\d+\.\d+)s", s1_row)
    assert shown is not None and abs(float(shown.group(1)) - AHEAD) < 0.5 and "OVER LIMIT" in s1_row, table
    n1_row = next(line for line in table.splitlines() if line.lstrip().startswith("n1"))
    assert "OVER LIMIT" not in n1_row, table

    token = json.loads(cluster.ctl("token", "create", "--role", "cluster-admin", "-o", "json").stdout)[
        "token"
    ]  # the health page is the cluster's
    client = signed_in(n1.api_url(), token)
    try:
        page = client.get("/ui/health")
        assert page.status_code == 200, page.text
        rows = re.findall(r"<tr><td[^>]*>(n1|s1)\b.*?</tr>", page.text, re.S)
        assert rows == ["n1", "s1"], page.text
        s1_html = re.search(r"<tr><td[^>]*>s1\b.*?</tr>", page.text, re.S)
        assert s1_html and "over the 2.00s limit" in s1_html.group(0), page.text
        n1_html = re.search(r"<tr><td[^>]*>n1\b.*?</tr>", page.text, re.S)
        assert n1_html and "over the" not in n1_html.group(0) and "not measured" not in n1_html.group(0)
    finally:
        client.close()
