"""What is asked of the model. Each docstring is the instruction the model reads (those that ask for the final answer
composed with ``instructions.short_answer``, the one wording of "reply with the short answer only"); no logic lives
here."""

from typing import Literal

import dspy

from ragscale.signatures.instructions import short_answer


class Answer(dspy.Signature):
    __doc__ = short_answer("Answer the question using the documents.", width=100)

    documents: list[str] = dspy.InputField(desc="retrieved passages, the most relevant last")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a few words at most")


class AnswerClosedBook(dspy.Signature):
    __doc__ = short_answer("Answer the question from what you know.", width=99)

    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a few words at most")


class Decompose(dspy.Signature):
    """Break a complex question into simpler follow-up questions, answered one at a time. Given the follow-up
    questions already answered, write the next follow-up question: one simple question about one fact that is
    still missing. When the answered follow-ups already give the answer, write: none."""

    question: str = dspy.InputField()
    follow_ups: list[str] = dspy.InputField(desc="follow-up questions answered so far, each with its answer")
    follow_up: str = dspy.OutputField(desc="the next follow-up question, or none")


class AnswerSub(dspy.Signature):
    __doc__ = short_answer("Answer the follow-up question using the documents.", width=120, forms=False)

    documents: list[str] = dspy.InputField(desc="retrieved passages, the most relevant last")
    sub_question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a few words at most")


class Synthesize(dspy.Signature):
    __doc__ = short_answer(
        "Answer the question using the follow-up questions with their answers and the documents.", width=102
    )

    documents: list[str] = dspy.InputField(desc="passages gathered for the follow-up questions")
    question: str = dspy.InputField()
    follow_ups: list[str] = dspy.InputField(desc="follow-up questions, each with its answer")
    answer: str = dspy.OutputField(desc="a few words at most")


class Grade(dspy.Signature):
    """Judge whether the document helps answer the question. Say relevant if it holds a fact needed for the
    answer, ambiguous if it is about the right subject but may not hold the fact, irrelevant otherwise."""

    question: str = dspy.InputField()
    document: str = dspy.InputField()
    grade: Literal["relevant", "ambiguous", "irrelevant"] = dspy.OutputField()


class StepBack(dspy.Signature):
    """Write a more general step-back question whose answer gives the background needed for the question.
    For example, for a question about a person's birth year in a film, ask about that person's biography."""

    question: str = dspy.InputField()
    step_back_question: str = dspy.OutputField()


class Hypothesize(dspy.Signature):
    """Write a short encyclopedia passage that answers the question. It may guess facts: it is used only to
    search for real passages."""

    question: str = dspy.InputField()
    passage: str = dspy.OutputField(desc="two or three sentences")
