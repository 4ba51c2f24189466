"""The HTTP/JSON control plane (``clockd run --mode api``), under ``/v1``.

Layout: ``app`` (the Starlette app and its error handling), ``auth`` (bearer tokens and
THE tenant check), ``problems`` (RFC 9457 errors, one table), ``body`` (JSON bodies with
size, depth and time limits), ``views`` (JSON forms; the one call into the schedule-file
validator), ``routes/`` (the endpoints, declared once for the app and the OpenAPI
document), ``openapi``, ``server`` (uvicorn inside the daemon's loop).

Invariants:

* stateless: any number of api processes may serve one store; what they cache
  (verified tokens for ``auth.CACHE_SECONDS``, admission buckets) may be lost any time;
* a token acts only inside its tenant; another tenant's resources answer 404
  (``clockd.api.auth``);
* every write goes through ``clockd.services.ops`` (the use cases ``clockctl`` runs) and is
  recorded in the audit log after it succeeds; a 4xx writes nothing;
* bad input is a problem document with the CLI's one-line message, never a 500;
* the API uses the store port only (an import-linter contract keeps it so).
"""
