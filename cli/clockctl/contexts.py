"""Which clockd server (and token) a command goes through, if any.

First found wins: ``--server``/``--token``, ``CLOCKD_SERVER``/``CLOCKD_TOKEN``, then the
current context of ``~/.config/clockd/client.yaml`` (``$XDG_CONFIG_HOME``); the file's
format is in ``clockctl.remote``. Kept apart from that module because every command
asks this question, and on the store path the answer must cost no HTTP client: yaml is
imported only when the file exists (start-up, issue 20).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from clockd import errors


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path("~/.config").expanduser())
    return Path(base) / "clockd" / "client.yaml"


def resolve(server: str | None, token: str | None, context: str | None) -> tuple[str, str | None] | None:
    """(server, token) to use, or None to use the store."""
    server = server or os.environ.get("CLOCKD_SERVER") or None
    token = token or os.environ.get("CLOCKD_TOKEN") or None
    path = config_path()
    if (server is None or token is None) and (context or path.exists()):
        import yaml

        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise errors.InvalidInput(f"{path}: cannot read the client contexts ({exc})") from None
        name = context or doc.get("current-context")
        contexts = doc.get("contexts") or {}
        if name is not None:
            chosen = contexts.get(name)
            if not isinstance(chosen, dict):
                raise errors.InvalidInput(f"{path}: no context {name!r} (contexts: {', '.join(contexts) or 'none'})")
            server = server or chosen.get("server")
            token = token or chosen.get("token")
    if server is None:
        return None
    server = str(server)
    if not server.startswith(("http://", "https://")):
        # It was taken as a URL and failed as "cannot reach the API" (exit 4): bad input.
        raise errors.InvalidInput(f"server: {server!r} is not a URL: give http://HOST:PORT or https://HOST:PORT")
    return server, None if token is None else str(token)
