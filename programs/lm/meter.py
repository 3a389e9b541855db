"""Token accounting: every LM call inside ``with meter() as m:`` is recorded on ``m``.

The active meters ride in DSPy's settings overrides (``dspy.context``), so they follow a call wherever DSPy's
settings do: into the threads of ``dspy.Parallel``, ``dspy.Evaluate`` and the teleprompters that use them (GEPA's
evaluations included), and into any ``contextvars.copy_context().run``. A thread started without either (a bare
``ThreadPoolExecutor``) is not counted. Inside a ``meter()`` block, as inside any ``dspy.context``, a
``dspy.configure`` call is hidden by the block's overrides until the block ends.

The hook is :class:`MeteredLM`, the ``dspy.LM`` subclass that :func:`ragscale.programs.lm.load_lm` returns for
local and server models alike. DSPy's ``finalize`` step hands each call's history entry to ``update_history`` in
the caller's thread (also for cache hits, and also when a batched engine generated the text in its worker
thread); ``MeteredLM`` captures that entry and times the whole call. Cache hits are recorded with
``cached=True`` and the token counts stored with the cached response, so a rerun reports the same effective
context. DSPy's own usage tracking (``dspy.settings.track_usage``) is untouched and counts fresh calls only.

A call is seen only when DSPy history is on (``dspy.settings.disable_history`` is False, the default); with it
off, the meter still counts the call and its latency, with zero tokens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import dspy

_METERS_KEY = "ragscale_meters"  # the dspy.settings override holding the active meters
_CAPTURED: ContextVar[list | None] = ContextVar("ragscale_captured_entries", default=None)


@dataclass(frozen=True)
class CallRecord:
    """One LM call: its token counts, wall time in the caller, and whether DSPy's cache served it."""

    model: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    cached: bool


@dataclass
class UsageMeter:
    """Totals over the calls recorded while the meter was active."""

    records: list[CallRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: CallRecord) -> None:
        with self._lock:
            self.records.append(record)

    @property
    def calls(self) -> int:
        return len(self.records)

    @property
    def input_tokens(self) -> int:
        return sum(r.input_tokens for r in self.records)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.records)

    @property
    def latency_s(self) -> float:
        return sum(r.latency_s for r in self.records)


@contextmanager
def meter() -> Iterator[UsageMeter]:
    """Count the LM calls made in this block, in this thread and the threads that inherit its DSPy settings,
    until it exits. Meters nest."""
    usage = UsageMeter()
    with dspy.context(**{_METERS_KEY: (*_active(), usage)}):
        yield usage


def _active() -> tuple[UsageMeter, ...]:
    return tuple(dspy.settings.get(_METERS_KEY) or ())


def _usage_of(response: Any) -> dict:
    usage = response.get("usage") if isinstance(response, dict) else getattr(response, "usage", None)
    if usage is None:
        return {}
    if hasattr(usage, "input_tokens"):  # a dspy.lm15 Usage
        return {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens}
    if isinstance(usage, dict):
        return usage
    return {
        "prompt_tokens": getattr(usage, "prompt_tokens", 0),
        "completion_tokens": getattr(usage, "completion_tokens", 0),
    }


def _record(model: str, entry: dict | None, latency: float) -> CallRecord:
    usage = (entry or {}).get("usage") or {}
    # DSPy records an empty usage for a cache hit; the cached response still carries the original counts.
    cached = entry is not None and not usage
    if cached:
        usage = _usage_of(entry.get("response"))
    return CallRecord(
        model,
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        latency,
        cached and bool(usage),
    )


class MeteredLM(dspy.LM):
    """A ``dspy.LM`` that reports every call to the active :func:`meter` (see the module docstring).

    ``context_window`` states the model's context length for servers, where it cannot be read from weights.
    """

    def __init__(self, model: str, *, context_window: int | None = None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.context_window = context_window

    def update_history(self, entry: dict) -> None:
        super().update_history(entry)
        captured = _CAPTURED.get()
        if captured is not None:
            captured.append(entry)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        meters = _active()
        if not meters:
            return super().__call__(*args, **kwargs)
        captured: list = []
        token, start = _CAPTURED.set(captured), time.perf_counter()
        try:
            return super().__call__(*args, **kwargs)
        finally:
            _CAPTURED.reset(token)
            self._report(meters, captured, time.perf_counter() - start)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        meters = _active()
        if not meters:
            return await super().acall(*args, **kwargs)
        captured: list = []
        token, start = _CAPTURED.set(captured), time.perf_counter()
        try:
            return await super().acall(*args, **kwargs)
        finally:
            _CAPTURED.reset(token)
            self._report(meters, captured, time.perf_counter() - start)

    def _report(self, meters: tuple[UsageMeter, ...], captured: list, latency: float) -> None:
        record = _record(self.model, captured[-1] if captured else None, latency)
        for usage in meters:
            usage.add(record)
