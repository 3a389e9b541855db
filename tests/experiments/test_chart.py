"""The comparison chart: an EM and an F1 bar per run, each with the CI of the run's own mean."""

from ragscale.experiments.chart import plot
from ragscale.experiments.compare import RunResult, compare_runs


def run_result(run_id: str, method: str, pattern: str, start: int) -> RunResult:
    records = [{"id": f"q{i}", "em": int(c), "f1": int(c)} for i, c in enumerate(pattern)]
    return RunResult.from_records(run_id, records, method=method, optimizer="none", dataset="hotpotqa", lm="dummy",
                                  start_time=start)  # fmt: skip


def test_the_chart_has_an_em_and_an_f1_bar_per_run_with_its_ci(tmp_path, monkeypatch):
    import matplotlib.axes

    bars = []
    draw = matplotlib.axes.Axes.bar
    monkeypatch.setattr(
        matplotlib.axes.Axes, "bar", lambda ax, x, h, *a, **k: bars.append((list(h), k)) or draw(ax, x, h, *a, **k)
    )
    runs = [run_result("a", "closed-book", "0" * 10, 1), run_result("b", "rag", "1" * 5 + "0" * 5, 2)]
    plot(compare_runs(runs), runs, tmp_path / "c.png")
    assert [heights for heights, _ in bars] == [[0.0, 50.0], [0.0, 50.0]]  # EM, then F1 (equal here), per run
    low, high = bars[0][1]["yerr"]
    assert low[1] > 0 and high[1] > 0 and low[0] == high[0] == 0  # the CI of 50% over 10 questions; none of 0%
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")
