"""Step-back prompting: a more general question searched beside the question itself."""

from method_doubles import HAPPY_PATHS, QUESTION, OverlapRetriever, ids, prompt, run

from ragscale.programs.retrieval import format_passage
from ragscale.programs.step_back import StepBackRAG


def test_step_back_retrieves_for_both_questions_and_answers_from_both_contexts_the_question_own_last():
    retriever = OverlapRetriever()
    prediction, lm = run(StepBackRAG(retriever, k=2), HAPPY_PATHS["step-back"][1])
    assert prediction.step_back_question == "What is the history of Colorado and Denver?"
    assert retriever.queries == [QUESTION, prediction.step_back_question]
    own, background = retriever.results
    assert not {p.id for p in own} & {p.id for p in background}
    shown = [prompt(lm, 1).index(format_passage(p)) for p in [background[1], background[0], own[1], own[0]]]
    assert shown == sorted(shown)
    assert set(ids(prediction)) == {p.id for p in [*own, *background]}


def test_step_back_shows_a_passage_found_for_both_questions_once_among_the_question_own():
    retriever = OverlapRetriever()
    replies = [{"step_back_question": "Who is Scott Derrickson, the director?"}, {"answer": "Denver"}]
    prediction, lm = run(StepBackRAG(retriever, k=2), replies)
    own, background = retriever.results
    shared = {p.id for p in own} & {p.id for p in background}
    assert shared
    shown = prompt(lm, 1)
    for passage in own:
        assert shown.count(format_passage(passage)) == 1
    assert len(ids(prediction)) == len(set(ids(prediction)))


def test_step_back_behaviour_sees_a_step_back_question_that_repeats_the_question():
    same, _ = run(StepBackRAG(OverlapRetriever(), k=2), [{"step_back_question": QUESTION.upper()}, {"answer": "x"}])
    assert StepBackRAG.behaviour(QUESTION, same) == {"step_back_rate": 0.0}
