"""CRAG: grade every retrieved passage; keep the relevant ones; on failure, rewrite and search a second source.

Yan et al. 2024, "Corrective Retrieval Augmented Generation": a retrieval evaluator grades each passage and
triggers one of three actions: Correct (some passage is relevant: keep the relevant knowledge), Incorrect
(none is: discard them, rewrite the question as a search query and search a second source, the web in the
paper) or Ambiguous (only ambiguous ones: combine them with the second source). Offline, the second source is
the ``fallback`` retriever (e.g. BM25 beside a dense retriever) or, when none is given, the same retriever;
either is searched ``fallback_k`` deep (3k) and its top k passages not already graded are kept. In DSPy:
``CalibratedPredict(Grade)`` is the evaluator, one call per passage (its demos can be learned from supporting-title
labels; ``compile_graders(calibrate=True)`` also corrects its prior, off by default:
``ragscale.programs.calibration``), ``Predict(Rewrite)`` the query rewriter, ``Predict(Answer)`` the generator.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.calibration import CalibratedPredict
from ragscale.programs.retrieval import format_passage, most_relevant_last, references
from ragscale.signatures import Answer, Grade
from ragscale.signatures.methods import Rewrite

GRADES = ("relevant", "irrelevant", "ambiguous")


class CRAG(Method):
    """retrieve -> grade each; correct: keep relevant; else rewrite -> fallback search; answer."""

    name = "crag"
    floors = (("graded_irrelevant", 0.05),)  # below it, every passage kept: RAG with a grader that says yes

    def __init__(self, retriever, k: int, fallback=None, fallback_k: int | None = None):
        super().__init__()
        self.retriever, self.k, self.fallback = retriever, k, fallback
        self.fallback_k = fallback_k or 3 * k  # depth of the second search, before graded passages are dropped
        self.grade = CalibratedPredict(Grade)
        self.rewrite = dspy.Predict(Rewrite)
        self.answer = dspy.Predict(Answer)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"answer": 2 * self.k}  # k ambiguous ones beside k from the second search

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """The share of the retrieved passages graded relevant, irrelevant and ambiguous, and whether the
        corrective search ran (``corrective_rate``: no passage was relevant)."""
        grades = [g["grade"] for g in prediction.grades]
        shares = {f"graded_{g}": grades.count(g) / len(grades) if grades else 0.0 for g in GRADES}
        return {**shares, "corrective_rate": float(prediction.action != "correct")}

    def forward(self, question: str) -> dspy.Prediction:
        found = self.retriever(question, self.k)
        grades = [self.grade(question=question, document=format_passage(p)).grade for p in found]
        relevant = [p for p, grade in zip(found, grades, strict=True) if grade == "relevant"]
        ambiguous = [p for p, grade in zip(found, grades, strict=True) if grade == "ambiguous"]
        action, query, passages = "correct", None, relevant
        if not relevant:
            action = "ambiguous" if ambiguous else "incorrect"
            query = self.rewrite(question=question, tried=[question]).query
            source = self.retriever if self.fallback is None else self.fallback
            graded = {p.id for p in found}
            extra = [p for p in source(query, self.fallback_k) if p.id not in graded][: self.k]
            passages = [*ambiguous, *extra]
        passages = most_relevant_last(passages)
        answer = self.answer(documents=[format_passage(p) for p in passages], question=question).answer
        return dspy.Prediction(
            answer=answer,
            passages=references(passages),
            grades=[{"id": p.id, "title": p.title, "grade": g} for p, g in zip(found, grades, strict=True)],
            action=action,
            rewritten_query=query,
        )
