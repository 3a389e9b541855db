"""The comparison table over tracked runs: the baseline each run is paired with, the rows shown, the forms printed."""

import json

import pytest

from ragscale.experiments import tracking
from ragscale.experiments.compare import (
    RunResult,
    compare_runs,
    find_run,
    format_behaviour,
    format_table,
    load_runs,
)


def scores(pattern: str) -> dict[str, float]:
    """Per-question scores in percent from a 0/1 string, ids q0, q1, ..."""
    return {f"q{i}": 100.0 * int(c) for i, c in enumerate(pattern)}


def run_result(run_id, method, pattern, start, dataset="hotpotqa", corpus_sha256=""):
    em = scores(pattern)
    return RunResult(
        corpus="hotpotqa" if corpus_sha256 else "",
        corpus_sha256=corpus_sha256,
        run_id=run_id,
        run_name=f"{method}-run",
        method=method,
        optimizer="none",
        dataset=dataset,
        lm="dummy",
        start_time=start,
        em=em,
        f1=dict(em),
    )


def test_compare_defaults_to_the_closed_book_baseline_of_each_dataset():
    runs = [
        run_result("aaa111", "closed-book", "0" * 30, 1),
        run_result("bbb222", "rag", "1" * 25 + "0" * 5, 2),
        run_result("ccc333", "closed-book", "1" * 30, 3, dataset="nq"),
    ]
    rows = {row["run_id"]: row for row in compare_runs(runs, resamples=1000)}
    assert rows["aaa111"]["is_baseline"] and rows["ccc333"]["is_baseline"]
    assert rows["bbb222"]["baseline_run_id"] == "aaa111"
    assert rows["bbb222"]["em_diff"].excludes_zero()
    table = format_table(list(rows.values()))
    assert "baseline" in table and "+83.3" in table


def test_runs_on_different_corpora_are_never_paired_and_each_keeps_its_latest_row():
    runs = [
        run_result("closed", "closed-book", "0" * 20, 1),
        run_result("own", "rag", "1" * 20, 2, corpus_sha256="a" * 64),
        run_result("pool", "rag", "1" * 10 + "0" * 10, 3, corpus_sha256="b" * 64),
    ]
    rows = {row["run_id"]: row for row in compare_runs(runs, resamples=200)}
    assert set(rows) == {"closed", "own", "pool"}  # the same method on two corpora is two rows
    assert rows["own"]["baseline_run_id"] == rows["pool"]["baseline_run_id"] == "closed"  # searches none: pairs
    fixed = {row["run_id"]: row for row in compare_runs(runs, baseline="own", resamples=200)}
    assert fixed["pool"]["baseline_run_id"] is None and fixed["pool"]["em_diff"] is None
    assert fixed["closed"]["em_diff"] is not None
    assert "hotpotqa (aaaaaaaa)" in format_table(list(fixed.values()))


def test_a_given_baseline_is_found_by_id_prefix_and_an_unknown_one_lists_the_runs():
    runs = [run_result("aaa111", "closed-book", "01" * 5, 1), run_result("bbb222", "rag", "11" * 5, 2)]
    assert find_run(runs, "bbb").run_id == "bbb222"
    with pytest.raises(ValueError, match=r"aaa111.*bbb222"):
        find_run(runs, "zzz")


def test_only_the_latest_run_of_each_configuration_is_shown_unless_all_are_asked_for():
    runs = [run_result("old", "rag", "0" * 10, 1), run_result("new", "rag", "1" * 10, 2)]
    assert [r["run_id"] for r in compare_runs(runs)] == ["new"]
    assert {r["run_id"] for r in compare_runs(runs, latest_only=False)} == {"old", "new"}


