"""RAG (and DRAG, whose forward pass is RAG's): the top-k passages before the question, the most relevant last."""

import dspy
import pytest
from dspy.utils import DummyLM
from method_doubles import TableRetriever, passage

from ragscale.programs import DRAG, RAG
from ragscale.programs.retrieval import format_passage

QUESTION = "Who wrote it?"


def run(program, lm, question=QUESTION):
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        return program(question=question)


@pytest.mark.parametrize("cls", [RAG, DRAG])
def test_rag_and_drag_put_the_most_relevant_document_last_and_report_passages(cls):
    best, second, third = passage("Best"), passage("Second"), passage("Third")
    lm = DummyLM([{"answer": "Tolkien"}])
    pred = run(cls(TableRetriever([best, second, third, passage("Fourth")]), k=3), lm)
    assert pred.answer == "Tolkien"
    assert pred.passages == [{"id": p.id, "title": p.title} for p in (third, second, best)]
    prompt = lm.history[-1]["messages"][-1]["content"]
    positions = [prompt.index(format_passage(p)) for p in (third, second, best)]
    assert positions == sorted(positions)
