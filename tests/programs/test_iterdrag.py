"""IterDRAG: follow-up questions answered one at a time over their own retrievals, then a synthesized answer;
when the loop stops, what it reports, and which traces may become demonstrations."""

import copy

import dspy
import pytest
from dspy.utils import DummyLM
from method_doubles import TableRetriever, passage

from ragscale.programs import IterDRAG
from ragscale.programs.iterdrag import follow_up_of, no_follow_up
from ragscale.programs.retrieval import format_passage

QUESTION = "Who wrote it?"


def run(program, lm, question=QUESTION):
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        return program(question=question)


def test_iterdrag_stops_when_the_model_says_no_follow_up_is_needed():
    lm = DummyLM(
        [
            {"follow_up": "Who wrote The Hobbit?"},
            {"answer": "Tolkien"},
            {"follow_up": "none"},
            {"answer": "J. R. R. Tolkien"},
        ]
    )
    pred = run(IterDRAG(TableRetriever([passage("A")]), k=1, max_iterations=5), lm)
    assert pred.answer == "J. R. R. Tolkien"
    assert pred.sub_questions == ["Who wrote The Hobbit?"]
    assert pred.intermediate_answers == ["Tolkien"]
    assert pred.stop == "no_follow_up"
    assert len(lm.history) == 4


def test_iterdrag_stops_at_max_iterations_and_still_synthesizes():
    lm = DummyLM(
        [
            {"follow_up": "First?"},
            {"answer": "one"},
            {"follow_up": "Second?"},
            {"answer": "two"},
            {"answer": "final"},
        ]
    )
    pred = run(IterDRAG(TableRetriever([passage("A")]), k=1, max_iterations=2), lm)
    assert pred.answer == "final"
    assert pred.sub_questions == ["First?", "Second?"]
    assert pred.intermediate_answers == ["one", "two"]
    assert pred.stop == "max_iterations"
    synthesize_prompt = lm.history[-1]["messages"][-1]["content"]
    assert "Q: First? A: one" in synthesize_prompt and "Q: Second? A: two" in synthesize_prompt


def test_iterdrag_stops_when_the_model_repeats_a_follow_up():
    lm = DummyLM(
        [
            {"follow_up": "Who wrote it first?"},
            {"answer": "Tolkien"},
            {"follow_up": "who wrote it first"},
            {"answer": "Tolkien"},
        ]
    )
    pred = run(IterDRAG(TableRetriever([passage("A")]), k=1, max_iterations=5), lm)
    assert pred.sub_questions == ["Who wrote it first?"]
    assert pred.answer == "Tolkien"
    assert pred.stop == "repeated_follow_up"
    assert len(lm.history) == 4


