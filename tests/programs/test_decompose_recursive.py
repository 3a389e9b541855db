"""Recursive decomposition: sub-questions answered in order, each seeing the earlier answers."""

from method_doubles import HAPPY_PATHS, QUESTION, OverlapRetriever, prompt, run

from ragscale.programs.decompose_recursive import DecomposeRecursive


def test_decompose_recursive_shows_each_sub_question_the_earlier_pairs_and_answers_the_question_last():
    retriever = OverlapRetriever()
    prediction, lm = run(DecomposeRecursive(retriever, k=2), HAPPY_PATHS["decompose-recursive"][1])
    assert prediction.sub_questions == ["Who directed Doctor Strange?", "Where was Scott Derrickson born?"]
    assert prediction.intermediate_answers == ["Scott Derrickson", "Denver"]
    assert retriever.queries == [*prediction.sub_questions, QUESTION]
    first_pair = "Q: Who directed Doctor Strange? A: Scott Derrickson"
    assert first_pair not in prompt(lm, 1)
    assert first_pair in prompt(lm, 2)
    assert "Q: Where was Scott Derrickson born? A: Denver" in prompt(lm, 3)
