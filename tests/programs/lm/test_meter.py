"""The usage meter: every LM call inside its block, with its tokens, cache hits included."""

import dspy
import pytest

from ragscale.programs.lm import chat, load_lm, meter

pytestmark = pytest.mark.slow


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_meter_counts_calls_tokens_and_cache_hits(engine):
    cached_lm = load_lm("smollm2-135m", max_tokens=8, cache=True, weights="fp32")
    assert cached_lm.engine is engine  # the loaded model is shared, not loaded twice
    question = ask("Context: Ada lives in Oslo.\nQuestion: Where does Ada live?")
    with meter() as usage:
        first = chat(cached_lm, question)
        again = chat(cached_lm, question)
    assert first == again
    assert usage.calls == 2
    assert [r.cached for r in usage.records] == [False, True]
    assert usage.records[0].input_tokens == usage.records[1].input_tokens > 10
    assert usage.output_tokens == 2 * usage.records[0].output_tokens > 0
    assert usage.latency_s > 0


def test_meter_sees_only_calls_inside_its_block_and_dspy_usage_tracking_still_works(lm):
    chat(lm, ask("Say hi."))
    with meter() as usage, dspy.context(lm=lm), dspy.track_usage() as tracker:
        chat(lm, ask("Say hello."))
    assert usage.calls == 1
    totals = tracker.get_total_tokens()[lm.model]
    assert totals["prompt_tokens"] == usage.input_tokens
    assert totals["completion_tokens"] == usage.output_tokens