def log_fake_run(runs_dir, tmp_path, method, pattern):
    """A finished run in the MLflow store holding a predictions.jsonl, as the runner leaves it."""
    run_id = tracking.start_run(
        runs_dir,
        run_name=f"{method}-fake",
        params={"method": method, "optimizer": "none", "dataset": "hotpotqa", "lm": "dummy"},
    )
    path = tmp_path / run_id / "predictions.jsonl"
    path.parent.mkdir(parents=True)
    lines = [json.dumps({"id": f"q{i}", "em": float(c), "f1": float(c)}) for i, c in enumerate(pattern)]
    path.write_text("\n".join(lines) + "\n")
    tracking.log_artifacts(runs_dir, run_id, [path])
    tracking.end_run(runs_dir, run_id)
    return run_id


def test_runs_are_read_back_from_the_mlflow_store_with_their_predictions(tmp_path):
    runs_dir = tmp_path / "runs"
    base = log_fake_run(runs_dir, tmp_path, "closed-book", "0" * 20)
    rag = log_fake_run(runs_dir, tmp_path, "rag", "1" * 20)
    runs = load_runs(runs_dir)
    assert [r.run_id for r in runs] == [base, rag]
    assert runs[1].em["q3"] == 100.0
    rows = {row["run_id"]: row for row in compare_runs(runs)}
    assert rows[rag]["em_diff"].diff == pytest.approx(100.0)


def test_the_compare_command_prints_the_table_with_cis(tmp_path, capsys):
    from ragscale.experiments.cli import main

    runs_dir = tmp_path / "runs"
    log_fake_run(runs_dir, tmp_path, "closed-book", "0" * 20)
    log_fake_run(runs_dir, tmp_path, "rag", "1" * 10 + "0" * 10)
    assert main(["compare", "--runs-dir", str(runs_dir), "--json", str(tmp_path / "cmp.json")]) == 0
    out = capsys.readouterr().out
    assert "| closed-book |" in out and "baseline" in out and "+50.0 [" in out
    rows = json.loads((tmp_path / "cmp.json").read_text())
    assert rows[1]["em_diff"]["low"] > 0


def test_behaviour_shows_rates_as_percentages_and_counts_as_numbers():
    shown = format_behaviour({"questions_with_follow_up": 0.57, "follow_ups": 0.6, "graded_relevant": 0.25})
    assert shown == "questions_with_follow_up 57%, follow_ups 0.60, graded_relevant 25%"
    assert format_behaviour({}) == "none"


def test_compare_writes_a_chart_with_one_bar_per_run_and_score_beside_its_table_and_logs_both(tmp_path, capsys):
    from PIL import Image

    from ragscale.experiments.cli import main

    runs_dir = tmp_path / "runs"
    log_fake_run(runs_dir, tmp_path, "closed-book", "0" * 20)
    log_fake_run(runs_dir, tmp_path, "rag", "1" * 10 + "0" * 10)
    chart = tmp_path / "out" / "chart.png"
    assert main(["compare", "--runs-dir", str(runs_dir), "--chart", str(chart)]) == 0
    assert Image.open(chart).size[0] > 300 and "| rag |" in chart.with_suffix(".md").read_text()
    [logged] = tracking.finished_runs(runs_dir, kind="compare")
    artifacts = {a.path for a in tracking.client(runs_dir).list_artifacts(logged.info.run_id)}
    assert artifacts == {"chart.png", "chart.md"}
    assert len(tracking.finished_runs(runs_dir)) == 2  # a comparison is not a run to compare


def test_compare_prints_csv_and_json_when_asked(tmp_path, capsys):
    import csv

    from ragscale.experiments.cli import main

    runs_dir = tmp_path / "runs"
    log_fake_run(runs_dir, tmp_path, "closed-book", "0" * 20)
    log_fake_run(runs_dir, tmp_path, "rag", "1" * 20)
    assert main(["compare", "--runs-dir", str(runs_dir), "--format", "csv"]) == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert [r["method"] for r in rows] == ["closed-book", "rag"] and float(rows[1]["em_diff"]) == 100.0
    assert main(["compare", "--runs-dir", str(runs_dir), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[1]["em_diff"]["diff"] == 100.0
