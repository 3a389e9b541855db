import json
from typing import Literal

import dspy
import pytest
from doubles import BiasedGrader, biased_lm
from dspy.utils import DummyLM

from ragscale.programs.calibration import CONTENT_FREE, CalibratedPredict
from ragscale.programs.lm.adapter import FieldAdapter
from ragscale.signatures import Answer, Grade

ON = {"question": "Who wrote Hamlet?", "document": "Hamlet is a tragedy by William Shakespeare."}
OFF = {"question": "Who wrote Hamlet?", "document": "The Eiffel Tower is in Paris."}


@pytest.fixture
def biased():
    engine = BiasedGrader()
    with dspy.context(lm=biased_lm(engine), adapter=FieldAdapter()):
        yield engine


def test_calibration_removes_the_prior_that_the_content_free_inputs_show(biased):
    grade = CalibratedPredict(Grade)
    assert (grade(**ON).grade, grade(**OFF).grade) == ("relevant", "relevant")  # uncalibrated: the prior wins
    grade.calibrate()
    assert len(biased.prompts) == 2 + len(CONTENT_FREE)
    assert set(grade.calibration) == {"relevant", "ambiguous", "irrelevant"}
    assert max(grade.calibration, key=grade.calibration.get) == "relevant"
    assert (grade(**ON).grade, grade(**OFF).grade) == ("relevant", "irrelevant")


def test_the_prior_is_learned_for_the_prompt_with_its_demonstrations(biased):
    grade = CalibratedPredict(Grade)
    grade.demos = [dspy.Example(question="Which sea?", document="A demo passage.", grade="irrelevant")]
    grade.calibrate()
    assert len(biased.prompts) == len(CONTENT_FREE)
    assert all("A demo passage." in prompt for prompt in biased.prompts)
    assert "[MASK]" in biased.prompts[-1] and "Hamlet" not in biased.prompts[-1]


def test_the_calibration_is_saved_with_the_program_and_reset_clears_it(biased, tmp_path):
    grade = CalibratedPredict(Grade).calibrate()
    state = json.loads(json.dumps(grade.dump_state()))
    loaded = CalibratedPredict(Grade)
    loaded.load_state(state)
    assert loaded.calibration == pytest.approx(grade.calibration)
    assert loaded(**OFF).grade == "irrelevant"
    loaded.reset()
    assert loaded.calibration is None


def test_an_lm_without_option_scores_is_named_not_left_uncalibrated():
    lm = DummyLM([{"grade": "relevant"}] * 3)
    with dspy.context(lm=lm):
        with pytest.raises(ValueError, match="returned no scores for the options of 'grade'"):
            CalibratedPredict(Grade).calibrate()


def test_only_a_signature_with_one_closed_choice_output_can_be_calibrated():
    with pytest.raises(ValueError, match="exactly one output, a closed choice"):
        CalibratedPredict(Answer)

    class Pick(dspy.Signature):
        text: str = dspy.InputField()
        color: Literal["red", "green"] = dspy.OutputField()

    assert CalibratedPredict(Pick).choice == "color"


def test_a_prediction_keeps_only_its_fields_and_the_async_path_is_calibrated_too(biased):
    import asyncio

    grade = CalibratedPredict(Grade).calibrate()
    prediction = grade(**OFF)
    assert list(prediction.keys()) == ["grade"]  # a demonstration made from it carries no scores
    assert max(grade.probabilities(prediction), key=grade.probabilities(prediction).get) == "irrelevant"
    assert asyncio.run(grade.acall(**OFF)).grade == "irrelevant"


def test_an_uncalibrated_state_is_the_plain_predict_state_and_loading_it_clears_a_calibration(biased):
    plain = CalibratedPredict(Grade)
    assert "calibration" not in plain.dump_state()  # the keys of runs over uncalibrated programs do not change
    calibrated = CalibratedPredict(Grade).calibrate()
    calibrated.load_state(plain.dump_state())
    assert calibrated.calibration is None
