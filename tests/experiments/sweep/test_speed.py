"""The sweep's speed model: prefill with its squared (attention) term, and decode, fitted on finished runs."""

from __future__ import annotations

import pytest

from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.sweep.speed import Speed, speed_from_runs

TRUE = Speed(300.0, 30.0, "stated", quadratic_s=3e-7)


def ledger_row(tokens: float, output: float, calls: float = 1.0, n: int = 100) -> dict:
    seconds = TRUE.seconds(tokens, output, calls)
    return {
        "lm": "lm",
        "n": n,
        EFFECTIVE_CONTEXT: tokens,
        "output_tokens_per_question": output,
        "lm_calls_per_question": calls,
        "eval_s": n * seconds,
    }


def test_a_calls_squared_term_is_fitted_beside_the_rates_and_splits_over_its_calls():
    rows = [ledger_row(t, o, c) for t, o, c in [(200, 4, 1), (700, 6, 1), (1400, 3, 1), (2800, 5, 1), (8000, 4, 1),
                                                (3000, 40, 3), (6000, 60, 5)]]  # fmt: skip
    fitted = speed_from_runs(rows, "lm")
    assert fitted.prefill_tok_s == pytest.approx(300, rel=0.01)
    assert fitted.quadratic_s == pytest.approx(3e-7, rel=0.01)
    assert fitted.decode_tok_s == pytest.approx(30, rel=0.01)
    # one 8,000-token call costs more than the same tokens in four calls: attention is per call
    assert fitted.seconds(8000, 0, calls=4) < fitted.seconds(8000, 0, calls=1)
    assert "s/token² per call" in fitted.describe()


def test_without_three_usable_runs_there_is_no_fit():
    assert speed_from_runs([ledger_row(200, 4), ledger_row(700, 6)], "lm") is None
    assert speed_from_runs([ledger_row(t, 4) for t in (200, 700, 1400)], "another lm") is None


def test_a_decode_rate_folded_into_prefill_is_not_printed_as_infinite():
    folded = Speed(500.0, float("inf"), "9 earlier runs, outputs folded into prefill", quadratic_s=2e-7)
    assert "decode" not in folded.describe() and "inf" not in folded.describe()
    assert "outputs folded into prefill" in folded.describe()
    assert "decode 30 tok/s" in TRUE.describe()
