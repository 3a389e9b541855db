"""The tokens a sweep's plan counts as held by a prefix cache, against those the engine's prefix cache serves, and
the speed model that leaves them out of a configuration's time."""

from __future__ import annotations

import dspy
import pytest

from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.sweep.estimate import ContextEstimator
from ragscale.experiments.sweep.grid import Point
from ragscale.experiments.sweep.speed import REUSED, Speed, speed_from_runs


@pytest.mark.slow
def test_the_tokens_the_plan_counts_reused_are_those_the_engines_prefix_cache_serves(shared_datasets):
    """DRAG with two demonstrations, each carrying its documents: SmolLM2-135M answers four HotpotQA questions one
    after another, after a fifth (the estimate counts each question after another, the first after the last), and
    the share of their prompt tokens the engine did not compute is the estimate's."""
    from ragscale.data import load_split
    from ragscale.programs.lm import load_lm, make_adapter
    from ragscale.programs.retrieval import BM25Retriever

    train = load_split("hotpotqa", "train", shared_datasets)[:8]
    *dev, other = load_split("hotpotqa", "dev", shared_datasets)[:5]
    paragraphs = {(p["title"], p["text"]): p for ex in [*train, *dev, other] for p in ex.paragraphs}
    corpus = [{"id": str(i), "title": t, "text": x} for i, (t, x) in enumerate(paragraphs)]
    lm = load_lm("smollm2-135m", cache=False, weights="fp32")
    adapter = make_adapter("field")
    estimator = ContextEstimator(lm, adapter, train, dev, retriever=BM25Retriever(corpus))
    drag, rag = Point("drag", 2, 2), Point("rag", 2, 0)
    estimate = estimator.estimate(drag)
    program = estimator.program(drag)
    engine = lm.engine
    with dspy.context(lm=lm, adapter=adapter):
        program(question=other.question)  # the cache then holds what every question shares, as at a run's start
        prompt, computed = engine.prompt_tokens, engine.computed_tokens
        for example in dev:
            program(question=example.question)
    served = 1 - (engine.computed_tokens - computed) / (engine.prompt_tokens - prompt)
    assert served > 0.5  # the two demonstrations, with their documents, are most of each prompt
    assert served == pytest.approx(estimate.reused / estimate.tokens, abs=0.05)
    # RAG's demonstrations are none here: only the system turn is the same from question to question
    rag_estimate = estimator.estimate(rag)
    assert rag_estimate.reused < 0.2 * rag_estimate.tokens


def test_a_rows_reused_tokens_take_no_time_so_cached_and_uncached_runs_fit_one_speed():
    true = Speed(300.0, 30.0, "stated", quadratic_s=3e-7)
    rows = []
    for tokens, reused in [(200, 0), (700, 0), (1400, 1000), (2800, 0), (8000, 6000), (5000, 4000), (3000, 0)]:
        seconds = true.seconds(tokens, 5, 1, reused)
        rows.append({"lm": "lm", "n": 100, EFFECTIVE_CONTEXT: tokens, REUSED: reused,
                     "output_tokens_per_question": 5, "lm_calls_per_question": 1, "eval_s": 100 * seconds})  # fmt: skip
    fitted = speed_from_runs(rows, "lm")
    assert fitted.prefill_tok_s == pytest.approx(300, rel=0.01)
    assert fitted.quadratic_s == pytest.approx(3e-7, rel=0.01)
    # the same rows read as if every token were computed fit another speed, wrong for both kinds of run
    blind = speed_from_runs([{k: v for k, v in row.items() if k != REUSED} for row in rows], "lm")
    assert abs(blind.seconds(8000, 5, 1) - true.seconds(8000, 5, 1)) > 0.1 * true.seconds(8000, 5, 1)
    # what a cache holds is not computed again, but the tokens after it attend to it
    assert true.seconds(2000, 5, 1) < true.seconds(8000, 5, 1, 6000) < true.seconds(8000, 5, 1)
