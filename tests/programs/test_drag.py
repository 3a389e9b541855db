"""DRAG: RAG's forward pass, with demonstrations that keep the documents retrieved for their own questions."""

import dspy
from dspy.utils import DummyLM
from method_doubles import TableRetriever, passage

from ragscale.programs import DRAG, RAG


def test_drag_answers_a_question_with_the_prompt_rag_writes_for_it():
    prompts = []
    for cls in (RAG, DRAG):
        lm = DummyLM([{"answer": "Tolkien"}])
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            assert cls(TableRetriever([passage("A"), passage("B")]), k=2)(question="Who wrote it?").answer == "Tolkien"
        prompts.append(lm.history[0]["messages"])
    assert prompts[0] == prompts[1]


def test_drag_declares_demonstrations_with_documents_where_rag_declares_question_answer_pairs():
    assert DRAG.demo_documents and not RAG.demo_documents  # what the compiler reads (tests/optimizers/test_demos.py)
    assert (DRAG.name, RAG.name) == ("drag", "rag")
