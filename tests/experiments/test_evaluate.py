"""Evaluating a program: each question in its own meter and worker thread, failed questions counted as 0."""

import dspy
import pytest
from doubles import SCRIPT, scripted_lm

from ragscale.data import load_split
from ragscale.experiments.config import RunConfig
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT, evaluate, summarize
from ragscale.programs import ClosedBook


class FailsOn(ClosedBook):
    """Closed-book, except that it raises on the questions that contain ``poison``."""

    def __init__(self, poison: str):
        super().__init__()
        self.poison = poison

    def forward(self, question: str) -> dspy.Prediction:
        if self.poison in question:
            raise RuntimeError(f"cannot answer {question!r}")
        return super().forward(question)


def test_worker_threads_see_the_lm_set_with_dspy_context_and_meter_their_own_calls(tmp_path, data_dir):
    dev = load_split("hotpotqa", "dev", data_dir)
    with dspy.context(lm=scripted_lm(SCRIPT), adapter=dspy.ChatAdapter()):
        records = evaluate(ClosedBook(), dev, threads=3, records_path=tmp_path / "p.jsonl", progress=False)
    assert [r["id"] for r in records] == ["q4", "q5", "q6"]
    assert [r["prediction"] for r in records] == ["1788", "Teodor Haskel", "the Mirren Sea"]
    assert [r["lm_calls"] for r in records] == [1, 1, 1]
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 3


def test_failed_questions_count_as_zero_in_the_means(tmp_path, data_dir):
    # q4 and q5 are answered right, q6 wrong, and q3 raises: 2 right of 4 (of 3, had the failure been left out).
    questions = [*load_split("hotpotqa", "dev", data_dir), load_split("hotpotqa", "train", data_dir)[3]]
    with dspy.context(lm=scripted_lm(SCRIPT), adapter=dspy.ChatAdapter()):
        records = evaluate(FailsOn("Pellucid"), questions, threads=2, records_path=tmp_path / "p.jsonl", progress=False)
    failed = next(r for r in records if r["error"] is not None)
    assert failed["id"] == "q3" and failed["error"].startswith("RuntimeError: cannot answer")
    assert (failed["em"], failed["f1"], failed["acc"], failed["lm_calls"]) == (0.0, 0.0, 0.0, 0)
    config = RunConfig(method="closed-book", dataset="hotpotqa", data_dir=data_dir, runs_dir=tmp_path / "runs")
    summary = summarize(records, config, eval_s=30.0, wall_s=40.0, run_id="x")
    assert (summary["n"], summary["failed"]) == (4, 1)
    assert summary["em"] == summary["acc"] == 50.0
    assert summary["retrieval_recall"] is None  # closed-book retrieves nothing
    assert summary["questions_per_minute"] == 8.0
    answered = [r["input_tokens"] for r in records if r["error"] is None]
    assert summary[EFFECTIVE_CONTEXT] == pytest.approx(sum(answered) / 4, abs=0.05)


def test_a_record_keeps_the_fields_its_method_declares_and_every_registered_methods_empty():
    from ragscale.experiments.evaluate import recorded_fields
    from ragscale.programs import RAG, IterDRAG

    class Stepping(RAG):
        record_fields = ("steps",)

    pred = dspy.Prediction(answer="a", sub_questions=["q1"], intermediate_answers=["a1"], steps=["s1"])
    asked = {"sub_questions": ["q1"], "intermediate_answers": ["a1"]}
    assert recorded_fields(IterDRAG(None, k=1, max_iterations=2), pred) == asked
    assert recorded_fields(RAG(None, k=1), pred) == {"sub_questions": [], "intermediate_answers": []}
    assert recorded_fields(Stepping(None, k=1), pred) == {"sub_questions": [], "intermediate_answers": [],
                                                           "steps": ["s1"]}  # fmt: skip
    assert recorded_fields(IterDRAG(None, k=1, max_iterations=2), None) == {"sub_questions": [],
                                                                           "intermediate_answers": []}  # fmt: skip
