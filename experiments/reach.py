"""Servers named by URL, tried before any model loads: a tracking server, an LM server, a chroma server.

A server that is not there, or that fails, would otherwise cost minutes: MLflow's client retries a refused or failing
connection for several minutes before it fails, and a run reaches its LM server only after loading its data, corpus
and indexes. Each check sends a GET with a short timeout to each path the server answers (``PROBES``): for a tracking
server its health check and one read of its API, which fails on a server that is up but broken (its database gone).
A success, or 401 or 403 (a server that wants a key it will be given), passes; any other status (a 404 usually means
a wrong path, such as an API base without /v1; a 5xx a server that fails), a refusal, an unknown host or no answer in
time is a ``ConfigError`` (exit code 2 in the CLI) naming the flag, the URL and what was tried.
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

FAILING = "the server is up but fails: see its log"
"""What a 5xx answer means, whatever the server."""

PROBES = {
    "mlflow": ("/health", "/api/2.0/mlflow/experiments/search?max_results=1"),
    "openai": ("/models",),
    "chroma": ("/api/v2/heartbeat",),
}
"""The paths each kind of server answers without credentials or side effects, after its base URL, tried in order."""


def is_http(url: str | None) -> bool:
    return bool(url) and url.split("://", 1)[0].lower() in ("http", "https")


def check_reachable(url: str, flag: str, kind: str) -> None:
    """``url`` (an ``http(s)://`` base URL) answers a GET of each of its ``PROBES[kind]`` paths within
    ``TIMEOUT_S``."""
    for path in PROBES[kind]:
        _probe(url, url.rstrip("/") + path, flag, kind)


def _probe(url: str, probe: str, flag: str, kind: str) -> None:
    try:
        with urllib.request.urlopen(urllib.request.Request(probe, method="GET"), timeout=TIMEOUT_S):
            return
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return
        hint = FAILING if exc.code >= 500 else HINTS[kind]
        raise ConfigError(f"{flag} {url}: GET {probe} answered HTTP {exc.code} ({exc.reason}); {hint}") from exc
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
