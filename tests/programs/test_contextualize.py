"""Contextual retrieval's step: an LM situates a chunk in (a window of) its document."""

import dspy
from dspy.utils import DummyLM

from ragscale.programs.contextualize import Contextualize, document_window

DOCUMENT = " ".join(f"word{i}" for i in range(200))


def test_a_document_that_fits_is_shown_whole():
    assert document_window(DOCUMENT, "word10 word11", max_chars=len(DOCUMENT)) == DOCUMENT
    assert document_window(DOCUMENT, "word10", max_chars=0) == DOCUMENT  # no limit


def test_a_long_document_is_cut_to_a_window_centred_on_the_chunk():
    window = document_window(DOCUMENT, "word100 word101", max_chars=101)
    assert len(window) == 101
    assert window.index("word100") in range(35, 66)  # near the middle
    assert document_window(DOCUMENT, "word3", max_chars=50).startswith("word0")  # clamped at the start
    assert document_window(DOCUMENT, "word199", max_chars=50).endswith("word199")  # and at the end


def test_a_chunk_not_found_in_the_document_gets_the_documents_start():
    assert document_window(DOCUMENT, "absent text", max_chars=40) == DOCUMENT[:40]


def test_the_model_sees_the_window_and_the_chunk_and_its_context_comes_back_on_one_line():
    lm = DummyLM([{"context": "From a list of words,\n  the middle part."}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        context = Contextualize(max_document_chars=101)(document=DOCUMENT, chunk="word100 word101").context
    assert context == "From a list of words, the middle part."
    shown = lm.history[0]["messages"][-1]["content"]
    assert "word100 word101" in shown and "word0 " not in shown and "word199" not in shown
