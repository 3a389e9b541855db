"""What is asked of the model. Each docstring is the instruction the model reads; no logic lives here."""

from typing import Literal

import dspy


class Answer(dspy.Signature):
    """Answer the question using the documents. Reply with the short answer only: a name, a date, a number,
    a short phrase, or yes/no. Do not explain."""

    documents: list[str] = dspy.InputField(desc="retrieved passages, the most relevant last")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a few words at most")


class AnswerClosedBook(dspy.Signature):
    """Answer the question from what you know. Reply with the short answer only: a name, a date, a number,
    a short phrase, or yes/no. Do not explain."""

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
    """Answer the follow-up question using the documents. Reply with the short answer only."""

    documents: list[str] = dspy.InputField(desc="retrieved passages, the most relevant last")
    sub_question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a few words at most")


class Synthesize(dspy.Signature):
    """Answer the question using the follow-up questions with their answers and the documents. Reply with the
    short answer only: a name, a date, a number, a short phrase, or yes/no. Do not explain."""

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
