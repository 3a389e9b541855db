"""How fast the LM reads and writes: the rates the sweep's plan turns token estimates into minutes with.

``speed_from_runs`` fits prefill and decode rates on the sweep's earlier runs of the same LM (seconds per question
against input and output tokens per question); without three usable runs, ``measure_speed`` times two tiny calls.

A prompt's prefill is not linear in its length: each token attends to all before it, so a call of n tokens takes
n/rate + q n² seconds, and at several thousand tokens the second term is a large share. ``speed_from_runs`` fits q
beside the rates, with a question's calls taken as equally long (its effective context over its LM calls).

Nor is every prompt token computed: an engine with a prefix cache (ragscale's, vLLM's, SGLang's) keeps the keys and
values of a prompt's start, so the p tokens a call shares with an earlier one (the system turn, the demonstrations,
which DRAG's carry their documents in) cost nothing, and the n - p after them cost (n - p)/rate + q (n² - p²).
Fitted on the effective context alone, the rates of runs with many demonstrations and runs with none would be
averaged into a time wrong for both; a row's ``REUSED`` tokens per question (estimated by the plan) take them out.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.sweep.stopping import TimeLimitError
from ragscale.programs.lm import chat, meter

REUSED = "reused_tokens_per_question"
"""A row's input tokens per question that a prefix cache holds: not computed, so not timed by the rates."""


@dataclass(frozen=True)
class Speed:
    prefill_tok_s: float
    decode_tok_s: float
    source: str
    quadratic_s: float = 0.0  # q: seconds per squared token of one call's prompt (its attention)

    def seconds(self, input_tokens: float, output_tokens: float, calls: float = 1.0, reused: float = 0.0) -> float:
        """A question's seconds: ``input_tokens`` in ``calls`` calls of equal length, ``reused`` of them held by a
        prefix cache (as long a start of each call), ``output_tokens`` written."""
        quadratic = self.quadratic_s * (input_tokens**2 - reused**2) / max(calls, 1.0)
        return (input_tokens - reused) / self.prefill_tok_s + quadratic + output_tokens / self.decode_tok_s

    def describe(self) -> str:
        """The rates as the plan prints them; a decode rate folded into prefill (infinite) is left out, the source
        saying so."""
        square = f" + {self.quadratic_s:.3g} s/token² per call" if self.quadratic_s else ""
        decode = f", decode {self.decode_tok_s:g} tok/s" if math.isfinite(self.decode_tok_s) else ""
        return f"prefill {self.prefill_tok_s:g} tok/s{square}{decode} ({self.source})"


def measure_speed(lm, text: str, *, deadline: float | None = None) -> Speed:
    """Prefill and decode rates from two tiny timed calls (cache off), after a warm-up that decodes: a ~300-token
    prompt with 1 output token, then a short prompt with up to 24 output tokens.

    With ``deadline`` (a ``time.monotonic`` time: the sweep's time limit) the calls are made in a thread of their own
    and given up at it (``TimeLimitError``): a server that never answers would otherwise hold the sweep past its
    limit until each call gave up (``--request-timeout``). The thread left waiting ends with its call."""
    if deadline is None:
        return _timed_calls(lm, text)
    pool = ThreadPoolExecutor(1, thread_name_prefix="ragscale-speed")
    future = pool.submit(contextvars.copy_context().run, _timed_calls, lm, text)
    pool.shutdown(wait=False)
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        if future.done():  # the call's own timeout, not the time limit
            raise
        raise TimeLimitError("the time limit passed while the LM's speed was timed: it has not answered") from None


def _timed_calls(lm, text: str) -> Speed:
    fresh = lm.copy(cache=False) if hasattr(lm, "copy") else lm
    words = " ".join((text or "the quick brown fox jumps over the lazy dog ").split()[:220])
    stamp = f"[{time.time_ns()}] "  # a new prompt each time: no prefix cache either
    # warm-up: a few decoded tokens, so that the engine's decode step is compiled before it is timed
    chat(fresh, [{"role": "user", "content": stamp + "hi"}], max_tokens=4)
    with meter() as usage:
        start = time.perf_counter()
        chat(fresh, [{"role": "user", "content": stamp + words}], max_tokens=1)
        prefill_s = time.perf_counter() - start
    prefill = max(usage.input_tokens, 1) / max(prefill_s, 1e-6)
    with meter() as usage:
        start = time.perf_counter()
        chat(fresh, [{"role": "user", "content": stamp + "Write a long story about a cat."}], max_tokens=24)
        total_s = time.perf_counter() - start
    decode_s = max(total_s - usage.input_tokens / prefill, 1e-3)
    decode = max(usage.output_tokens, 1) / decode_s
    return Speed(round(prefill, 1), round(decode, 2), "timed calls")


def speed_from_runs(rows: Iterable[Mapping[str, Any]], lm_name: str) -> Speed | None:
    """Rates fitted (least squares on seconds per question) on earlier ledger rows of this LM: prefill, its squared
    term and decode; the first of those models, fewer terms each, whose every coefficient comes out positive. A
    row's ``REUSED`` tokens (0 without) are left out of the computed ones (see the module docstring)."""

    def answered(row: Mapping[str, Any]) -> int:  # the questions its eval_s timed (a resumed run's carried ones not)
        return int(row.get("n") or 0) - int(row.get("resumed") or 0)

    usable = [
        r
        for r in rows
        if r.get("lm") == lm_name and answered(r) > 0 and r.get(EFFECTIVE_CONTEXT) is not None
        and (r.get("eval_s") or 0) >= 0.2 * answered(r)  # faster than that: served from the LM cache, not a timing
        and not r.get("carried")  # its mean context counts the carried questions, the cheap ones, untimed
    ]  # fmt: skip
    if len(usable) < 3:
        return None
    tokens = np.asarray([r[EFFECTIVE_CONTEXT] for r in usable], dtype=float)
    reused = np.asarray([r.get(REUSED) or 0.0 for r in usable], dtype=float)
    calls = np.asarray([max(r.get("lm_calls_per_question") or 1.0, 1.0) for r in usable])
    columns = {
        "prefill": tokens - reused,
        "squared": (tokens**2 - reused**2) / calls,
        "decode": np.asarray([r.get("output_tokens_per_question") or 0.0 for r in usable]),
    }
    target = np.asarray([r["eval_s"] / answered(r) for r in usable])
    source = f"{len(usable)} earlier runs"
    for terms in (("prefill", "squared", "decode"), ("prefill", "squared"), ("prefill", "decode")):
        coef, *_ = np.linalg.lstsq(np.stack([columns[t] for t in terms], axis=1), target, rcond=None)
        if (coef > 0).all():
            fitted = dict(zip(terms, coef.tolist(), strict=True))
            decode = fitted.get("decode")
            return Speed(
                round(1 / fitted["prefill"], 1),
                round(1 / decode, 2) if decode else float("inf"),
                source + ("" if decode else ", outputs folded into prefill"),
                quadratic_s=fitted.get("squared", 0.0),
            )
    rate = float((tokens - reused).sum() / target.sum())  # one rate for all computed tokens, outputs folded in
    return Speed(round(rate, 1), float("inf"), f"{source}, one rate, outputs folded into prefill")
