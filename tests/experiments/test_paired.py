"""Paired statistics: a difference over the questions two runs share, its bootstrap CI and p-value, as a table
shows it."""

import pytest

from ragscale.experiments.paired import BootstrapCI, format_ci, paired_bootstrap


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


def test_a_small_p_value_is_resolved_below_one_over_the_resamples_and_the_ci_is_unchanged():
    import numpy as np

    better = scores("1" * 40 + "0" * 10)
    worse = scores("1" * 10 + "0" * 40)
    ci = paired_bootstrap(better, worse, resamples=2000, seed=0)
    assert ci.p < 1 / 2000 and ci.p == pytest.approx(2 / 200_001)  # no draw of 200,000 on the far side
    # a family of 100 such comparisons can still call it real (Holm: 100 p below alpha)
    assert 100 * ci.p < 0.05
    # the CI comes from the first 2,000 draws, as without the refinement
    diffs = np.array([better[q] - worse[q] for q in sorted(better)])
    rng = np.random.default_rng(0)
    first = diffs[rng.integers(0, len(diffs), size=(2000, len(diffs)))].mean(axis=1)
    assert (ci.low, ci.high) == tuple(np.quantile(first, [0.025, 0.975]))
    assert paired_bootstrap(scores("1100110011" * 2), scores("1010101011" * 2), resamples=2000, seed=0).p > 0.5


def test_a_difference_is_written_with_its_ci_and_marked_only_when_called_real():
    real = BootstrapCI(diff=2.0, low=0.5, high=3.5, n=50)
    assert format_ci(real) == "+2.0 [+0.5, +3.5] *" and format_ci(real, mark=False) == "+2.0 [+0.5, +3.5]"
    assert format_ci(BootstrapCI(diff=2.0, low=0.5, high=3.5, n=50, p=0.04, p_adjusted=0.2)) == "+2.0 [+0.5, +3.5]"
    assert format_ci(real, is_base=True) == "baseline" and format_ci(None).startswith("n/a")
