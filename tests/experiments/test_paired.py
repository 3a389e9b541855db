"""Paired statistics: a difference over the questions two runs share, its bootstrap CI and p-value, as a table
shows it."""

import itertools

import pytest

from ragscale.experiments.paired import (
    FLIPS_ERROR,
    BootstrapCI,
    format_ci,
    mcnemar_p,
    paired_bootstrap,
    sign_flip_p,
)


def scores(pattern: str) -> dict[str, float]:
    """Per-question scores in percent from a 0/1 string, ids q0, q1, ..."""
    return {f"q{i}": 100.0 * int(c) for i, c in enumerate(pattern)}


def test_identical_runs_have_a_zero_difference_whose_ci_contains_zero():
    a = scores("1010011100" * 5)
    ci = paired_bootstrap(a, dict(a), resamples=1000, seed=1)
    assert ci.diff == 0.0
    assert ci.low <= 0.0 <= ci.high
    assert not ci.excludes_zero()


def test_a_clearly_better_run_has_a_ci_that_excludes_zero():
    better = scores("1" * 40 + "0" * 10)  # 80% on 50 questions
    worse = scores("1" * 10 + "0" * 40)  # 20% on the same 50
    ci = paired_bootstrap(better, worse, resamples=2000, seed=0)
    assert ci.diff == pytest.approx(60.0)
    assert ci.low > 0 and ci.excludes_zero()
    assert ci.low < 60.0 < ci.high


def test_noisy_small_difference_has_a_ci_that_contains_zero():
    a = scores("1100110011" * 2)
    b = scores("1010101011" * 2)  # same mean as a on different questions
    ci = paired_bootstrap(a, b, resamples=1000, seed=0)
    assert ci.low < 0 < ci.high


def test_questions_are_paired_by_id_and_unshared_ids_are_left_out():
    a = {"x": 100.0, "y": 0.0, "only-in-a": 100.0}
    b = {"y": 0.0, "x": 0.0, "only-in-b": 100.0}
    ci = paired_bootstrap(a, b, resamples=500, seed=0)
    assert ci.n == 2
    assert ci.diff == pytest.approx(50.0)
    assert paired_bootstrap({"x": 1.0}, {"z": 1.0}) is None


def test_a_small_gain_on_correlated_runs_excludes_zero_only_because_questions_are_paired():
    import numpy as np

    base = scores("10" * 25)  # 50% on 50 questions
    gained = {"q1", "q3", "q5", "q7", "q9", "q11"}  # six questions base misses, everything else the same
    better = {q: 100.0 if q in gained else score for q, score in reversed(base.items())}  # ids in another order
    ci = paired_bootstrap(better, base, resamples=2000, seed=0)
    assert ci.diff == pytest.approx(12.0) and ci.n == 50
    assert ci.low > 0 and ci.excludes_zero()  # every pair differs by 0 or +100: the gain is certain
    # the same scores resampled unpaired (two independent samples) give a CI that contains 0
    rng = np.random.default_rng(0)
    a, b = np.array(list(better.values())), np.array(list(base.values()))
    unpaired = a[rng.integers(0, 50, (2000, 50))].mean(axis=1) - b[rng.integers(0, 50, (2000, 50))].mean(axis=1)
    low, high = np.quantile(unpaired, [0.025, 0.975])
    assert low < 0 < high


def test_the_bootstrap_is_reproducible_with_its_seed():
    a, b = scores("1101001110" * 3), scores("0101100110" * 3)
    assert paired_bootstrap(a, b, seed=7) == paired_bootstrap(a, b, seed=7)


def test_a_0_1_metric_gets_mcnemars_exact_p_which_no_seed_moves():
    # 9 questions better, 1 worse, 40 alike: twice P(X <= 1) for X ~ Binomial(10, 1/2) = 2 * 11 / 1024
    a, b = scores("1" * 9 + "0" + "10" * 20), scores("0" * 9 + "1" + "10" * 20)
    found = {paired_bootstrap(a, b, resamples=200, seed=seed).p for seed in range(200)}
    assert len(found) == 1 and found.pop() == pytest.approx(22 / 1024)
    assert mcnemar_p(9, 1) == mcnemar_p(1, 9) == 22 / 1024 and mcnemar_p(5, 5) == mcnemar_p(0, 0) == 1.0
    # far past what 2,000 bootstrap draws resolve, and exact: 40 against 0 discordant
    assert paired_bootstrap(scores("1" * 40 + "0" * 10), scores("0" * 50)).p == pytest.approx(2 / 2**40)


def every_flip(nonzero: list[float]) -> float:
    """The sign-flip p-value by brute force: every one of the 2**n patterns summed."""
    sums = [
        abs(sum(s * d for s, d in zip(signs, nonzero, strict=True)))
        for signs in itertools.product((1, -1), repeat=len(nonzero))
    ]
    return sum(t >= abs(sum(nonzero)) - 1e-9 for t in sums) / 2 ** len(nonzero)


def test_a_continuous_metric_gets_the_exact_sign_flip_test_up_to_twenty_differing_questions():
    diffs = [12.5, -3.0, 40.0, 7.25, 0.0, -15.0, 22.0, 5.0, 9.5, -1.0]
    nonzero = [d for d in diffs if d]
    assert sign_flip_p(diffs) == pytest.approx(every_flip(nonzero), rel=1e-12)
    assert sign_flip_p([0.0, 0.0]) == 1.0 and sign_flip_p([-2.0, 2.0, 2.0]) == 1.0


def test_recall_differences_are_counted_exactly_whatever_their_number(monkeypatch):
    from ragscale.experiments import paired

    # recall over two or three gold passages: differences in halves and thirds
    diffs = [0.5, 1.0, -0.5, 1 / 3, 2 / 3, 0.5, -1.0, 0.5, -1 / 3, 1.0, 1.0, 0.0]
    nonzero = [d for d in diffs if d]
    assert sign_flip_p(diffs) == pytest.approx(every_flip(nonzero), rel=1e-12)
    monkeypatch.setattr(paired, "FLIPS", 0)  # no draw is made: 400 of them are counted exactly
    assert 0 < sign_flip_p(diffs * 40) < 1e-6


def test_past_twenty_differing_questions_the_sign_flip_p_is_within_its_stated_error_of_the_exact_one(monkeypatch):
    import numpy as np

    from ragscale.experiments import paired

    diffs = np.random.default_rng(3).normal(0.4, 1.0, 21)
    drawn = sign_flip_p(diffs)
    monkeypatch.setattr(paired, "EXACT_FLIPS", 21)
    exact = sign_flip_p(diffs)
    assert 0.001 < exact < 0.5 and abs(drawn - exact) < 4 * FLIPS_ERROR and FLIPS_ERROR < 0.0012


def test_a_difference_is_written_with_its_ci_and_marked_only_when_called_real():
    real = BootstrapCI(diff=2.0, low=0.5, high=3.5, n=50, p=0.01)
    assert format_ci(real) == "+2.0 [+0.5, +3.5] *" and format_ci(real, mark=False) == "+2.0 [+0.5, +3.5]"
    assert format_ci(BootstrapCI(diff=2.0, low=0.5, high=3.5, n=50, p=0.04, p_adjusted=0.2)) == "+2.0 [+0.5, +3.5]"
    assert format_ci(real, is_base=True) == "baseline" and format_ci(None).startswith("n/a")
