"""RAT: each step of a drafted chain of thought revised against the documents retrieved for it."""

from method_doubles import HAPPY_PATHS, OverlapRetriever, prompt, run

from ragscale.programs.rat import RAT


def test_rat_writes_a_query_and_revises_each_draft_step_then_answers_from_the_revised_chain():
    retriever = OverlapRetriever()
    prediction, lm = run(RAT(retriever, k=2, max_steps=2), HAPPY_PATHS["rat"][1])
    assert len(prediction.draft) == 2  # capped at max_steps
    assert prediction.queries == ["Doctor Strange director", "Scott Derrickson birthplace"]
    assert retriever.queries == prediction.queries
    assert prediction.revised_steps[-1] == "Scott Derrickson was born in Denver."
    assert "He was born in Los Angeles." in prompt(lm, 3)  # the second query is written for the draft step
    assert "Scott Derrickson was born in Denver." in prompt(lm, 5)
    assert "He was born in Los Angeles." not in prompt(lm, 5)  # the answer reads the revised chain
