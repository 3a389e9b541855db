"""EM, F1, Acc and retrieval recall against worked examples."""

import dspy
import pytest

from ragscale.optimizers.metrics import (
    acc_metric,
    accuracy,
    em_metric,
    exact_match,
    f1,
    f1_metric,
    normalize_answer,
    retrieval_recall,
)


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  an   Apple, a day!  ", "apple day"),
        ("U.S.A.", "usa"),
        ("Theatre", "theatre"),
        (None, ""),
    ],
)
def test_normalisation_drops_case_punctuation_articles_and_extra_spaces(text, normal):
    assert normalize_answer(text) == normal


def test_exact_match_ignores_articles_punctuation_and_case():
    assert exact_match("the Beatles.", ["Beatles"]) == 1.0
    assert exact_match("Beatles band", ["Beatles"]) == 0.0


def test_exact_match_takes_the_best_alias():
    assert exact_match("NYC", ["New York City", "NYC"]) == 1.0


def test_f1_counts_shared_tokens_after_normalisation():
    # pred tokens: barack obama (2); gold: president barack obama (3); common 2 -> P 1, R 2/3, F1 0.8
    assert f1("Barack Obama", ["the President Barack Obama"]) == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("prediction", "gold", "score"),
    [
        ("yes", "yes", 1.0),
        ("Yes.", "yes", 1.0),  # normalised first: the same closed answer
        ("yes", "no", 0.0),
        ("yes it is", "yes", 0.0),  # SQuAD's overlap would give 2/3
        ("no", "no way", 0.0),  # a closed prediction against an open gold answer
        ("noanswer", "noanswer", 1.0),
        ("the Yes Men", "Yes Men", 1.0),  # "yes men" is not a closed answer
        ("yes men", "Yes Men band", 0.8),  # nor is it when the two differ: token overlap, P 1, R 2/3
        ("Paris, France", "Paris", 2 / 3),
        ("", "yes", 0.0),
    ],
)
def test_f1_follows_hotpotqas_official_rule_for_yes_no_and_noanswer(prediction, gold, score):
    """The cases of ``f1_score`` in HotpotQA's ``hotpot_evaluate_v1.py``: a closed answer on either side scores all
    or nothing, any other pair by token overlap after normalisation."""
    assert f1(prediction, [gold]) == pytest.approx(score)


def test_f1_is_the_maximum_over_aliases():
    assert f1("Obama", ["George Bush", "Barack Obama"]) == pytest.approx(2 / 3)


def test_accuracy_finds_an_alias_inside_a_longer_answer_on_word_boundaries():
    assert accuracy("He was born in 1902, in Paris.", ["1902"]) == 1.0
    assert accuracy("not known", ["no"]) == 0.0
    assert accuracy("Paris", ["London", "paris"]) == 1.0


@pytest.mark.parametrize("metric", [exact_match, f1, accuracy])
def test_an_empty_prediction_scores_zero(metric):
    assert metric("", ["Paris"]) == 0.0
    assert metric(None, ["Paris"]) == 0.0


def test_an_empty_gold_alias_matches_nothing_under_accuracy():
    assert accuracy("anything", [""]) == 0.0


def test_retrieval_recall_is_the_share_of_supporting_titles_retrieved():
    assert retrieval_recall(["A", "B", "C"], ["A", "D"]) == 0.5
    assert retrieval_recall(["A", "A"], ["A"]) == 1.0


def test_retrieval_recall_is_undefined_without_supporting_titles():
    assert retrieval_recall(["A"], []) is None


def test_dspy_metrics_read_the_examples_aliases_and_the_predicted_answer():
    example = dspy.Example(question="q", answers=["Paris", "City of Light"]).with_inputs("question")
    pred = dspy.Prediction(answer="the city of light")
    assert em_metric(example, pred) == 1.0
    assert f1_metric(example, pred, trace=[]) == 1.0
    assert acc_metric(example, dspy.Prediction(answer="It is Paris.")) == 1.0
    assert em_metric(dspy.Example(question="q", answer="Paris"), dspy.Prediction(answer="paris")) == 1.0
