"""``clockctl token`` and ``clockctl audit``, once on the store and once through the API
(``--server`` by CLOCKD_SERVER/CLOCKD_TOKEN, a cluster-admin token): the same output,
``-o json`` and exit codes; over the API the calling token's tenant and role decide."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import BIN, STORE_AND_API, make_ctl, serve_api


@pytest.fixture(params=STORE_AND_API)
def ctl(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    return make_ctl(tmp_path, request)


def _tenant() -> str:
    # The API runs share one daemon per module: each test names a tenant of its own.
    return f"acme-{uuid.uuid4().hex[:8]}"


def test_create_list_revoke_and_the_audit_log(ctl: Any) -> None:
    t = _tenant()
    made = ctl("token", "create", "--tenant", t, "--role", "operator", "--name", "deploy", "-o", "json")
    assert made.returncode == 0, made.stderr
    deploy = json.loads(made.stdout)
    assert deploy["token"].startswith("clockd_") and deploy["token"].split("_")[1] == deploy["id"]
    assert (deploy["tenant"], deploy["name"], deploy["role"], deploy["expires_at"]) == (t, "deploy", "operator", None)

    table = ctl("token", "create", "--tenant", t, "--role", "readonly", "--name", "look", "--expires", "90d")
    assert table.returncode == 0, table.stderr
    secret, note = table.stdout.splitlines()
    assert secret.startswith("clockd_")
    look_id = secret.split("_")[1]
    assert note == (
        f"# token 'look' (readonly) of tenant {t}, id {look_id}: shown once, keep it now (Authorization: Bearer …)"
    )

    listed = json.loads(ctl("token", "list", "--tenant", t, "-o", "json").stdout)
    assert [(d["name"], d["role"], d["revoked_at"]) for d in listed] == [
        ("deploy", "operator", None),
        ("look", "readonly", None),
    ]
    assert all("token" not in d and "hash" not in d for d in listed)
    assert next(d for d in listed if d["name"] == "look")["expires_at"] is not None
    rows = ctl("token", "list", "--tenant", t).stdout.splitlines()
    assert rows[0].split() == ["ID", "TENANT", "NAME", "ROLE", "CREATED", "EXPIRES", "REVOKED"]
    assert [r.split()[:4] for r in rows[1:]] == [
        [deploy["id"], t, "deploy", "operator"],
        [look_id, t, "look", "readonly"],
    ]

    revoked = json.loads(ctl("token", "revoke", "deploy", "--tenant", t, "-o", "json").stdout)
    assert revoked["name"] == "deploy" and revoked["revoked_at"] is not None
    by_id = ctl("token", "revoke", look_id, "--tenant", t)
    assert (by_id.returncode, by_id.stdout) == (0, f"revoked token 'look' ({look_id}) of tenant {t}\n")
    again = ctl("token", "revoke", "deploy", "--tenant", t)
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.strip() == (
        f"error: no live token 'deploy' in tenant '{t}' (clockctl token list shows them)"
    ), again.stderr

    entries = json.loads(ctl("audit", "--tenant", t, "-o", "json").stdout)
    assert [(e["action"], e["target"], e["tenant"]) for e in entries] == [
        ("token.revoke", "look", t),
        ("token.revoke", "deploy", t),
        ("token.create", "look", t),
        ("token.create", "deploy", t),
    ]
    assert entries[-1]["detail"] == {"role": "operator"}
    # Over the API the actor is the calling token (the harness's, named after its role).
    actor = "cluster-admin" if ctl.via == "api" else f"local:{getpass.getuser()}"
    assert {e["actor"] for e in entries} == {actor}
    assert [e["action"] for e in json.loads(ctl("audit", "--tenant", t, "-n", "1", "-o", "json").stdout)] == [
        "token.revoke"
    ]
    lines = ctl("audit", "--tenant", t).stdout.splitlines()
    assert lines[0].split() == ["AT", "TENANT", "WHO", "ACTION", "TARGET", "VERSION"]
    assert [line.split()[1:5] for line in lines[1:]] == [[t, actor, e["action"], e["target"]] for e in entries]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--role", "wizard"), "role: 'wizard' is not one of readonly, operator, admin, cluster-admin"),
        (("--expires", "5"), "duration '5' has no unit"),
        (("--name", "no spaces"), "name: 'no spaces': use 1-100 letters"),
    ],
)
def test_bad_input_is_exit_2_and_creates_nothing(ctl: Any, args: tuple[str, ...], message: str) -> None:
    t = _tenant()
    bad = ctl("token", "create", "--tenant", t, *args)
    assert bad.returncode == 2 and bad.stdout == "" and message in bad.stderr, bad.stderr
    assert json.loads(ctl("token", "list", "--tenant", t, "-o", "json").stdout) == []
    assert json.loads(ctl("audit", "--tenant", t, "-o", "json").stdout) == []


def _as(request: pytest.FixtureRequest, role: str) -> Any:
    """clockctl through the module's daemon's API as a token of ``role`` of a new tenant;
    ``run.tenant`` names it, ``run.store`` runs on the daemon's store instead."""
    env = {**os.environ, **serve_api(request, role)}
    env.pop("CLOCKD_STORE", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "clockctl"), *args], env=env, capture_output=True, text=True, timeout=60)

    def store(*args: str) -> subprocess.CompletedProcess[str]:
        return run("--store", "sqlite:///", *args)

    token_id = env["CLOCKD_TOKEN"].split("_")[1]
    mine = next(d for d in json.loads(store("token", "list", "-o", "json").stdout) if d["id"] == token_id)
    assert mine["role"] == role
    run.tenant = mine["tenant"]  # type: ignore[attr-defined]  # test helper attribute
    run.store = store  # type: ignore[attr-defined]  # test helper attribute
    return run


