"""Step-Back prompting: retrieve for the question and for a more general step-back question; answer from both.

Zheng et al. 2023, "Take a Step Back: Evoking Reasoning via Abstraction in Large Language Models": the LM
first abstracts the question into a higher-level step-back question (about the concept or the entity's
background), retrieval runs for both the original and the step-back question, and the answer reads both
contexts. In DSPy: ``Predict(StepBack)`` writes the step-back question, the retriever is called twice, and
``Predict(AnswerWithBackground)`` reads the step-back passages as background beside the question's own.
"""

import dspy

from ragscale.programs.iterdrag import merge_by_rank
from ragscale.programs.rag import references
from ragscale.programs.retrieval import format_passage, most_relevant_last
from ragscale.signatures import StepBack
from ragscale.signatures.methods import AnswerWithBackground


class StepBackRAG(dspy.Module):
    """step_back(question); retrieve(step-back question), retrieve(question); answer(background, documents)."""

    def __init__(self, retriever, k: int = 5):
        super().__init__()
        self.retriever, self.k = retriever, k
        self.step_back = dspy.Predict(StepBack)
        self.answer = dspy.Predict(AnswerWithBackground)

    def forward(self, question: str) -> dspy.Prediction:
        step_back_question = self.step_back(question=question).step_back_question
        background = self.retriever(step_back_question, self.k)
        found = self.retriever(question, self.k)
        answer = self.answer(
            background=[format_passage(p) for p in most_relevant_last(background)],
            documents=[format_passage(p) for p in most_relevant_last(found)],
            question=question,
        ).answer
        return dspy.Prediction(
            answer=answer,
            passages=references(most_relevant_last(merge_by_rank([found, background]))),
            step_back_question=step_back_question,
        )