def test_iterdrag_answers_with_what_it_has_when_the_decomposition_cannot_be_read():
    lm = DummyLM([{"answer": "not a decomposition"}, {"answer": "Tolkien"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        pred = IterDRAG(TableRetriever([passage("A")]), k=1, max_iterations=3)(question="Who wrote it?")
    assert (pred.answer, pred.stop, pred.sub_questions) == ("Tolkien", "unreadable_follow_up", [])
    assert pred.passages == [{"id": "id-A", "title": "A"}]


def test_iterdrag_gathers_every_retrieval_without_repeats_most_relevant_last():
    a, b, c, d = passage("A"), passage("B"), passage("C"), passage("D")
    retriever = TableRetriever([a, b], {"Sub?": [c, a, d]})
    lm = DummyLM(
        [
            {"follow_up": "Sub?"},
            {"answer": "x"},
            {"follow_up": "none"},
            {"answer": "y"},
        ]
    )
    pred = run(IterDRAG(retriever, k=3, max_iterations=3), lm, question="Main?")
    assert retriever.queries == ["Main?", "Sub?"]
    # best ranks: A 1st (main), C 1st (sub, later), B 2nd, D 3rd -> most relevant first A, C, B, D; reversed
    assert [p["title"] for p in pred.passages] == ["D", "B", "C", "A"]
    answer_sub_prompt = lm.history[1]["messages"][-1]["content"]
    assert answer_sub_prompt.index(format_passage(d)) < answer_sub_prompt.index(format_passage(c))


def test_a_copied_program_shares_its_index_backed_retriever_but_not_its_predictors():
    from ragscale.programs.retrieval import BM25Retriever

    retriever = BM25Retriever([{"id": str(i), "title": f"T{i}", "text": f"text number {i}"} for i in range(12)])
    program = IterDRAG(retriever, k=3, max_iterations=3)
    for copied in (copy.deepcopy(program), program.deepcopy(), program.reset_copy()):
        assert copied.retriever is retriever
        assert copied.decompose is not program.decompose


@pytest.mark.parametrize("text", ["none", "None.", "", "No follow-up needed", "no further follow-ups", "N/A"])
def test_a_decomposition_that_writes_none_ends_the_loop(text):
    assert no_follow_up(text)


@pytest.mark.parametrize("text", ["Who wrote None of the Above?", "Nobody?", "Which novel did he write?"])
def test_a_follow_up_question_is_not_read_as_none(text):
    assert not no_follow_up(text)


def test_iterdrag_reports_its_follow_ups_those_written_as_questions_and_demonstrates_only_with_one_on_multi_hop():
    replies = [{"follow_up": "Who wrote The Hobbit?"}, {"answer": "Tolkien"}, {"follow_up": "none"}, {"answer": "x"}]
    lm = DummyLM(replies)
    program = IterDRAG(TableRetriever([passage("A")]), k=1, max_iterations=3)
    pred = run(program, lm)
    behaviour = program.behaviour(QUESTION, pred)
    assert behaviour == {
        "follow_ups": 1,
        "questions_with_follow_up": 1.0,
        "answered_follow_ups": 1,
        "follow_ups_as_questions": 1,
        "redrawn_follow_ups": 0,
    }
    stated = dspy.Prediction(
        answer="x", sub_questions=["Tolkien wrote it.", "The Hobbit >> author", "1937"], intermediate_answers=["T"]
    )
    assert program.behaviour(QUESTION, stated)["follow_ups_as_questions"] == 1  # MuSiQue's form is a question
    skipped = dspy.Prediction(answer="x", sub_questions=[], intermediate_answers=[])
    assert program.behaviour(QUESTION, skipped)["questions_with_follow_up"] == 0.0
    bridge, single = (dspy.Example(question=QUESTION, type=kind) for kind in ("bridge", "single-hop (NQ-open)"))
    assert program.demonstrates(bridge, pred) and not program.demonstrates(bridge, skipped)
    assert not program.demonstrates(bridge, stated)  # a statement in place of a sub-query is not taught
    assert program.demonstrates(single, skipped)


def test_a_follow_up_that_copies_the_q_a_framing_is_read_as_its_question_and_a_copied_one_is_a_repeat():
    assert follow_up_of("Q: Who wrote it? A: Tolkien") == "Who wrote it?"
    echo = {"follow_up": "Q: Who wrote it first? A: x"}
    lm = DummyLM([{"follow_up": "Who wrote it first?"}, {"answer": "Tolkien"}, echo, {"answer": "Tolkien"}])
    pred = run(IterDRAG(TableRetriever([passage("A")]), k=1, max_iterations=3), lm)
    assert (pred.sub_questions, pred.stop) == (["Who wrote it first?"], "repeated_follow_up")


def test_a_follow_up_that_restates_the_question_is_drawn_again_and_only_the_kept_draw_is_traced():
    restated, asked = {"follow_up": QUESTION}, {"follow_up": "Who wrote The Hobbit?"}
    lm = DummyLM([restated, restated, asked, {"answer": "Tolkien"}, {"follow_up": "none"}, {"answer": "Tolkien"}])
    draws, copy_lm = [], lm.copy
    lm.copy = lambda **kwargs: draws.append(kwargs) or copy_lm(**kwargs)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(), trace=[]):
        pred = IterDRAG(TableRetriever([passage("A")]), k=1, max_iterations=3)(question=QUESTION)
        traced = [outputs.get("follow_up") for _, _, outputs in dspy.settings.trace]
    assert (pred.sub_questions, pred.redrawn, pred.stop) == (["Who wrote The Hobbit?"], 2, "no_follow_up")
    assert traced == ["Who wrote The Hobbit?", None, "none", None]  # the restatements are not demonstrations
    assert draws == [dict(rollout_id=n, temperature=1.0, seed=n) for n in (1, 2)]  # the first call was greedy


def test_restated_follow_ups_end_the_loop_once_the_draws_are_spent_and_none_of_them_is_traced():
    lm = DummyLM([{"follow_up": QUESTION}] * 3 + [{"answer": "Tolkien"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(), trace=[]):
        pred = IterDRAG(TableRetriever([passage("A")]), k=1, resample=2, max_iterations=3)(question=QUESTION)
        traced = [outputs.get("follow_up") for _, _, outputs in dspy.settings.trace]
    assert (pred.sub_questions, pred.redrawn, pred.stop, pred.answer) == ([], 2, "repeated_follow_up", "Tolkien")
    assert traced == [None]  # the answer only


def test_an_unreadable_draw_ends_the_drawing_and_the_restated_follow_up_ends_the_loop():
    lm = DummyLM([{"follow_up": QUESTION}, {"answer": "not a follow-up"}, {"answer": "Tolkien"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        pred = IterDRAG(TableRetriever([passage("A")]), k=1, max_iterations=3)(question=QUESTION)
    assert (pred.sub_questions, pred.redrawn, pred.stop, pred.answer) == ([], 1, "repeated_follow_up", "Tolkien")
    with pytest.raises(ValueError, match="resample must be >= 0"):
        IterDRAG(TableRetriever([]), resample=-1, k=3, max_iterations=3)
