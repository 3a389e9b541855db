"""Decomposition, recursive: sub-questions answered in order, each seeing the earlier question-answer pairs.

Zhou et al. 2022, "Least-to-Most Prompting Enables Complex Reasoning in Large Language Models": stage 1
reduces the problem to simpler sub-problems; stage 2 solves them in order, each prompt holding the earlier
sub-problems with their solutions, the original problem being the last one solved. With retrieval, as in
LangChain's "RAG from scratch" decomposition, each sub-question gets its own passages. In DSPy:
``Predict(ListSubQuestions)`` writes the typed ``list[str]`` of sub-questions, and one ``Predict(AnswerInOrder)``
answers them and then the question itself, given the ``answered`` pairs so far.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.behaviour import is_multi_hop, sub_question_counts
from ragscale.programs.retrieval import format_passage, merge_by_rank, most_relevant_last, references
from ragscale.signatures.methods import AnswerInOrder, ListSubQuestions


class DecomposeRecursive(Method):
    """decompose(question) -> sub-questions; for each, then the question: retrieve -> answer(earlier pairs)."""

    name = "decompose-recursive"
    floors = (("distinct_sub_questions", 1.5),)  # below it, mostly the question alone: RAG
    floors_multi_hop = True
    record_fields = ("sub_questions", "intermediate_answers")  # the follow-ups asked, and their answers

    def __init__(self, retriever, k: int, max_sub_questions: int = 4):
        super().__init__()
        self.retriever, self.k, self.max_sub_questions = retriever, k, max_sub_questions
        self.decompose = dspy.Predict(ListSubQuestions)
        self.answer = dspy.Predict(AnswerInOrder)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"answer": self.k}

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """Sub-questions answered, and how many differ from the question itself."""
        return sub_question_counts(question, prediction.sub_questions)

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """A trace shows the decomposition when a multi-hop question was broken into at least two sub-questions
        that differ from it: one sub-question is a rewrite, not a reduction to simpler problems. A single-hop
        question may go without."""
        shown = self.behaviour(example.question, prediction)["distinct_sub_questions"]
        return not is_multi_hop(example) or shown >= 2

    def forward(self, question: str) -> dspy.Prediction:
        sub_questions = self.decompose(question=question).sub_questions[: self.max_sub_questions]
        answered, answers, rankings = [], [], []
        for current in [*sub_questions, question]:  # least-to-most: the question itself is solved last
            rankings.append(self.retriever(current, self.k))
            documents = [format_passage(p) for p in most_relevant_last(rankings[-1])]
            answer = self.answer(documents=documents, answered=list(answered), question=current).answer
            answered.append(f"Q: {current} A: {answer}")
            answers.append(answer)
        return dspy.Prediction(
            answer=answers[-1],
            passages=references(most_relevant_last(merge_by_rank(rankings))),
            sub_questions=sub_questions,
            intermediate_answers=answers[:-1],
        )
