"""The OpenAPI 3.1 document, built from the route table (:data:`clockd.api.routes.ENDPOINTS`).

Served at ``/v1/openapi.json`` and committed as ``docs/openapi.json`` (``python -m
clockd.api.openapi > docs/openapi.json``, or ``make openapi``); a test fails when they
differ or when the app serves a route the document does not describe. The job schema
is the schedule-file schema itself (:func:`clockd.formats.schedfile.json_schema`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from clockd import __version__
from clockd.api.problems import MEDIA_TYPE, TYPE_PREFIX, TYPES
from clockd.api.routes import Endpoint, all_endpoints
from clockd.formats.schedfile import json_schema

_OBJECT: dict[str, Any] = {"type": "object"}


def _schemas() -> dict[str, Any]:
    file_schema = json_schema()
    job = _refs(file_schema["$defs"]["job"])
    schedule_file = {k: v for k, v in file_schema.items() if k not in ("$schema", "$defs")}
    schedule_file = _refs(schedule_file)
    instant = {"type": "string", "format": "date-time"}
    run = {
        "type": "object",
        "properties": {
            "at": instant,
            "local": {"type": "string", "description": "the instant in the schedule's zone, with its offset"},
            "note": {"type": ["string", "null"], "description": "DST: a repeated hour, or times a gap skipped"},
        },
    }
    maybe_instant = {"type": ["string", "null"], "format": "date-time"}
    # Every field clockd.api.views.occurrence_view writes (it listed 6 of 16).
    occurrence = {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "also the run's idempotency key (CLOCKD_OCCURRENCE_ID)"},
            "schedule": {"type": "string"},
            "schedule_id": {"type": "string"},
            "version": {"type": "integer", "description": "the schedule version it runs under"},
            "scheduled_for": instant,
            "available_at": {**instant, "description": "when it may start (its window's offset, a retry's backoff)"},
            "state": {"type": "string"},
            "attempts": {"type": "integer"},
            "queue": {"type": "string"},
            "manual": {"type": "boolean", "description": "a run-now, not a planned instant"},
            "enqueued_at": maybe_instant,
            "started_at": {**maybe_instant, "description": "its first attempt's start"},
            "finished_at": maybe_instant,
            "exit_code": {"type": ["integer", "null"]},
            "reason": {"type": ["string", "null"]},
            "last_error": {"type": ["string", "null"]},
        },
    }
    schedule = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "id": {"type": "string"},
            "tenant": {"type": "string"},
            "version": {"type": "integer", "description": "also the ETag; send it back in If-Match"},
            "state": {"type": "string", "enum": ["active", "paused"]},
            "job": {"$ref": "#/components/schemas/Job"},
            "next_run_at": {
                "type": ["string", "null"],
                "format": "date-time",
                "description": "the next instant the scheduler plans (next_runs lists the runs to come); "
                "null while paused and once a one-time schedule has run",
            },
            "managed_by": {
                "type": ["string", "null"],
                "description": "apply when apply created the schedule (and may update or prune it)",
            },
            "created_at": instant,
            "updated_at": instant,
            "paused_at": maybe_instant,
            "canceled": {"type": "integer", "description": "pause, PUT, PATCH: pending runs the change canceled"},
            "reason": {"type": ["string", "null"], "description": "pause: the reason given"},
            "next_runs": {"type": "array", "items": run},
            "unchanged": {
                "type": "boolean",
                "description": "pause/resume: true when it was paused (active) already and nothing was written",
            },
            "recent": {"type": "array", "items": {"$ref": "#/components/schemas/Occurrence"}},
            "replanned": {
                "type": "array",
                "description": "PUT/PATCH: the pending runs the new version took over (occurrence_id null: "
                "dropped, the new version does not fire then)",
                "items": {
                    "type": "object",
                    "properties": {
                        "scheduled_for": instant,
                        "version": {"type": "integer"},
                        "replaces": {"type": "string"},
                        "occurrence_id": {"type": ["string", "null"]},
                        "state": {"type": ["string", "null"]},
                    },
                },
            },
            "summary": {
                "type": ["object", "null"],
                "description": "its runs as clockctl list shows them (GET one; a list with ?summary=true)",
                "properties": {
                    "next_start": {"type": ["string", "null"], "format": "date-time"},
                    "last_scheduled_for": {"type": ["string", "null"], "format": "date-time"},
                    "last_started_at": {"type": ["string", "null"], "format": "date-time"},
                    "last_state": {"type": ["string", "null"]},
                    "last_exit_code": {"type": ["integer", "null"]},
                },
            },
        },
    }

    def paged(item: str) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}},
                "next_cursor": {"type": ["string", "null"], "description": "pass as ?cursor= for the next page"},
            },
        }

    return {
        "Job": job,
        "ScheduleFile": schedule_file,
        "Schedule": schedule,
        "SchedulePage": paged("Schedule"),
        "Occurrence": occurrence,
        "OccurrencePage": paged("Occurrence"),
        "OccurrenceList": paged("Occurrence"),
        "AuditEntry": _OBJECT,
        "AuditPage": paged("AuditEntry"),
        "Logs": _OBJECT,
        "Explanation": _OBJECT,
        "Reconcile": _OBJECT,
        "VersionList": {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "version": {"type": "integer"},
                            "valid_from": instant,
                            "valid_to": {"type": ["string", "null"], "format": "date-time"},
                            "job": {"$ref": "#/components/schemas/Job"},
                            "state": {"type": "string"},
                        },
                    },
                }
            },
        },
        "Status": _OBJECT,
        "ApplyResult": _OBJECT,
        "Preview": {"type": "object", "properties": {"runs": {"type": "array", "items": run}}},
        "PreviewRequest": {
            "type": "object",
            "description": "schedule / at / every and tz as in a job; count (1-1000, default 10); after",
        },
        "PauseRequest": {"type": "object", "properties": {"reason": {"type": "string"}}},
        "ResumeRequest": {"type": "object", "properties": {"from": {"enum": ["now", "paused-at"]}}},
        "TokenRequest": {
            "type": "object",
            "properties": {
                "tenant": {"type": "string"},
                "role": {"enum": ["readonly", "operator", "admin", "cluster-admin"]},
                "name": {"type": "string"},
                "expires": {"type": "string", "description": "a duration such as 90d"},
            },
        },
        "Token": _OBJECT,
        "TenantLimits": _OBJECT,
        "Problem": {
            "type": "object",
            "description": "RFC 9457 problem details",
            "properties": {
                "type": {"type": "string", "enum": [TYPE_PREFIX + slug for slug in TYPES]},
                "title": {"type": "string"},
                "status": {"type": "integer"},
                "detail": {"type": "string", "description": "the one-line message clockctl prints"},
                "errors": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"pointer": {"type": "string"}, "detail": {"type": "string"}},
                    },
                },
            },
        },
    }


def _refs(node: Any) -> Any:
    """The schedule-file schema's internal references, pointed at the components."""
    if isinstance(node, dict):
        return {
            k: ("#/components/schemas/Job" if k == "$ref" and v == "#/$defs/job" else _refs(v)) for k, v in node.items()
        }
    if isinstance(node, list):
        return [_refs(v) for v in node]
    return node