@pytest.mark.e2e
def test_an_admin_token_manages_only_its_tenant_and_a_reader_none(request: pytest.FixtureRequest) -> None:
    ours, theirs, reader = _as(request, "admin"), _as(request, "admin"), _as(request, "readonly")
    ci = json.loads(ours("token", "create", "--role", "operator", "--name", "ci", "-o", "json").stdout)
    assert ci["tenant"] == ours.tenant  # "default": the calling token's tenant
    listed = json.loads(ours("token", "list", "-o", "json").stdout)  # no --tenant: the token's tenant's
    assert [(d["tenant"], d["name"]) for d in listed] == [(ours.tenant, "admin"), (ours.tenant, "ci")]

    # Another tenant's admin: 404 (exit 1), as for a tenant or token that does not exist.
    args: tuple[str, ...]
    for args in (
        ("token", "list", "--tenant", ours.tenant),
        ("token", "revoke", ci["id"]),
        ("token", "revoke", "ci", "--tenant", ours.tenant),
        ("token", "create", "--tenant", ours.tenant, "--role", "admin"),
        ("audit", "--tenant", ours.tenant),
    ):
        refused = theirs(*args)
        assert refused.returncode == 1 and refused.stdout == "", (args, refused.stderr)
        assert refused.stderr.startswith("error: no "), refused.stderr
    # Without --tenant the API acts in the calling token's tenant: the message said 'default'.
    assert theirs("token", "revoke", ci["id"]).stderr.strip() == (
        f"error: no live token {ci['id']!r} in your token's tenant (clockctl token list shows them)"
    )
    assert [d["revoked_at"] for d in json.loads(ours("token", "list", "-o", "json").stdout)] == [None, None]

    # Above one's role: 403 (exit 4, the API refused), and nothing written.
    for who, args in (
        (reader, ("token", "create", "--role", "readonly")),
        (reader, ("token", "list")),
        (reader, ("token", "revoke", "readonly")),
        (reader, ("audit",)),
        (ours, ("token", "create", "--role", "cluster-admin")),
    ):
        refused = who(*args)
        assert refused.returncode == 4 and refused.stdout == "", (args, refused.stderr)
        assert refused.stderr.startswith("error: the API refused: "), refused.stderr
    stored = json.loads(reader.store("token", "list", "--tenant", reader.tenant, "-o", "json").stdout)
    assert [(d["role"], d["revoked_at"]) for d in stored] == [("readonly", None)]

    # The audit log names the calling token, not the local user.
    assert [(e["actor"], e["action"], e["target"]) for e in json.loads(ours("audit", "-o", "json").stdout)] == [
        ("admin", "token.create", "ci"),
        (f"local:{getpass.getuser()}", "token.create", "admin"),  # the harness's, made on the store
    ]
