"""What GEPA's reflection LM is told about a prediction: the gold answer when it was wrong, the supporting documents
retrieval missed, and the method's defining step when it did not happen."""

import dspy
from doubles import FixedRetriever, examples

from ragscale.optimizers.feedback import feedback_of, with_feedback
from ragscale.optimizers.metrics import em_metric
from ragscale.programs import RAG, IterDRAG


def test_a_wrong_answer_is_told_with_the_gold_answer_and_the_supporting_documents_retrieval_missed():
    example = examples(1)[0].copy(supporting_titles=["Elsewhere", "Best"])
    missed = dspy.Prediction(answer="Nowhere", passages=[{"title": "Best"}])
    wrong = feedback_of(example, missed, 0.0, RAG(FixedRetriever(), k=1))
    assert "The answer 'Nowhere' is wrong" in wrong and "gold answer is 'City 0'" in wrong
    assert "titled: Elsewhere." in wrong  # the one found is not named


def test_a_right_answer_with_its_documents_found_is_told_so():
    example = examples(1)[0].copy(supporting_titles=["Best"])
    right = dspy.Prediction(answer="City 0", passages=[{"title": "Best"}])
    assert feedback_of(example, right, 1.0, RAG(FixedRetriever(), k=1)) == "The answer is right."


def test_a_skipped_defining_step_is_told_with_what_the_method_did():
    bridge = examples(1)[0].copy(type="bridge")
    skipped = dspy.Prediction(answer="City 0", sub_questions=[], intermediate_answers=[], passages=[])
    told = feedback_of(bridge, skipped, 1.0, IterDRAG(FixedRetriever(), k=3, max_iterations=3))
    assert told.startswith("The method's defining step did not happen") and "follow_ups 0" in told


def test_the_feedback_metric_scores_as_the_metric_does_and_keeps_its_name():
    metric = with_feedback(em_metric, RAG(FixedRetriever(), k=1))
    example = examples(1)[0]
    scored = metric(example, dspy.Prediction(answer="Nowhere", passages=[]))
    assert scored.score == em_metric(example, dspy.Prediction(answer="Nowhere")) == 0.0
    assert "gold answer is 'City 0'" in scored.feedback
    assert metric.__name__ == em_metric.__name__
