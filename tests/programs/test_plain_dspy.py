"""The methods work with plain DSPy: DSPy's own ChatAdapter and JSONAdapter, a search function of the user's own as
the retriever, and DSPy's JSON save and load, shown on RAG, DRAG and IterDRAG (any ``dspy.LM`` against a real
server is ``tests/experiments/cli/test_llama_server.py``'s, opt-in)."""

import dspy
import pytest
from dspy.utils import DummyLM

from ragscale.programs import DRAG, RAG, IterDRAG

PASSAGES = [
    {"title": "Doctor Strange", "text": "Doctor Strange is a 2016 film directed by Scott Derrickson."},
    {"title": "Scott Derrickson", "text": "Scott Derrickson was born in Denver, Colorado."},
    "Denver is the capital of Colorado.",
]
QUESTION = "Where was the director of Doctor Strange born?"


def search(query: str, k: int) -> list:
    """A user's own search: texts and dicts, no Passage in sight."""
    return PASSAGES[:k]


METHODS = {
    "rag": (lambda: RAG(search, k=3), [{"answer": "Denver"}]),
    "drag": (lambda: DRAG(search, k=3), [{"answer": "Denver"}]),
    "iterdrag": (
        lambda: IterDRAG(search, k=3, max_iterations=2),
        [
            {"follow_up": "Who directed Doctor Strange?"},
            {"answer": "Scott Derrickson"},
            {"follow_up": "none"},
            {"answer": "Denver"},
        ],
    ),
}
ADAPTERS = {"chat": dspy.ChatAdapter, "json": dspy.JSONAdapter}


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("method", METHODS)
def test_a_method_answers_through_dspys_own_adapters_from_a_plain_search_function(method, adapter):
    build, outputs = METHODS[method]
    lm = DummyLM(outputs, adapter=ADAPTERS[adapter]())
    with dspy.context(lm=lm, adapter=ADAPTERS[adapter]()):
        prediction = build()(question=QUESTION)
    assert prediction.answer == "Denver"
    assert len(lm.history) == len(outputs)
    assert {p["title"] for p in prediction.passages} >= {"Doctor Strange", "Scott Derrickson"}
    assert "Denver is the capital of Colorado." in lm.history[-1]["messages"][-1]["content"]  # a text is a document


@pytest.mark.parametrize("method", METHODS)
def test_a_program_saved_as_json_loads_into_one_built_alike_and_answers_the_same_way(method, tmp_path):
    build, _ = METHODS[method]
    program = build()
    demo = dspy.Example(question="Who directed Doctor Strange?", documents=["Doctor Strange: a 2016 film"],
                        follow_ups=[], follow_up="none", sub_question="Who?", answer="Scott Derrickson")  # fmt: skip
    for predictor in program.predictors():
        predictor.demos = [demo]
    program.save(str(tmp_path / "program.json"))
    loaded = build()
    loaded.load(str(tmp_path / "program.json"))
    assert loaded.dump_state() == program.dump_state()
    answers = []
    for each in (program, loaded):
        _, outputs = METHODS[method]
        lm = DummyLM(outputs)
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            answers.append((each(question=QUESTION).answer, [h["messages"] for h in lm.history]))
    assert answers[0] == answers[1]  # the same prompts, demonstrations included, and the same answer
