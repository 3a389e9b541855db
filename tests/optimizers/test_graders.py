"""Graders compiled on relevance labels from the data (a passage is relevant when its title is supporting)."""

from pathlib import Path

import dspy
import pytest
from doubles import BiasedGrader, biased_lm
from dspy.utils import DummyLM

from ragscale.data import load_jsonl
from ragscale.optimizers.graders import balance_labels, compile_graders, grade_examples, grade_match, graders
from ragscale.programs import CRAG, RAG
from ragscale.programs.lm import make_adapter
from ragscale.programs.retrieval import Passage

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_mini.jsonl"


def no_retrieval(query: str, k: int) -> list[Passage]:
    return []


def test_grade_examples_label_a_supporting_paragraph_relevant_and_another_irrelevant():
    examples = load_jsonl(FIXTURE)[:3]
    labelled = grade_examples(examples)
    assert len(labelled) == 6
    for example, (relevant, irrelevant) in zip(examples, zip(labelled[::2], labelled[1::2], strict=True), strict=True):
        assert (relevant.grade, irrelevant.grade) == ("relevant", "irrelevant")
        assert relevant.question == irrelevant.question == example.question
        assert relevant.document.split(":")[0] in example.supporting_titles
        assert irrelevant.document.split(":")[0] not in example.supporting_titles
        assert set(relevant.inputs().keys()) == {"question", "document"}
        assert "passage_id" not in relevant  # a demonstration shows every field it carries
    named = grade_examples(examples, ids=True)
    assert [e.passage_id for e in named[:2]] == [f"{examples[0].id}/{e.document.split(':')[0]}" for e in labelled[:2]]


def test_grade_match_is_one_only_for_the_label():
    example = dspy.Example(question="q", document="d", grade="relevant")
    assert grade_match(example, dspy.Prediction(grade="relevant")) == 1.0
    assert grade_match(example, dspy.Prediction(grade="ambiguous")) == 0.0


def test_labeled_crag_graders_get_label_demos_and_other_predictors_keep_theirs():
    program = CRAG(no_retrieval, k=2)
    compile_graders(program, load_jsonl(FIXTURE), optimizer="labeled", shots=4)
    (grader,) = graders(program)
    assert grader is program.grade and len(grader.demos) == 4
    assert sorted(d.grade for d in grader.demos) == ["irrelevant", "irrelevant", "relevant", "relevant"]
    assert all(set(d.keys()) == {"question", "document", "grade"} for d in grader.demos)
    assert program.answer.demos == [] and program.rewrite.demos == []
    assert graders(RAG(no_retrieval, k=5)) == []


def test_bootstrapped_graders_keep_traces_that_match_the_label_and_a_missing_label_is_topped_up():
    lm = DummyLM([{"grade": "relevant"}] * 50)  # right on the supporting paragraphs, wrong on the others
    program = CRAG(no_retrieval, k=2)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        compile_graders(program, load_jsonl(FIXTURE)[:4], optimizer="bootstrap", shots=4)
    demos = program.grade.demos
    assert [d.grade for d in demos] == ["relevant", "irrelevant", "relevant", "irrelevant"]
    assert [bool(d.get("augmented")) for d in demos] == [True, False, True, False]  # traces, then labels
    assert len({(d.question, d.document) for d in demos}) == 4


def test_demonstrations_take_the_labels_in_turns_learned_ones_first():
    def ex(question, grade):
        return dspy.Example(question=question, document="d", grade=grade).with_inputs("question", "document")

    learned = [ex("a", "irrelevant"), ex("b", "irrelevant"), ex("c", "irrelevant")]
    labelled = [ex("d", "relevant"), ex("a", "irrelevant"), ex("e", "relevant"), ex("f", "relevant")]
    picked = balance_labels(learned, labelled, k=4)
    assert [(d.question, d.grade) for d in picked] == [
        ("d", "relevant"), ("a", "irrelevant"), ("e", "relevant"), ("b", "irrelevant")
    ]  # fmt: skip


def test_none_leaves_the_graders_untrained():
    program = CRAG(no_retrieval, k=2)
    compile_graders(program, load_jsonl(FIXTURE), optimizer="none", shots=4)
    assert program.grade.demos == []


def test_calibrated_graders_learn_the_prior_of_their_compiled_prompt_on_the_lm_that_grades():
    engine = BiasedGrader()
    lm = biased_lm(engine)
    program = CRAG(no_retrieval, k=2)
    compile_graders(
        program,
        load_jsonl(FIXTURE),
        optimizer="labeled",
        shots=4,
        calibrate=True,
        lm=lm,
        adapter=make_adapter("field"),
    )
    assert set(program.grade.calibration) == {"relevant", "ambiguous", "irrelevant"}
    assert len(engine.prompts) == 3  # one call per content-free input, each with the four demonstrations
    assert all(demo.document in prompt for prompt in engine.prompts for demo in program.grade.demos)
    uncalibrated = CRAG(no_retrieval, k=2)
    compile_graders(uncalibrated, load_jsonl(FIXTURE), optimizer="labeled", shots=4, lm=lm)
    assert uncalibrated.grade.calibration is None


def test_calibrating_graders_on_an_lm_without_option_scores_fails_naming_it():
    lm = DummyLM([{"grade": "relevant"}] * 10)
    with pytest.raises(ValueError, match="returned no scores"):
        compile_graders(
            CRAG(no_retrieval, k=2), load_jsonl(FIXTURE), optimizer="labeled", shots=4, calibrate=True, lm=lm
        )
