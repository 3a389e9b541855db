"""The computation allocation model: sigmoid^-1(P(theta)) ~ (a + b * i)^T log(theta) + c, fitted by least squares."""

import itertools
import json

import pytest

from ragscale.experiments.sweep import allocation
from ragscale.experiments.sweep.allocation import AllocationModel, Observation
from ragscale.experiments.sweep.rows import Row

A, B, C = [0.45, 0.20, 0.10], [1.5, -0.8, 0.0], -1.2
TASKS = {"hotpotqa": (0.25, 0.05), "musique": (0.10, 0.02), "nq": (0.35, 0.15)}
GRID = list(itertools.product((0, 1, 2, 5, 10), (0, 1, 2, 4), (0, 1, 2, 3)))


def truth() -> AllocationModel:
    return AllocationModel(a=A, b=B, c=C)


def synthetic(tasks=TASKS) -> list[Observation]:
    model = truth()
    return [Observation(k, m, n, i, model.predict(k, m, n, i), n=10_000) for i in tasks.values() for k, m, n in GRID]


def test_the_fit_recovers_known_parameters_from_data_generated_by_the_models_own_formula():
    fitted = allocation.fit(synthetic())
    assert fitted.a == pytest.approx(A, abs=1e-6)
    assert fitted.b[:2] == pytest.approx(B[:2], abs=1e-6)
    assert fitted.c == pytest.approx(C, abs=1e-6)
    assert fitted.identifiable
    assert fitted.r2 == pytest.approx(1.0) and fitted.mse == pytest.approx(0.0, abs=1e-12)


def test_with_one_task_the_fit_recovers_the_effective_slopes_and_says_a_and_b_are_not_separable():
    i = TASKS["hotpotqa"]
    fitted = allocation.fit(synthetic({"hotpotqa": i}))
    assert not fitted.identifiable
    assert fitted.effective(i) == pytest.approx(truth().effective(i), abs=1e-6)
    assert fitted.c == pytest.approx(C, abs=1e-6)


def test_noise_lowers_r2_and_raises_mse():
    noisy = [
        Observation(o.docs, o.shots, o.iterations, o.informativeness, min(0.99, o.accuracy * (1.2 if j % 2 else 0.8)))
        for j, o in enumerate(synthetic())
    ]
    fitted = allocation.fit(noisy)
    assert 0 < fitted.r2 < 1 and fitted.mse > 0.001


def test_accuracies_of_zero_and_one_are_clipped_before_the_logit():
    rows = [Observation(k, 0, 0, (0.1, 0.1), acc, n=5) for k, acc in ((0, 0.0), (1, 0.4), (2, 0.6), (5, 1.0))]
    fitted = allocation.fit(rows)
    assert all(abs(v) < 100 for v in [*fitted.a, fitted.c])


def test_informativeness_is_one_document_or_one_shot_minus_neither():
    rows = [
        Row("closed-book", 0, 0, 0, acc=10.0),
        Row("closed-book", 0, 1, 0, acc=15.0),
        Row("drag", 1, 0, 0, acc=30.0),
    ]
    assert allocation.informativeness(rows) == pytest.approx((0.20, 0.05))
    with pytest.raises(ValueError, match="1 document, 0 shots"):
        allocation.informativeness(rows[:2])


def test_the_predicted_best_configuration_is_the_highest_predicted_within_the_budget():
    model, i = truth(), TASKS["hotpotqa"]
    candidates = [
        Row("drag", k, m, 0, estimated_effective_context=150 * k + 200 * m + 100)
        for k, m in itertools.product((1, 2, 5, 10), (0, 1, 2, 4))
    ]
    best = allocation.predict_best(model, candidates, 1000, i)
    within = [c for c in candidates if c.estimated_effective_context <= 1000]
    assert best.estimated_effective_context <= 1000
    assert model.predict(best.docs, best.shots, 0, i) == max(model.predict(c.docs, c.shots, 0, i) for c in within)
    assert allocation.predict_best(model, candidates, 50, i) is None


def test_assess_reports_the_predicted_accuracy_as_a_percentage_of_the_grids_best():
    rows = [
        Row("drag", 1, 0, 0, acc=20.0, em=20.0, effective_context_tokens_per_question=200),
        Row("drag", 5, 0, 0, acc=40.0, em=40.0, effective_context_tokens_per_question=800),
        Row("drag", 1, 4, 0, acc=50.0, em=50.0, effective_context_tokens_per_question=900),
    ]
    model = AllocationModel(a=[1.0, 0.0, 0.0], b=[0.0, 0.0, 0.0], c=-2.0)  # prefers documents, ignores shots
    result = allocation.assess(model, rows, 1000, (0.1, 0.1))
    assert result["predicted"]["docs"] == 5 and result["best"]["shots"] == 4
    assert result["percent_of_best"] == pytest.approx(80.0)


def test_the_extrapolation_check_fits_below_a_budget_and_predicts_at_the_next():
    model, i = truth(), TASKS["hotpotqa"]
    rows = [
        Row("drag", k, m, 0, effective_context_tokens_per_question=150 * k + 200 * m + 100,
            acc=100 * model.predict(k, m, 0, i), em=0.0)
        for k, m in itertools.product((1, 2, 5, 10), (0, 1, 2, 4))
    ]  # fmt: skip
    checks = allocation.extrapolation(rows, [1000, 2000], i)
    assert [c["fit_budget"] for c in checks] == [1000] and checks[0]["budget"] == 2000
    assert 0 < checks[0]["percent_of_best"] <= 100


def test_the_model_round_trips_through_json():
    fitted = allocation.fit(synthetic())
    again = AllocationModel.from_json(json.loads(json.dumps(fitted.to_json())))
    assert again == fitted
