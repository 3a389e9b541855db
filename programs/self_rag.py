"""Self-RAG: decide whether to retrieve, grade the passages, answer, then critique the answer; retry if poor.

Asai et al. 2023, "Self-RAG: Learning to Retrieve, Generate, and Critique through Self-Reflection": one LM
emits reflection tokens: Retrieve (is retrieval needed?), ISREL (is a passage relevant?), ISSUP (is the
answer supported by it: fully, partially, no) and ISUSE (usefulness, 1 to 5); candidates are ranked by those
critiques. The paper trains the tokens into the LM; here each one is a typed predictor whose demonstrations
can be learned: ``Predict(DecideRetrieval)``, ``CalibratedPredict(Grade)`` per passage (its prior can be
corrected, off by default: ``ragscale.programs.calibration``), ``Predict(Answer)`` over the
relevant passages, ``Predict(CheckSupport)`` and ``Predict(RateUsefulness)``. A round without a fully
supported, useful answer is retried with a query from ``Predict(Rewrite)``, up to ``max_rounds``; the best
round by (support, usefulness) gives the answer. Without retrieval, ``Predict(AnswerClosedBook)`` answers.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.calibration import CalibratedPredict
from ragscale.programs.retrieval import format_passage, most_relevant_last, references
from ragscale.signatures import Answer, AnswerClosedBook, Grade
from ragscale.signatures.methods import CheckSupport, DecideRetrieval, RateUsefulness, Rewrite

SUPPORT_RANK = {"none": 0, "partially": 1, "fully": 2}


class SelfRAG(Method):
    """decide; per round: retrieve -> grade -> answer -> check_support, rate; rewrite and retry; best round."""

    name = "self-rag"
    floors = (("retrieval_rate", 0.2),)  # below it, mostly closed-book

    def __init__(self, retriever, k: int, max_rounds: int = 2, min_usefulness: int = 4):
        super().__init__()
        self.retriever, self.k, self.max_rounds, self.min_usefulness = retriever, k, max_rounds, min_usefulness
        self.decide = dspy.Predict(DecideRetrieval)
        self.grade = CalibratedPredict(Grade)
        self.answer = dspy.Predict(Answer)
        self.check_support = dspy.Predict(CheckSupport)
        self.rate = dspy.Predict(RateUsefulness)
        self.rewrite = dspy.Predict(Rewrite)
        self.answer_directly = dspy.Predict(AnswerClosedBook)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"answer": self.k, "check_support": self.k}

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """Whether it retrieved (``retrieval_rate``), its rounds, the share of graded passages judged relevant, and
        the support critique of the round that gave the answer (``supported_fully_rate`` and so on; all 0 when no
        round answered)."""
        grades = [g["grade"] for step in prediction.rounds for g in step["grades"]]
        answered_rounds = [step for step in prediction.rounds if step["answer"] is not None]
        best = max(answered_rounds, key=lambda s: (SUPPORT_RANK[s["support"]], s["usefulness"]), default=None)
        support = best["support"] if best else None
        return {
            "retrieval_rate": float(prediction.retrieved),
            "rounds": len(prediction.rounds),
            "relevant_passage_rate": grades.count("relevant") / len(grades) if grades else 0.0,
            **{f"supported_{level}_rate": float(support == level) for level in SUPPORT_RANK},
        }

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """A trace shows Self-RAG's step when it retrieved: every question of these datasets needs a passage, and
        traces that skip retrieval teach the student never to retrieve."""
        return bool(prediction.retrieved)

    def forward(self, question: str) -> dspy.Prediction:
        if not self.decide(question=question).needs_retrieval:
            answer = self.answer_directly(question=question).answer
            return dspy.Prediction(answer=answer, passages=[], retrieved=False, rounds=[])
        rounds, tried, query = [], [], question
        for round_index in range(self.max_rounds):
            if round_index:
                query = self.rewrite(question=question, tried=list(tried)).query
            tried.append(query)
            found = self.retriever(query, self.k)
            grades = [self.grade(question=question, document=format_passage(p)).grade for p in found]
            relevant = most_relevant_last([p for p, g in zip(found, grades, strict=True) if g == "relevant"])
            graded = [{"id": p.id, "title": p.title, "grade": g} for p, g in zip(found, grades, strict=True)]
            step = {"query": query, "grades": graded, "passages": references(relevant), "answer": None}
            rounds.append(step)
            if not relevant:
                continue
            documents = [format_passage(p) for p in relevant]
            step["answer"] = self.answer(documents=documents, question=question).answer
            step["support"] = self.check_support(documents=documents, question=question, answer=step["answer"]).support
            step["usefulness"] = self.rate(question=question, answer=step["answer"]).usefulness
            if step["support"] == "fully" and step["usefulness"] >= self.min_usefulness:
                break
        answered = [step for step in rounds if step["answer"] is not None]
        if not answered:
            answer = self.answer_directly(question=question).answer
            return dspy.Prediction(answer=answer, passages=[], retrieved=True, rounds=rounds)
        best = max(answered, key=lambda step: (SUPPORT_RANK[step["support"]], step["usefulness"]))
        return dspy.Prediction(answer=best["answer"], passages=best["passages"], retrieved=True, rounds=rounds)
