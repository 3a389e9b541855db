"""Servers named by URL, tried before any model loads: a tracking server, an LM server, a chroma server.

A server that is not there would otherwise cost minutes: MLflow's client retries a refused connection for several
minutes before it fails, and a run reaches its LM server only after loading its data, corpus and indexes. Each check
sends one GET with a short timeout to a path the server answers (``PROBES``): a success, or 401 or 403 (a server that
wants a key it will be given), passes; any other status (a 404 usually means a wrong path, such as an API base without
/v1), a refusal, an unknown host or no answer in time is a ``ConfigError`` (exit code 2 in the CLI) naming the flag, the
URL and what was tried.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable

from ragscale.experiments.config import ConfigError

TIMEOUT_S = 4.0
"""How long one probe waits to connect, and again for an answer."""

HINTS = {
    "mlflow": "an MLflow tracking server answers it at its root URL",
    "openai": "an OpenAI-compatible server answers it under its API base, usually ending in /v1",
    "chroma": "a chroma server (`chroma run`) answers it at its root URL",
}

PROBES = {
    "mlflow": "/health",
    "openai": "/models",
    "chroma": "/api/v2/heartbeat",
}
"""The path each kind of server answers without credentials or side effects, after its base URL."""


def is_http(url: str | None) -> bool:
    return bool(url) and url.split("://", 1)[0].lower() in ("http", "https")


def check_reachable(url: str, flag: str, kind: str) -> None:
    """``url`` (an ``http(s)://`` base URL) answers a GET of its ``PROBES[kind]`` path within ``TIMEOUT_S``."""
    probe = url.rstrip("/") + PROBES[kind]
    try:
        with urllib.request.urlopen(urllib.request.Request(probe, method="GET"), timeout=TIMEOUT_S):
            return
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return
        raise ConfigError(f"{flag} {url}: GET {probe} answered HTTP {exc.code} ({exc.reason}); {HINTS[kind]}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ConfigError(
            f"{flag} {url}: no server answered (tried GET {probe}, {TIMEOUT_S:.0f} s timeout: {reason}); "
            f"start it or give another URL"
        ) from exc


def answering(urls: Iterable[str], flag: str, kind: str) -> tuple[list[str], list[ConfigError]]:
    """The URLs of ``urls`` that answer (``check_reachable``; one that is not ``http(s)://`` is kept untried), and
    the error of each that does not: replicas of one server, of which those that answer are enough."""
    live, dead = [], []
    for url in urls:
        try:
            if is_http(url):
                check_reachable(url, flag, kind)
            live.append(url)
        except ConfigError as exc:
            dead.append(exc)
    return live, dead