def _operation(ep: Endpoint) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{ep.handler.__module__.rsplit('.', 1)[-1]}_{ep.handler.__name__.rstrip('_')}",
        "summary": ep.summary,
        "description": f"Role: {ep.role.value} or higher."
        + (" A write: admitted per tenant (429 + Retry-After) and recorded in the audit log." if ep.write else ""),
    }
    if ep.params:
        op["parameters"] = [
            {"name": p.name, "in": p.where, "required": p.required or p.where == "path", "schema": dict(p.schema)}
            | ({"description": p.description} if p.description else {})
            for p in ep.params
        ]
    if ep.body:
        body = {"schema": {"$ref": f"#/components/schemas/{ep.body}"}}
        if ep.method == "PATCH":
            # A merge patch: any of the Job's fields, null removes one (the Job schema's
            # required name does not apply); the client sends application/merge-patch+json.
            body = {"schema": {"type": "object", "description": f"RFC 7386 merge patch of a {ep.body}"}}
        op["requestBody"] = {
            "required": ep.method not in ("POST",) or ep.body not in ("PauseRequest", "ResumeRequest"),
            "content": dict.fromkeys(("application/merge-patch+json", "application/json"), body)
            if ep.method == "PATCH"
            else {"application/json": body},
        }
    ok: dict[str, Any] = {"description": "OK"}
    if ep.response:
        ok["content"] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{ep.response}"}}}
    problem = {"content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    op["responses"] = {str(ep.ok): ok} | {
        "default": {"description": "an RFC 9457 problem (see components/schemas/Problem)", **problem}
    }
    return op


def document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for ep in all_endpoints():
        paths.setdefault(ep.path, {})[ep.method.lower()] = _operation(ep)
    paths["/v1/openapi.json"] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "security": [],
            "responses": {"200": {"description": "OK"}},
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "clockd API",
            "version": __version__,
            "description": "Schedules, occurrences and dead letters of one tenant. Authenticate with "
            "Authorization: Bearer <token> (clockctl token create). Errors are application/problem+json.",
        },
        "servers": [{"url": "http://127.0.0.1:8470"}],
        "security": [{"bearer": []}],
        "paths": dict(sorted(paths.items())),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": _schemas(),
        },
    }


def text() -> str:
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(text())
