"""Verdicts by family: Holm's and Benjamini-Hochberg's adjusted p-values, and a comparison table judged as one
family on EM."""

import pytest

from ragscale.experiments.compare import RunResult, compare_runs, format_table
from ragscale.experiments.family import adjust, benjamini_hochberg, holm, verdict
from ragscale.experiments.paired import BootstrapCI


def run_result(run_id: str, method: str, pattern: str, start: int) -> RunResult:
    """A finished HotpotQA run right on the questions marked 1 in ``pattern``."""
    em = {f"q{i}": 100.0 * int(c) for i, c in enumerate(pattern)}
    return RunResult(run_id=run_id, run_name=run_id, method=method, optimizer="none", dataset="hotpotqa", lm="dummy",
                     start_time=start, em=em, f1=dict(em))  # fmt: skip


def test_holm_multiplies_the_ith_smallest_by_m_minus_i_and_keeps_the_order():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_benjamini_hochberg_scales_by_m_over_the_rank_from_the_largest_down():
    assert benjamini_hochberg([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.04, 0.04])


def test_a_missing_comparison_is_no_member_of_the_family():
    cis = [BootstrapCI(1.0, 0.5, 1.5, 10, p=0.02), None, BootstrapCI(1.0, 0.5, 1.5, 10, p=0.02)]
    adjusted = adjust(cis)
    assert adjusted[1] is None and [ci.p_adjusted for ci in adjusted if ci] == pytest.approx([0.04, 0.04])


def test_a_gain_whose_ci_excludes_zero_alone_is_not_called_real_in_a_table_of_five():
    runs = [
        run_result("base00", "closed-book", "0" * 60, 1),
        run_result("small0", "rag", "1" * 7 + "0" * 53, 2),  # alone: McNemar's p 2 / 2**7
        run_result("large0", "drag", "1" * 20 + "0" * 40, 3),
        *(run_result(f"tie{i}00", method, "0" * 60, 4 + i) for i, method in enumerate(("hyde", "rat", "ircot"))),
    ]
    rows = {row["run_id"]: row for row in compare_runs(runs, resamples=2000)}
    small, large = rows["small0"]["em_diff"], rows["large0"]["em_diff"]
    assert small.p == pytest.approx(2 / 2**7) and small.p < 0.05 < small.p_adjusted  # Holm: 4 x p
    assert large.p_adjusted < 0.05
    table = {line.split(" | ")[0].strip("| "): line for line in format_table(list(rows.values())).splitlines()}
    assert "+11.7 [" in table["small0"] and "] |" in table["small0"]  # shown, not marked
    assert "+33.3 [" in table["large0"] and "] * |" in table["large0"]
    assert "*" not in table["large0"].split(" | ")[11]  # F1, the secondary metric, is never marked


def test_one_rule_turns_a_difference_into_held_not_held_or_not_shown():
    real_up, real_down = BootstrapCI(2.0, 0.5, 3.5, 50, p=0.001), BootstrapCI(-2.0, -3.5, -0.5, 50, p=0.001)
    assert verdict(real_up) == "held" and verdict(real_down) == "not held"
    assert verdict(real_down, claimed=-1) == "held" and verdict(real_up, claimed=-1) == "not held"
    # a CI that excludes 0 decides nothing: the exact p does, adjusted within its family once it is
    assert verdict(BootstrapCI(6.0, 0.0, 14.0, 50, p=0.03)) == "held"
    assert verdict(BootstrapCI(6.0, 0.5, 14.0, 50, p=0.03, p_adjusted=0.09)) == "not shown"
    assert verdict(BootstrapCI(6.0, 0.5, 14.0, 50, p=0.2)) == "not shown" and verdict(None) == "not shown"
