"""Closed-book QA: the answer from the model alone, no passages."""

import dspy
from dspy.utils import DummyLM

from ragscale.programs import ClosedBook

QUESTION = "Who wrote it?"


def run(program, lm, question=QUESTION):
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        return program(question=question)


def test_closed_book_answers_without_passages():
    pred = run(ClosedBook(), DummyLM([{"answer": "Tolkien"}]))
    assert pred.answer == "Tolkien"
    assert pred.passages == []
