"""The servers a sweep's configurations are spread over: several replicas of one model, named by a comma-separated
``api_base``, those of them that answer when it starts, and the one each configuration takes when it starts (see
``run.py``'s module docstring)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.parts import load_lm_for
from ragscale.experiments.reach import answering

log = logging.getLogger(__name__)


def server_urls(api_base: str | None) -> list[str]:
    """The URLs of a comma-separated ``api_base``, sorted, each once."""
    return sorted({url.strip() for url in (api_base or "").split(",") if url.strip()})


def shared_api_base(base: RunConfig) -> RunConfig:
    """``base`` with the ``api_base`` every configuration carries and is keyed by: one URL as given, several sorted
    and joined by commas (see ``run.py``'s module docstring). Several URLs need a server LM (``openai/<model>``)."""
    urls = server_urls(base.api_base)
    if len(urls) <= 1:
        return base
    if not base.lm.startswith("openai/"):
        raise ConfigError(
            f"--api-base names {len(urls)} servers ({', '.join(urls)}) but --lm {base.lm!r} is a local model; "
            "several servers are replicas of an openai/<model> --lm"
        )
    return replace(base, api_base=",".join(urls))


def load_replicas(base: RunConfig, report: Callable[[str], None] = log.warning) -> list:
    """One LM per server of ``base.api_base`` that answers (``live_replicas``), each loaded once; the one LM of
    ``base`` when it names one server or none (a local model)."""
    urls = server_urls(base.api_base)
    if len(urls) <= 1:
        return [load_lm_for(base)]
    return [load_lm_for(replace(base, api_base=url)) for url in live_replicas(urls, report)]


def live_replicas(urls: Sequence[str], report: Callable[[str], None]) -> list[str]:
    """The replicas of ``urls`` that answer now (``reach.answering``); each that does not is reported in one line
    naming it and left out of the sweep. None answering is the first one's ``ConfigError`` (exit 2 in the CLI), as
    for one server."""
    live, dead = answering(urls, "--api-base", "openai")
    if not live:
        raise dead[0]
    for error in dead:
        report(f"warning: {error}; the sweep leaves it out and runs on {', '.join(live)}")
    return live


class Replicas:
    """The LMs the configurations are spread over: a run takes the one with the fewest runs on it (the first of
    those), and gives it back when it ends. A configuration that failed on one takes another to be tried again
    (``take(besides=...)``)."""

    def __init__(self, lms: Sequence):
        self.lms, self.busy, self._lock = list(lms), [0] * len(lms), threading.Lock()

    def url(self, index: int) -> str | None:
        """The server of replica ``index``; None for a local model."""
        return getattr(self.lms[index], "kwargs", {}).get("api_base")

    def name(self, index: int) -> str:
        return self.url(index) or f"LM {index + 1} of {len(self.lms)}"

    @contextmanager
    def take(self, besides: int | None = None) -> Iterator[int]:
        """The least busy replica, other than ``besides`` (one a configuration just failed on), held until the
        block ends."""
        with self._lock:
            index = min((i for i in range(len(self.lms)) if i != besides), key=self.busy.__getitem__)
            self.busy[index] += 1
        try:
            yield index
        finally:
            with self._lock:
                self.busy[index] -= 1
