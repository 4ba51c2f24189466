"""The HTTP API over real HTTP against real clockd processes, on both stores."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from clockd.api.routes import all_endpoints

from .conftest import ApiServer, job

pytestmark = pytest.mark.e2e

PROBLEM = "application/problem+json"


def problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    doc: dict[str, Any] = response.json()
    assert doc["type"] == f"urn:clockd:problem:{slug}", doc
    assert doc["status"] == status and doc["detail"] and "\n" not in doc["detail"]
    return doc


def test_create_list_get_pause_resume_update_delete_and_the_audit_log(api: ApiServer) -> None:
    token = api.token("acme", "admin", "ci")
    with api.client(token) as http:
        created = http.post("/v1/schedules", json=job(), headers={"Idempotency-Key": "mail-1"})
        assert created.status_code == 201, created.text
        body = created.json()
        assert created.headers["etag"] == '"1"' and body["version"] == 1 and body["tenant"] == api.tenant("acme")
        assert len(body["next_runs"]) == 5
        assert body["next_runs"][0]["local"].endswith("+01:00") or body["next_runs"][0]["local"].endswith("+02:00")
        assert body["job"] == job()
        again = http.post("/v1/schedules", json=job(), headers={"Idempotency-Key": "mail-1"})
        assert again.status_code == 201 and again.json()["id"] == body["id"]
        other = http.post("/v1/schedules", json=job(schedule="0 11 * * 5"), headers={"Idempotency-Key": "mail-1"})
        problem(other, 422, "idempotency-key-reused")

        listed = http.get("/v1/schedules").json()
        assert [s["name"] for s in listed["items"]] == ["email"] and listed["next_cursor"] is None
        one = http.get("/v1/schedules/email").json()
        assert one["recent"] == [] or isinstance(one["recent"], list)

        paused = http.post("/v1/schedules/email/pause", json={"reason": "mail server moves"})
        assert paused.status_code == 200 and paused.json()["state"] == "paused" and paused.json()["version"] == 2
        assert body["next_run_at"] is not None
        assert paused.json()["next_run_at"] is None and paused.json()["next_runs"] == []  # nothing to come
        assert http.get("/v1/schedules/email").json()["next_run_at"] is None
        resumed = http.post("/v1/schedules/email/resume", json={"from": "now"})
        assert resumed.json()["state"] == "active" and resumed.headers["etag"] == '"3"'

        stale = http.patch("/v1/schedules/email", json={"schedule": "0 9 * * 5"}, headers={"If-Match": '"1"'})
        problem(stale, 412, "precondition-failed")
        patched = http.patch("/v1/schedules/email", json={"schedule": "0 9 * * 5"}, headers={"If-Match": '"3"'})
        assert patched.status_code == 200, patched.text
        assert patched.json()["job"]["schedule"] == "0 9 * * 5" and patched.json()["version"] == 4
        replaced = http.put("/v1/schedules/email", json=job(timeout="5m"), headers={"If-Match": '"4"'})
        assert replaced.status_code == 200 and replaced.json()["job"]["timeout"] == "5m"
        renamed = http.put("/v1/schedules/email", json=job("other"))
        assert problem(renamed, 422, "invalid-input")["errors"][0]["pointer"] == "/name"

        explained = http.get("/v1/schedules/email/explain", params={"at": "now-1h"})
        assert explained.status_code == 200, explained.text
        ran = http.post("/v1/schedules/email/run-now")
        assert ran.status_code == 202 and ran.json()["manual"] is True
        occ = http.get(f"/v1/occurrences/{ran.json()['id']}")
        assert occ.status_code == 200 and occ.json()["schedule"] == "email"

        assert http.delete("/v1/schedules/email").status_code == 204
        problem(http.get("/v1/schedules/email"), 404, "not-found")
        # Its runs stay readable by the name it had.
        history = http.get("/v1/occurrences", params={"schedule": "email"})
        assert ran.json()["id"] in [o["id"] for o in history.json()["items"]], history.text

        audit = http.get("/v1/audit").json()["items"]
        actions = [(e["action"], e["before_version"], e["after_version"]) for e in reversed(audit)]
        assert actions[-7:] == [
            ("schedule.create", None, 1),
            ("schedule.pause", 1, 2),
            ("schedule.resume", 2, 3),
            ("schedule.update", 3, 4),
            ("schedule.update", 4, 5),
            ("schedule.run_now", None, None),
            ("schedule.delete", 5, 6),
        ]
        assert {e["actor"] for e in audit if e["action"].startswith("schedule.")} == {"ci"}
    cli = json.loads(api.ctl("audit", "--tenant", api.tenant("acme"), "-o", "json").stdout)
    assert cli[0]["action"] == "schedule.delete" and cli[0]["actor"] == "ci"


@contextlib.contextmanager
def _audit_refused(api: ApiServer, tenant: str) -> Iterator[None]:
    """The store refuses audit entries of ``tenant`` (a trigger), the way a full or broken
    audit table would: whatever was written with them must roll back."""
    name = f"refuse_{tenant.replace('-', '_')}"
    if api.store.endswith(".db"):
        with contextlib.closing(sqlite3.connect(api.store, timeout=30)) as db:
            db.execute(
                f"CREATE TRIGGER {name} BEFORE INSERT ON audit_log WHEN NEW.tenant = '{tenant}' "
                "BEGIN SELECT RAISE(ABORT, 'audit log refused'); END"
            )
            db.commit()
            try:
                yield
            finally:
                db.execute(f"DROP TRIGGER {name}")
                db.commit()
        return
    import psycopg

    with psycopg.connect(api.store, autocommit=True) as db:
        db.execute(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN IF NEW.tenant = '{tenant}' THEN RAISE EXCEPTION 'audit log refused'; END IF; RETURN NEW; END $$"
        )
        db.execute(f"CREATE TRIGGER {name} BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION {name}()")
        try:
            yield
        finally:
            db.execute(f"DROP TRIGGER {name} ON audit_log")
            db.execute(f"DROP FUNCTION {name}()")


def test_a_write_and_its_audit_entry_commit_together_or_not_at_all(api: ApiServer) -> None:
    tenant = api.tenant("acme")
    token = api.token("acme", "admin", "ci")
    with api.client(token) as http:
        assert http.post("/v1/schedules", json=job("kept")).status_code == 201
        with _audit_refused(api, tenant):
            failed = http.post("/v1/schedules", json=job(), headers={"Idempotency-Key": "k1"})
            assert failed.status_code >= 500, failed.text
            paused = http.post("/v1/schedules/kept/pause", json={"reason": "x"})
            assert paused.status_code >= 500, paused.text
        problem(http.get("/v1/schedules/email"), 404, "not-found")  # the change rolled back with its entry
        assert http.get("/v1/schedules/kept").json()["state"] == "active"
        audit = [(e["action"], e["target"]) for e in http.get("/v1/audit").json()["items"]]
        assert [a for a in audit if a[0].startswith("schedule.")] == [("schedule.create", "kept")]
        again = http.post("/v1/schedules", json=job(), headers={"Idempotency-Key": "k1"})
        assert again.status_code == 201 and "idempotent-replayed" not in again.headers  # the key was not kept
        audit = [(e["action"], e["target"]) for e in http.get("/v1/audit").json()["items"]]
        assert audit[0] == ("schedule.create", "email")


def _fill(path: str, name: str, occurrence: str) -> str:
    return path.replace("{name}", name).replace("{id}", occurrence).replace("{ref}", "ci").replace("{tenant}", "acme")


def test_another_tenants_token_gets_404_on_every_route_and_changes_nothing(api: ApiServer) -> None:
    mine = api.token("acme", "admin", "ci")
    theirs = api.token("intruder", "admin", "spy")
    with api.client(mine) as http:
        assert http.post("/v1/schedules", json=job()).status_code == 201
        occurrence = http.post("/v1/schedules/email/run-now").json()["id"]
        before = http.get("/v1/schedules/email").json()
        audit_before = http.get("/v1/audit").json()["items"]
    checked = 0
    with api.client(theirs) as http:
        for ep in all_endpoints():
            if "{" not in ep.path or ep.path.startswith("/v1/tenants"):
                continue
            path = _fill(ep.path, "email", occurrence)
            body = job() if ep.body in ("Job",) else {}
            params = {"at": "now"} if any(p.name == "at" for p in ep.params) else {}  # explain's
            response = http.request(ep.method, path, json=body, params=params)
            problem(response, 404, "not-found")
            checked += 1
        # Lists and tenant-wide reads show nothing of acme.
        assert http.get("/v1/schedules").json()["items"] == []
        assert http.get("/v1/occurrences").json()["items"] == []
        assert http.get("/v1/dlq").json()["items"] == []
        assert all(e["tenant"] == api.tenant("intruder") for e in http.get("/v1/audit").json()["items"])
        assert http.get("/v1/status").json()["schedules"] == 0
        problem(http.get("/v1/schedules", params={"tenant": api.tenant("acme")}), 404, "not-found")
        problem(http.get("/v1/occurrences", params={"schedule": "email"}), 404, "not-found")
        problem(http.get("/v1/reconcile", params={"schedule": "email"}), 404, "not-found")
        # Without a schedule: the token's tenant's schedules, none of acme's (it was a 422,
        # "name the schedule", for any token but a cluster-admin's).
        own = http.get("/v1/reconcile", params={"from": "now-1h"})
        assert own.status_code == 200 and own.json()["schedules"] == 0, own.text
        problem(http.get("/v1/reconcile", params={"tenant": api.tenant("acme")}), 404, "not-found")
    assert checked >= 12
    with api.client(mine) as http:
        after = http.get("/v1/schedules/email").json()
        assert after["version"] == before["version"] and after["state"] == "active"
        assert http.get("/v1/audit").json()["items"] == audit_before
        assert http.get(f"/v1/occurrences/{occurrence}").status_code == 200


def test_roles_and_bad_tokens(api: ApiServer) -> None:
    reader = api.token("acme", "readonly")
    with api.client(reader) as http:
        assert http.get("/v1/schedules").status_code == 200
        problem(http.post("/v1/schedules", json=job()), 403, "forbidden")
        problem(http.get("/v1/audit"), 403, "forbidden")
    with api.client(None) as http:
        problem(http.get("/v1/schedules"), 401, "unauthorized")
    with api.client("clockd_000000000000_" + "x" * 43) as http:
        problem(http.get("/v1/schedules"), 401, "unauthorized")
    api.ctl("token", "revoke", reader.split("_")[1])
    # Revocation takes effect within the cache time (clockd.api.auth.CACHE_SECONDS).
    from tests.e2e.conftest import wait_for

    wait_for("the revoked token to be refused", lambda: httpx.get(
        api.url() + "/v1/schedules", headers={"Authorization": f"Bearer {reader}"}
    ).status_code == 401, 15)  # fmt: skip


def test_bad_input_gets_the_right_4xx_and_writes_nothing(api: ApiServer) -> None:
    token = api.token("acme", "admin", "ci")
    with api.client(token) as http:
        raw = {"Content-Type": "application/json"}
        problem(http.post("/v1/schedules", content=b'{"name": "x",', headers=raw), 400, "malformed-json")
        problem(http.post("/v1/schedules", content=b"", headers=raw), 400, "malformed-json")
        problem(http.post("/v1/schedules", content=b"NaN", headers=raw), 400, "malformed-json")
        problem(http.post("/v1/schedules", content=b"\xff\xfe", headers=raw), 400, "malformed-json")
        wrong = http.post("/v1/schedules", content=json.dumps(job()), headers={"Content-Type": "text/plain"})
        problem(wrong, 415, "unsupported-media-type")
        huge = json.dumps(job(env={"PAD": "x" * (2 * 1024 * 1024)}))
        problem(http.post("/v1/schedules", content=huge, headers=raw), 413, "body-too-large")
        deep = '{"name": "x", "labels": ' + "[" * 40 + "]" * 40 + "}"
        problem(http.post("/v1/schedules", content=deep, headers=raw), 422, "too-deep")
        twice = '{"name": "x", "schedule": "0 9 * * *", "command": ["/bin/true"], "schedule": "0 21 * * *"}'
        dup = problem(http.post("/v1/schedules", content=twice, headers=raw), 422, "invalid-input")
        assert dup["detail"].startswith("schedule: given twice")
        unknown = problem(http.post("/v1/schedules", json=job(colour="blue")), 422, "invalid-input")
        assert [e["pointer"] for e in unknown["errors"]] == ["/colour"]
        cron = problem(http.post("/v1/schedules", json=job(schedule="0 25 * * *")), 422, "invalid-input")
        assert cron["errors"][0]["pointer"] == "/schedule" and "25" in cron["detail"]
        zone = problem(http.post("/v1/schedules", json=job(tz="Europe/Pariss")), 422, "invalid-input")
        assert zone["errors"][0]["pointer"] == "/tz" and "Europe/Paris" in zone["detail"]
        problem(http.post("/v1/schedules", json=[1, 2]), 422, "invalid-input")
        problem(http.get("/v1/schedules", params={"limit": "0"}), 422, "invalid-input")
        problem(http.get("/v1/schedules", params={"cursor": "!!"}), 422, "invalid-input")
        typo = problem(http.get("/v1/schedules", params={"limt": "5"}), 422, "invalid-input")
        assert typo["detail"].startswith("limt: not a query parameter of GET /v1/schedules (it takes cursor, label,")
        problem(http.post("/v1/schedules", json=job(), params={"dry": "1"}), 422, "invalid-input")
        problem(http.get("/v1/occurrences", params={"since": "yesterday-ish"}), 422, "invalid-input")
        problem(http.post("/v1/schedules/none/pause", json={"why": 1}), 422, "invalid-input")
        not_allowed = http.delete("/v1/schedules")  # RFC 9110: a 405 says what is allowed
        assert "allowed: GET, HEAD, POST" in problem(not_allowed, 405, "method-not-allowed")["detail"]
        assert not_allowed.headers["allow"] == "GET, HEAD, POST"
        assert http.post("/ui/schedules").headers["allow"] == "GET, HEAD"  # the dashboard's pages too
        problem(http.get("/v1/nothing-here"), 404, "not-found")
        bad_apply = http.post("/v1/apply", json={"jobs": [job("a"), job("b", tz="Mars/Base")]})
        assert problem(bad_apply, 422, "invalid-input")["errors"][0]["pointer"] == "/jobs/1/tz"
        assert http.get("/v1/schedules").json()["items"] == []
        assert [e for e in http.get("/v1/audit").json()["items"] if e["action"] != "token.create"] == []


async def test_the_same_idempotency_key_from_20_concurrent_requests_creates_one_schedule(api: ApiServer) -> None:
    token = api.token("acme", "operator")
    clients = [api.async_client(token) for _ in range(4)]
    try:
        responses = await asyncio.gather(
            *(
                clients[n % 4].post("/v1/schedules", json=job("race"), headers={"Idempotency-Key": "same"})
                for n in range(20)
            )
        )
    finally:
        for client in clients:
            await client.aclose()
    assert {r.status_code for r in responses} == {201}, [r.text for r in responses if r.status_code != 201]
    assert len({r.json()["id"] for r in responses}) == 1
    with api.client(token) as http:
        assert [s["name"] for s in http.get("/v1/schedules").json()["items"]] == ["race"]


async def test_if_match_races_let_exactly_one_writer_win(api: ApiServer) -> None:
    token = api.token("acme", "operator")
    with api.client(token) as http:
        assert http.post("/v1/schedules", json=job("contested")).status_code == 201
    clients = [api.async_client(token) for _ in range(4)]
    try:
        responses = await asyncio.gather(
            *(
                clients[n % 4].put(
                    "/v1/schedules/contested", json=job("contested", timeout=f"{n + 1}m"), headers={"If-Match": '"1"'}
                )
                for n in range(10)
            )
        )
    finally:
        for client in clients:
            await client.aclose()
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] + [412] * 9, [r.text for r in responses]
    with api.client(token) as http:
        assert http.get("/v1/schedules/contested").json()["version"] == 2


def test_pagination_while_schedules_are_added_and_removed_loses_and_repeats_nothing(api: ApiServer) -> None:
    token = api.token("acme", "operator")
    with api.client(token) as http:
        kept = [f"s{n:03d}" for n in range(0, 60, 2)]
        removed = [f"s{n:03d}" for n in range(1, 60, 2)]
        doc = {"jobs": [job(name) for name in kept + removed]}
        assert http.post("/v1/apply", json=doc).status_code == 200
        seen: list[str] = []
        cursor = None
        step = 0
        while True:
            params: dict[str, Any] = {"limit": 7}
            if cursor:
                params["cursor"] = cursor
            page = http.get("/v1/schedules", params=params).json()
            seen += [s["name"] for s in page["items"]]
            # Between pages: remove some not yet seen, add some before and after the cursor.
            for name in removed[step * 3 : step * 3 + 3]:
                assert http.delete(f"/v1/schedules/{name}").status_code == 204
            assert http.post("/v1/schedules", json=job(f"a-new-{step}")).status_code == 201
            assert http.post("/v1/schedules", json=job(f"z-new-{step}")).status_code == 201
            step += 1
            cursor = page["next_cursor"]
            if cursor is None:
                break
    assert len(seen) == len(set(seen)), "an item was repeated"
    assert set(kept) <= set(seen), "an item present throughout was lost"
    assert seen == sorted(seen)


def test_apply_dry_run_and_prune_and_preview(api: ApiServer) -> None:
    token = api.token("acme", "operator")
    with api.client(token) as http:
        plan = http.post("/v1/apply", params={"dry_run": "true"}, json={"jobs": [job("a"), job("b")]}).json()
        assert plan["create"] == ["a", "b"] and plan["dry_run"] is True
        assert http.get("/v1/schedules").json()["items"] == []
        assert http.post("/v1/apply", json={"jobs": [job("a"), job("b")]}).json()["create"] == ["a", "b"]
        pruned = http.post("/v1/apply", params={"prune": "true"}, json={"jobs": [job("a")]}).json()
        assert pruned["delete"] == ["b"] and pruned["unchanged"] == 1
        runs = http.post(
            "/v1/preview",
            json={"schedule": "30 2 * * *", "tz": "Europe/Paris", "after": "2026-03-28T12:00:00Z", "count": 2},
        ).json()["runs"]
        assert runs[0]["at"] == "2026-03-30T00:30:00Z" and "DST gap" in (runs[0]["note"] or "")


def test_names_the_api_cannot_address_are_refused(api: ApiServer) -> None:
    # "x/versions" was created and then read back as schedule x's versions; ".." could be
    # created and never reached (clients collapse dot segments). "team/mail" is fine.
    with api.client(api.token("acme", "admin", "names")) as http:
        for name in ("x/versions", "a/b/pause", "..", ".", "a/../b"):
            for _ in range(2):  # the second create takes the fast path of a known body shape
                refused = problem(http.post("/v1/schedules", json=job(name)), 422, "invalid-input")
                assert refused["errors"][0]["pointer"] == "/name", refused
        assert http.get("/v1/schedules").json()["items"] == []


def test_a_bad_token_expiry_points_at_expires(api: ApiServer) -> None:
    # The pointer was made of the duration's message: "/duration 'soon'".
    with api.client(api.token("acme", "admin", "expiry")) as http:
        refused = problem(http.post("/v1/tokens", json={"role": "readonly", "name": "w2", "expires": "soon"}), 422,
                          "invalid-input")  # fmt: skip
        assert [e["pointer"] for e in refused["errors"]] == ["/expires"]
        assert refused["detail"].startswith("expires: duration 'soon'")


def test_a_schedule_that_never_fires_points_at_its_when_field(api: ApiServer) -> None:
    # An instant in the past came back with no JSON pointer at all.
    with api.client(api.token("acme", "admin", "past")) as http:
        past = {"name": "past", "at": "2020-01-01T00:00:00Z", "command": ["/bin/true"]}
        refused = problem(http.post("/v1/schedules", json=past), 422, "invalid-input")
        assert [e["pointer"] for e in refused["errors"]] == ["/at"]
        assert refused["detail"].startswith("at: 2020-01-01T00:00:00Z is in the past")


def test_a_pause_reason_is_bounded_and_one_clean_line(api: ApiServer) -> None:
    # A 100 KB reason was stored, and shown wherever the schedule is.
    with api.client(api.token("acme", "admin", "reasons")) as http:
        assert http.post("/v1/schedules", json=job("paused")).status_code == 201
        long = problem(http.post("/v1/schedules/paused/pause", json={"reason": "x" * 100_000}), 422, "invalid-input")
        assert long["detail"] == "reason: at most 1000 characters, got 100000"
        problem(http.post("/v1/schedules/paused/pause", json={"reason": "a\x1b[2Jb"}), 422, "invalid-input")
        assert http.get("/v1/schedules/paused").json()["state"] == "active"  # nothing written
        ok = http.post("/v1/schedules/paused/pause", json={"reason": "mail server moves"})
        assert ok.status_code == 200 and ok.json()["state"] == "paused" and ok.json()["reason"] == "mail server moves"
        again = http.post("/v1/schedules/paused/pause", json={"reason": "another reason"}).json()
        assert again["unchanged"] is True and again["reason"] is None  # it echoed a reason it did not store
