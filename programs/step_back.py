"""Step-Back prompting: retrieve for the question and for a more general step-back question; answer from both.

Zheng et al. 2023, "Take a Step Back: Evoking Reasoning via Abstraction in Large Language Models": the LM
first abstracts the question into a higher-level step-back question (about the concept or the entity's
background), retrieval runs for both the original and the step-back question, and the answer reads both
contexts. In DSPy: ``Predict(StepBack)`` writes the step-back question, the retriever is called twice, and
``Predict(Answer)`` reads both contexts in one ``documents`` list: the step-back passages first, as background,
then the question's own, most relevant last; a passage found by both is shown once, among the question's own.
One list lets labeled demonstrations, demo caps and the context check treat them all as documents.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.behaviour import distinct, same_question
from ragscale.programs.retrieval import format_passage, most_relevant_last, references
from ragscale.signatures import Answer, StepBack


class StepBackRAG(Method):
    """step_back(question); retrieve(step-back question), retrieve(question); answer(both contexts)."""

    name = "step-back"
    floors = (("step_back_rate", 0.5),)  # below it, mostly the question itself as the step-back: RAG

    def __init__(self, retriever, k: int):
        super().__init__()
        self.retriever, self.k = retriever, k
        self.step_back = dspy.Predict(StepBack)
        self.answer = dspy.Predict(Answer)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"answer": 2 * self.k}

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """Whether the step-back question differs from the question (``step_back_rate``)."""
        differs = bool(distinct([prediction.step_back_question])) and same_question(
            prediction.step_back_question
        ) != same_question(question)
        return {"step_back_rate": float(differs)}

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """A trace shows Step-Back's step when its step-back question differs from the question."""
        return self.behaviour(example.question, prediction)["step_back_rate"] == 1.0

    def forward(self, question: str) -> dspy.Prediction:
        step_back_question = self.step_back(question=question).step_back_question
        found = self.retriever(question, self.k)
        own = {p.id for p in found}
        background = [p for p in self.retriever(step_back_question, self.k) if p.id not in own]
        passages = [*most_relevant_last(background), *most_relevant_last(found)]
        answer = self.answer(documents=[format_passage(p) for p in passages], question=question).answer
        return dspy.Prediction(answer=answer, passages=references(passages), step_back_question=step_back_question)
