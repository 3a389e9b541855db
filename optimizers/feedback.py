"""A metric that says what went wrong, for teleprompters that read text (GEPA's reflection LM).

``with_feedback(metric, program)`` returns DSPy's GEPA feedback metric (``(gold, pred, trace, pred_name,
pred_trace) -> dspy.Prediction(score, feedback)``) around a ragscale score: the feedback names the gold answer
when the answer was wrong, the supporting documents that retrieval missed (by title), and the method's defining
step when it did not happen (the program's ``demonstrates`` and ``behaviour``: IterDRAG asking no follow-up,
Self-RAG not retrieving), so the reflection LM can rewrite an instruction against the cause, not only the score.
"""

from __future__ import annotations

from collections.abc import Callable

import dspy

from ragscale.optimizers.metrics import gold_answers
from ragscale.programs.base import Method


def feedback_of(example: dspy.Example, prediction: dspy.Prediction, score: float, program: Method) -> str:
    """What a reflection LM is told about one prediction (see the module docstring)."""
    notes = []
    if score < 1:
        golds = gold_answers(example)
        gold = f"{golds[0]!r}" if golds else "not given"
        answer = str(prediction.get("answer", ""))
        notes.append(f"The answer {answer!r} is wrong (score {score:.2f}); the gold answer is {gold}.")
    found = {str(p.get("title")) for p in prediction.get("passages") or [] if isinstance(p, dict)}
    missing = [t for t in example.get("supporting_titles") or [] if t not in found]
    if prediction.get("passages") is not None and missing:
        notes.append(f"Retrieval missed the supporting documents titled: {', '.join(missing)}.")
    if not program.demonstrates(example, prediction):
        shown = program.behaviour(example.question, prediction)
        described = ", ".join(f"{name} {value:g}" for name, value in shown.items())
        notes.append(f"The method's defining step did not happen as it should ({described}).")
    return " ".join(notes) or "The answer is right."


def with_feedback(metric: Callable[..., float], program: Method) -> Callable[..., dspy.Prediction]:
    """``metric`` as a GEPA feedback metric for ``program`` (see the module docstring)."""

    def scored(gold, pred, trace=None, pred_name=None, pred_trace=None) -> dspy.Prediction:
        score = float(metric(gold, pred, trace))
        return dspy.Prediction(score=score, feedback=feedback_of(gold, pred, score, program))

    scored.__name__ = getattr(metric, "__name__", "metric")
    return scored
