"""The web dashboard, served by the api mode at ``/ui`` (issue 17).

Server-rendered HTML (Jinja2, autoescaped) over the same use cases as ``clockctl``
and the HTTP API; a little JavaScript only where a page needs it (none today),
every asset served from this package (no CDN, no network at run time).

Invariants:

* **The tenant comes from the token only.** A page never takes a tenant from the
  URL or a form; every lookup is by (viewer's tenant, name) and an occurrence is
  shown only when its schedule belongs to the viewer's tenant. Anything else
  answers 404, exactly as for a name that does not exist (``pages.Dashboard._own``
  is the tenant check for occurrences).
* **Sessions**: the API token is kept in an ``HttpOnly``, ``SameSite=Strict``
  cookie scoped to ``/ui`` (``Secure`` when served over TLS). Every form that
  changes state carries a CSRF token derived from the session token
  (HMAC-SHA256), so api processes need no shared session state; the sign-in form
  uses a double-submit cookie.
* **Read-only tokens see no buttons**, and the POST routes refuse them (403).
* Every action (pause with a required reason, resume, run now, replay, drop)
  asks for confirmation first and then shows the new state.
"""
