"""Decomposition, one by one: each sub-question answered alone, then one synthesis from the pairs.

The "answer individually" variant of question decomposition (LangChain "RAG from scratch", after Zhou et al.
2022, "Least-to-Most Prompting Enables Complex Reasoning in Large Language Models"): the question is broken
into sub-questions as in least-to-most prompting, but each is answered by plain RAG without seeing the
others, and a last step answers the question from all question-answer pairs. In DSPy:
``Predict(ListSubQuestions)`` writes the typed ``list[str]`` of sub-questions, ``Predict(AnswerSub)`` answers
each over its own passages, and ``Predict(Synthesize)`` answers from the pairs and the passages gathered.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.behaviour import is_multi_hop, sub_question_counts
from ragscale.programs.retrieval import format_passage, merge_by_rank, most_relevant_last, references
from ragscale.signatures import AnswerSub, Synthesize
from ragscale.signatures.methods import ListSubQuestions


class DecomposeIndividual(Method):
    """decompose(question) -> sub-questions; each: retrieve -> answer_sub; synthesize(pairs, passages)."""

    name = "decompose-individual"
    floors = (("distinct_sub_questions", 1.5),)  # below it, mostly the question alone: RAG
    floors_multi_hop = True
    record_fields = ("sub_questions", "intermediate_answers")  # the follow-ups asked, and their answers

    def __init__(self, retriever, k: int, max_sub_questions: int = 4):
        super().__init__()
        self.retriever, self.k, self.max_sub_questions = retriever, k, max_sub_questions
        self.decompose = dspy.Predict(ListSubQuestions)
        self.answer_sub = dspy.Predict(AnswerSub)
        self.synthesize = dspy.Predict(Synthesize)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"answer_sub": self.k, "synthesize": self.k * self.max_sub_questions}

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """Sub-questions answered, and how many differ from the question itself."""
        return sub_question_counts(question, prediction.sub_questions)

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """A trace shows the decomposition when a multi-hop question was broken into at least two sub-questions
        that differ from it, each answered alone. A single-hop question may go without."""
        shown = self.behaviour(example.question, prediction)["distinct_sub_questions"]
        return not is_multi_hop(example) or shown >= 2

    def forward(self, question: str) -> dspy.Prediction:
        sub_questions = self.decompose(question=question).sub_questions[: self.max_sub_questions] or [question]
        answers, rankings = [], []
        for sub_question in sub_questions:
            rankings.append(self.retriever(sub_question, self.k))
            documents = [format_passage(p) for p in most_relevant_last(rankings[-1])]
            answers.append(self.answer_sub(documents=documents, sub_question=sub_question).answer)
        passages = most_relevant_last(merge_by_rank(rankings))
        answer = self.synthesize(
            documents=[format_passage(p) for p in passages],
            question=question,
            follow_ups=[f"Q: {q} A: {a}" for q, a in zip(sub_questions, answers, strict=True)],
        ).answer
        return dspy.Prediction(
            answer=answer, passages=references(passages), sub_questions=sub_questions, intermediate_answers=answers
        )
