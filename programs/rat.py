"""RAT: a draft chain of thought whose steps are revised one by one with passages retrieved for each.

Wang et al. 2024, "RAT: Retrieval Augmented Thoughts Elicit Context-Aware Reasoning in Long-Horizon
Generation": the LM drafts a zero-shot chain of thought and splits it into steps; for each step in turn it
writes a retrieval query from the task and the steps so far (earlier ones already revised), retrieves, and
revises the step with the passages; the revised chain gives the answer. In DSPy: ``Predict(DraftSteps)``
returns the draft as a typed ``list[str]``, ``Predict(WriteQuery)`` and ``Predict(ReviseStep)`` run once
per step (capped by ``max_steps``), and ``Predict(AnswerFromReasoning)`` answers from the revised steps.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.behaviour import same_question
from ragscale.programs.retrieval import format_passage, merge_by_rank, most_relevant_last, references
from ragscale.signatures.methods import AnswerFromReasoning, DraftSteps, ReviseStep, WriteQuery


class RAT(Method):
    """draft(question) -> steps; each step: write_query -> retrieve -> revise; answer(revised steps)."""

    name = "rat"

    def __init__(self, retriever, k: int, max_steps: int = 5):
        super().__init__()
        self.retriever, self.k, self.max_steps = retriever, k, max_steps
        self.draft = dspy.Predict(DraftSteps)
        self.write_query = dspy.Predict(WriteQuery)
        self.revise = dspy.Predict(ReviseStep)
        self.answer = dspy.Predict(AnswerFromReasoning)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"revise": self.k, "answer": self.k * self.max_steps}

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """Draft steps revised against retrieval, and the share of them the revision changed."""
        pairs = list(zip(prediction.draft, prediction.revised_steps, strict=False))
        changed = sum(same_question(draft) != same_question(revised) for draft, revised in pairs)
        return {"steps": len(pairs), "revised_step_rate": changed / len(pairs) if pairs else 0.0}

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """A trace shows RAT's step when at least one draft step was revised against retrieval."""
        return self.behaviour(example.question, prediction)["steps"] >= 1

    def forward(self, question: str) -> dspy.Prediction:
        draft = self.draft(question=question).steps[: self.max_steps]
        revised: list[str] = []
        queries: list[str] = []
        rankings = []
        for step in draft:
            query = self.write_query(question=question, steps=[*revised, step]).query
            rankings.append(self.retriever(query, self.k))
            documents = [format_passage(p) for p in most_relevant_last(rankings[-1])]
            revised.append(self.revise(documents=documents, question=question, step=step).revised_step)
            queries.append(query)
        passages = most_relevant_last(merge_by_rank(rankings))
        documents = [format_passage(p) for p in passages]
        answer = self.answer(documents=documents, question=question, reasoning=revised).answer
        return dspy.Prediction(
            answer=answer, passages=references(passages), draft=draft, queries=queries, revised_steps=revised
        )
