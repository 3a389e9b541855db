"""Individual decomposition: sub-questions answered alone, then one answer synthesized from all pairs."""

from method_doubles import HAPPY_PATHS, QUESTION, OverlapRetriever, prompt, run

from ragscale.programs.decompose_individual import DecomposeIndividual


def test_decompose_individual_answers_sub_questions_alone_and_synthesizes_from_all_pairs():
    retriever = OverlapRetriever()
    prediction, lm = run(DecomposeIndividual(retriever, k=2), HAPPY_PATHS["decompose-individual"][1])
    assert prediction.intermediate_answers == ["Scott Derrickson", "Denver"]
    assert retriever.queries == prediction.sub_questions
    assert "A: Scott Derrickson" not in prompt(lm, 2)
    synthesis = prompt(lm, 3)
    assert "Q: Who directed Doctor Strange? A: Scott Derrickson" in synthesis
    assert "Q: Where was Scott Derrickson born? A: Denver" in synthesis


def test_decompose_individual_answers_the_question_itself_when_no_sub_question_is_written():
    retriever = OverlapRetriever()
    replies = [{"sub_questions": []}, {"answer": "Denver"}, {"answer": "Denver"}]
    prediction, _ = run(DecomposeIndividual(retriever, k=2), replies)
    assert prediction.sub_questions == [QUESTION]
    assert retriever.queries == [QUESTION]
