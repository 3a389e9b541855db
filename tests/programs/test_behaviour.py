"""What a method's defining step did, read from its prediction: the shared counting rules."""

import dspy
import pytest

from ragscale.programs.behaviour import answered, distinct, is_multi_hop, is_rate, same_question, sub_question_counts


def test_a_question_is_the_same_whatever_its_case_spacing_and_end_punctuation():
    spaced, plain = same_question("  Who wrote  The Hobbit? "), same_question("who wrote the hobbit.")
    assert spaced == plain == "who wrote the hobbit"
    assert same_question("Who wrote The Hobbit?") != same_question("Who wrote The Silmarillion?")


@pytest.mark.parametrize("name", ["retrieval_rate", "graded_relevant", "questions_with_follow_up"])
def test_rates_are_named_by_their_suffix_or_prefix(name):
    assert is_rate(name)


@pytest.mark.parametrize("name", ["follow_ups", "steps", "rounds", "distinct_queries"])
def test_counts_are_not_rates(name):
    assert not is_rate(name)


def test_sub_questions_that_restate_the_question_are_not_distinct_sub_questions():
    asked = ["Who directed it?", "who directed it", "Where was he born?", "What is the film?"]
    assert sub_question_counts("What is the film?", asked) == {"sub_questions": 4, "distinct_sub_questions": 2}
    assert distinct(["a?", "A", "", " "]) == 1  # empty texts are left out


@pytest.mark.parametrize(
    ("kind", "multi_hop"),
    [("bridge", True), ("comparison", True), ("2hop", True), ("single-hop (NQ-open)", False), ("", False)],
)
def test_only_a_typed_example_that_is_not_single_hop_is_multi_hop(kind, multi_hop):
    assert is_multi_hop(dspy.Example(question="q", type=kind)) is multi_hop
    assert not is_multi_hop(dspy.Example(question="q"))  # no type at all


def test_only_non_empty_answers_are_counted_as_answered():
    assert answered(["Tolkien", "", "  ", "1937"]) == 2
