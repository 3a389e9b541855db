"""The budget sweep: estimated effective context, resumable child runs, the Table 1 summary and the plot.

Most tests here use a metered `dspy.LM` (as `load_lm` returns) whose engine renders every prompt with SmolLM2's
real chat template and counts it with SmolLM2's real tokenizer, but answers from a script instead of running the
weights: the counted tokens are what the real model would be fed, the answers are not its answers, and the control
flow (how many follow-ups IterDRAG asks) is fixed by the script. One test runs the real SmolLM2-135M on a handful of
HotpotQA questions: there the model decides how many follow-ups to ask and when the adapter must ask again. What is
compared in the estimate tests: the estimate the sweep made just before a configuration ran (from stand-in
documents and demonstrations, calibrated on the configurations finished before it) against the input tokens the
meter counted while the programs really ran (real BM25 retrieval on real HotpotQA questions, real labeled
demonstrations, the real FieldAdapter).
"""

import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from doubles import clean_checkout, tokenizer_lm

from ragscale.experiments import tracking
from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.sweep.allocation import allocate
from ragscale.experiments.sweep.grid import Grid, Point, grid_points, parse_size, point_config
from ragscale.experiments.sweep.ledger import ALLOCATION, LEDGER, RESULTS, SCORES, run_records
from ragscale.experiments.sweep.outcome import PLOT
from ragscale.experiments.sweep.report import budget_table
from ragscale.experiments.sweep.rows import Row
from ragscale.experiments.sweep.run import run_sweep
from ragscale.experiments.sweep.scores import recheck
from ragscale.experiments.sweep.setup import Loaded
from ragscale.experiments.sweep.sitting import SweepOptions
from ragscale.experiments.sweep.speed import Speed

SPEED = Speed(1000.0, 100.0, "stated")  # given: else the sweep times two calls of its LM before planning


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from transformers import AutoTokenizer

    from ragscale.programs.lm.models import resolve

    path = resolve("smollm2-135m")
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.fixture(scope="module")
def examples(shared_datasets):
    from ragscale.data import load_split

    return load_split("hotpotqa", "train", shared_datasets)[:8], load_split("hotpotqa", "dev", shared_datasets)[:3]


def base_config(runs_dir: Path) -> RunConfig:
    return RunConfig(
        method="rag",
        dataset="hotpotqa",
        optimizer="labeled",
        retriever="bm25",
        runs_dir=runs_dir,
        limit=3,
        train_limit=8,
        threads=2,
    )


# IterDRAG may ask 3 follow-ups; the script asks 2: a bound counts one follow-up too many.
GRID = Grid(methods=("rag", "drag", "iterdrag"), docs=(1, 3), shots=(0, 2), iterations=(3,), budgets=(3000, 8000))


@pytest.fixture(scope="module")
def swept(tmp_path_factory, smollm2_tokenizer, examples):
    """One sweep, shared by the tests that read it; a test that reruns it works on a copy (``copy_runs``)."""
    runs_dir = tmp_path_factory.mktemp("sweep") / "runs"
    lm = tokenizer_lm(smollm2_tokenizer, examples)
    reports: list[str] = []
    with clean_checkout():  # its runs are published by the tests below
        result = run_sweep(
            GRID,
            base_config(runs_dir),
            SweepOptions(progress=False),
            Loaded(lm=lm, examples=examples, speed=SPEED),
            report=reports.append,
        )
    return result, reports, runs_dir


def copy_runs(runs_dir: Path, to: Path) -> Path:
    """A copy of a runs directory that refers to itself: its MLflow store's artifact locations point into it."""
    copied = shutil.copytree(runs_dir, to / "runs")
    with sqlite3.connect(copied / "mlflow.db") as db:
        old, new = runs_dir.resolve().as_uri(), copied.resolve().as_uri()
        db.execute("UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)", (old, new))
        db.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (old, new))
    return copied


def test_the_grid_has_iterations_for_iterdrag_only_and_closed_book_baselines():
    points = grid_points(GRID)
    assert Point("closed-book", 0, 0) in points and Point("closed-book", 0, 1) in points
    assert {p.iterations for p in points if p.method == "iterdrag"} == {3}
    assert {p.iterations for p in points if p.method != "iterdrag"} == {0}
    assert len(points) == 2 + 4 + 2 + 4  # DRAG with no shot is RAG with none: the RAG point stands for it
    assert {p.shots for p in points if p.method == "drag"} == {2}
    alone = grid_points(replace(GRID, methods=("drag",)))
    assert {p.shots for p in alone if p.method == "drag"} == {0, 2}


def test_the_configurations_run_cheapest_first_whatever_their_method():
    from ragscale.experiments.sweep.estimate import Estimate
    from ragscale.experiments.sweep.plan import PlannedPoint, format_plan, run_order

    def planned(point: Point, tokens: float, status: str = "run") -> PlannedPoint:
        estimate = Estimate(tokens, 0.0, 1.0, round(tokens), tokens, tokens, "counted")
        return PlannedPoint(point, point.label, point.docs, estimate, tokens, status)

    plan = [
        planned(Point("rag", 20, 0), 2800),
        planned(Point("rag", 1, 0), 190, "done"),
        planned(Point("drag", 1, 1), 300),
        planned(Point("iterdrag", 1, 0, 2), 600),  # ties with its smaller cap, which runs first
        planned(Point("iterdrag", 1, 0, 1), 600),
        planned(Point("drag", 50, 4), 36_000, "over budget"),
    ]
    order = [p.point.label for p in run_order(plan)]
    assert order == ["drag k=1 m=1", "iterdrag k=1 m=0 n=1", "iterdrag k=1 m=0 n=2", "rag k=20 m=0"]
    summary = format_plan(plan, None, 100).splitlines()[-1]  # so what is done reaches up to the cheapest left
    assert summary.startswith("4 to run, 1 done, 1 skipped; 100 questions each; every configuration estimated under "
                              "300 tokens/question done or skipped; estimated ")  # fmt: skip


def test_budgets_read_k_and_m_suffixes():
    assert [parse_size(t) for t in ("800", "2k", "16K", "1m", "1.5k")] == [800, 2000, 16000, 1_000_000, 1500]


def error(row) -> float:
    return abs(row.estimated_effective_context - row.effective_context()) / row.effective_context()


def test_single_step_methods_are_estimated_within_ten_percent_of_the_counted_tokens(swept):
    result, _, _ = swept
    single_step = [r for r in result.rows if r.method != "iterdrag"]
    assert len(single_step) == 8
    for row in single_step:
        assert error(row) <= 0.10, (
            row.method,
            row.docs,
            row.shots,
            row.estimated_effective_context,
            row.effective_context(),
        )


def test_iterdrag_is_estimated_at_every_iteration_until_a_finished_configuration_shows_how_many_it_asks(swept):
    result, _, _ = swept
    first, *later = [r for r in result.rows if r.method == "iterdrag"]
    assert first.estimate_basis == "bound"
    # A decomposition is one call (its follow-up, or "none"), an intermediate answer one, the synthesis one.
    assert first.estimated_calls == 3 * (1 + 1) + 1 > first.lm_calls_per_question == 2 * (1 + 1) + 1 + 1
    assert first.estimated_effective_context > 1.1 * first.effective_context()
    assert [r.estimate_basis for r in later] == ["follow-ups (1 run)", "calibrated (1 run)", "calibrated (1 run)"]
    for row in later:
        # The follow-ups asked in the first configuration stand in for the later ones' (same questions).
        assert row.estimated_calls == row.lm_calls_per_question == 2 * (1 + 1) + 1 + 1
        # Its demonstrations are bootstrapped chains, whose follow-ups' text only the run shows: the estimate stands
        # in for them (estimate.STAND_IN_HOPS) and its calibration scales, within 15% of the counted tokens.
        assert error(row) <= 0.15, (
            row.docs,
            row.shots,
            row.estimated_effective_context,
            row.effective_context(),
        )


REAL_GRID = Grid(
    methods=("rag", "drag", "iterdrag"), docs=(1, 2), shots=(1,), iterations=(1,), budgets=(4000,), baselines=False
)


@pytest.fixture(scope="module")
def real_swept(tmp_path_factory, shared_datasets):
    """SmolLM2-135M itself on 4 HotpotQA dev questions: each method's first configuration has nothing to learn
    from (a floor for RAG and DRAG, a bound for IterDRAG), its second is calibrated on the first."""
    from ragscale.data import load_split
    from ragscale.programs.lm import load_lm

    train, dev = load_split("hotpotqa", "train", shared_datasets)[:8], load_split("hotpotqa", "dev", shared_datasets)
    base = replace(base_config(tmp_path_factory.mktemp("real") / "runs"), limit=4)
    lm = load_lm("smollm2-135m", cache=False, weights="fp32")  # the reference layout: the same answers on every CPU
    return run_sweep(
        REAL_GRID, base, SweepOptions(progress=False), Loaded(lm=lm, examples=(train, dev[:4]), speed=SPEED)
    )


@pytest.mark.slow
def test_on_a_real_small_run_estimates_are_a_floor_or_a_bound_until_calibrated_then_within_ten_percent(real_swept):
    for method in ("rag", "drag", "iterdrag"):
        first, second = [r for r in real_swept.rows if r.method == method]
        if method == "iterdrag":
            # Every iteration taken (n = 1: decompose, answer_sub, synthesize), before retries, which add to it as to
            # a single-step method's; its tokens stand in for follow-ups not written yet (the question, numbered).
            # How far under the bound the run stays is SmolLM2's to say (it often writes "none" at once).
            assert first.estimate_basis == "bound" and first.estimated_calls == 3
            assert first.estimated_effective_context >= first.effective_context(), (
                first.estimated_effective_context,
                first.effective_context(),
            )
        else:
            assert (
                first.estimate_basis == "counted"
                and first.estimated_effective_context <= first.effective_context() + 0.1
            )
        assert second.estimate_basis == "calibrated (1 run)"
        assert error(second) <= 0.10, (
            method,
            second.estimated_effective_context,
            second.effective_context(),
        )


def test_the_plan_says_which_estimates_are_bounds_and_a_rerun_plan_that_they_are_calibrated(
    swept, smollm2_tokenizer, examples, tmp_path
):
    _, reports, shared_runs = swept
    runs_dir = copy_runs(shared_runs, tmp_path)
    first_plan = next(text for text in reports if text.startswith("| configuration"))
    assert "| iterdrag k=1 m=0 n=3 | " in first_plan
    assert {line.split(" | ")[2] for line in first_plan.splitlines() if line.startswith("| iterdrag")} == {"bound"}
    assert {line.split(" | ")[2] for line in first_plan.splitlines() if line.startswith("| rag")} == {"counted"}
    again = run_sweep(
        GRID,
        base_config(runs_dir),
        SweepOptions(progress=False),
        Loaded(lm=tokenizer_lm(smollm2_tokenizer), examples=examples, speed=SPEED),
    )
    bases = {p.point.method: p.estimate.basis for p in again.plan}
    assert bases["iterdrag"] == "calibrated (2 runs)" and bases["rag"] == "calibrated (2 runs)"


def test_each_configuration_is_a_child_run_of_the_sweep_run(swept):
    result, _, runs_dir = swept
    client = tracking.client(runs_dir)
    assert len(result.ran) == len(grid_points(GRID))
    for row in result.rows:
        run = client.get_run(row.run_id)
        assert run.data.tags["mlflow.parentRunId"] == result.parent_run_id
        assert run.data.tags["ragscale.sweep_key"] == row.key
    assert client.get_run(result.parent_run_id).data.tags[tracking.RUN_KIND_TAG] == "sweep"


def test_a_rerun_of_a_finished_sweep_runs_no_configuration(swept, smollm2_tokenizer, examples, tmp_path):
    result, _, shared_runs = swept
    runs_dir = copy_runs(shared_runs, tmp_path)
    lm = tokenizer_lm(smollm2_tokenizer)
    again = run_sweep(
        GRID, base_config(runs_dir), SweepOptions(progress=False), Loaded(lm=lm, examples=examples, speed=SPEED)
    )
    assert again.ran == [] and lm.engine.calls == 0
    assert {r.key for r in again.rows} == {r.key for r in result.rows}


def test_the_ledger_is_not_needed_to_resume_the_mlflow_runs_are_enough(swept, smollm2_tokenizer, examples, tmp_path):
    result, _, shared_runs = swept
    runs_dir = copy_runs(shared_runs, tmp_path)
    (runs_dir / result.sweep_dir.relative_to(shared_runs.resolve()) / LEDGER).unlink()
    lm = tokenizer_lm(smollm2_tokenizer)
    again = run_sweep(
        GRID, base_config(runs_dir), SweepOptions(progress=False), Loaded(lm=lm, examples=examples, speed=SPEED)
    )
    assert again.ran == [] and lm.engine.calls == 0


def test_the_plot_is_written_and_logged_to_mlflow(swept):
    result, _, runs_dir = swept
    assert result.plot_path is not None and result.plot_path.stat().st_size > 1000
    assert result.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tracking.artifact_path(runs_dir, result.parent_run_id, PLOT).exists()


def test_the_table_has_the_best_configuration_per_method_and_overall_within_each_budget(swept):
    from ragscale.experiments.sweep.grid import rows_of
    from ragscale.experiments.sweep.heldout import HeldOut
    from ragscale.experiments.sweep.report import fits

    result, _, _ = swept
    measured = {r.acc for r in result.rows}
    assert len(measured) > 1, "the scripted reader must be right on some configurations and wrong on others"
    scores = json.loads((result.sweep_dir / SCORES).read_text())
    held_out = HeldOut(lambda r: scores.get(r.run_id), result.rows)

    def chosen(pool):  # the most EM on the choosing half, then the fewest tokens, then the first label
        return min(pool, key=lambda r: (-held_out.em(r, choosing=True), r.effective_context(), r.label)).label

    for budget in GRID.budgets:
        within = [r for r in result.rows if fits(r, budget) and r.run_id in scores]
        entries = {e["method"]: e for e in result.table if e["budget"] == budget}
        assert entries["best"]["config"] == chosen(within)
        for method in {r.method for r in within}:
            assert entries[method]["config"] == chosen(rows_of(method, within))
        assert all(e[EFFECTIVE_CONTEXT] <= budget for e in entries.values())


def test_the_claims_pair_runs_over_their_questions_and_a_chosen_best_over_its_held_out_half(swept, examples):
    result, _, _ = swept
    stored = json.loads((result.sweep_dir / "results.json").read_text())
    claims = {c["claim"].split(",")[0]: c for c in stored["claims"]}
    assert "retrieval beats closed-book" in claims
    paired = [p for c in stored["claims"] for p in c["pairs"]]
    n = len(examples[1])  # a comparison with a chosen best: on the half of the questions it was not chosen on
    assert paired and all(p["n"] == (n // 2 if p["held_out"] else n) for p in paired if p["diff"] is not None)
    assert {p["held_out"] for p in paired if p["diff"] is not None} == {True, False}
    assert all(c["verdict"].split(":")[0] in ("held", "not held", "not shown") for c in stored["claims"])
    written = (result.sweep_dir / "table.md").read_text()
    assert "| the paper's claim |" in written and "| k | m | rag | drag | iterdrag n=3 |" in written


@pytest.fixture
def copied_folder(swept, tmp_path) -> Path:
    """The sweep's results, scores and allocation model alone: no MLflow store, no work folders."""
    result, _, _ = swept
    folder = tmp_path / "copied"
    folder.mkdir()
    for name in (RESULTS, SCORES, ALLOCATION):
        shutil.copy(result.sweep_dir / name, folder / name)
    return folder


def test_the_claims_are_checked_again_from_the_sweeps_folder_alone(copied_folder):
    gold, _ = json.loads((copied_folder / RESULTS).read_text())["oracle"]
    assert gold["run_id"] in json.loads((copied_folder / SCORES).read_text())
    again, stored = recheck(copied_folder)
    assert again == stored and any(p["diff"] is not None for c in again for p in c["pairs"])


def test_a_claim_decided_by_a_configuration_the_sweep_found_below_its_floor_is_not_tested_when_checked_again(
    copied_folder,
):
    results = json.loads((copied_folder / RESULTS).read_text())
    assert results["below_floor"] == {}  # the scripted reader's programs keep their steps, or learned nothing
    _, stored = recheck(copied_folder)
    decider = next(name for c in stored for name in c["decides"] if name.startswith(("drag", "iterdrag")))
    results["below_floor"] = {decider: [["questions_with_follow_up", 0.0, 0.5]]}
    (copied_folder / RESULTS).write_text(json.dumps(results))
    again, _ = recheck(copied_folder)
    marked = [c for c in again if decider in c["decides"]]
    assert marked and all(c["verdict"] == f"not tested ({decider} below its floor)" for c in marked)
    assert all(c["verdict"] == s["verdict"] for c, s in zip(again, stored, strict=True) if decider not in c["decides"])


def test_scores_that_are_not_the_runs_rows_are_refused_naming_the_run(copied_folder):
    gold, _ = json.loads((copied_folder / RESULTS).read_text())["oracle"]
    scores = json.loads((copied_folder / SCORES).read_text())
    question = next(iter(scores[gold["run_id"]]))
    scores[gold["run_id"]][question] = 100.0 - scores[gold["run_id"]][question]  # one question's Acc flipped
    (copied_folder / SCORES).write_text(json.dumps(scores))
    with pytest.raises(ConfigError, match=f"run {gold['run_id']} has"):
        recheck(copied_folder)


def test_a_folder_without_its_scores_names_the_missing_file(copied_folder):
    (copied_folder / SCORES).unlink()
    with pytest.raises(ConfigError, match=r"scores\.json: not found"):
        recheck(copied_folder)


def test_a_published_sweep_makes_its_report_again_from_its_answers_alone(swept, tmp_path, monkeypatch):
    import gzip

    from ragscale.published import directives, pages
    from ragscale.published.sweeps import PLOT, load, publish, report

    result, _, runs_dir = swept
    folder = publish(result.sweep_dir, runs_dir, tmp_path / "published", command="pytest")
    again = report(load(folder))
    assert (
        "\n\n".join([again["table"], again["grid"], again["claims"]]) + "\n"
        == (result.sweep_dir / "table.md").read_text()
    )
    assert (folder / "oracle-gold.jsonl.gz").exists() and (folder / "rag-k3-m2.jsonl.gz").exists()
    estimates = again["estimates"].splitlines()[2:]  # each configuration: planned with, counted, the error
    assert len(estimates) == len(result.rows)
    for line, row in zip(estimates, result.rows, strict=True):
        planned, counted = row.estimated_effective_context, row.effective_context_tokens_per_question
        assert line.startswith(f"| {row.label} | {planned:,.1f} | {row.estimate_basis} | {counted:,.1f} |")
        assert line.endswith(f"| {(planned - counted) / counted:+.1%} |")
    assert (folder / PLOT).stat().st_size > 0
    monkeypatch.setattr(directives, "RESULTS", tmp_path)
    assert again["table"] in pages.render("<!--= sweep published table -->x<!--/-->")
    with pytest.raises(directives.DirectiveError, match="sweep has no part 'best'; valid: table, grid"):
        pages.render("<!--= sweep published best -->x<!--/-->")

    records = folder / "rag-k3-m2.jsonl.gz"  # one answer scored otherwise: the grid says so
    with gzip.open(records, "rt") as lines:
        rows = [json.loads(line) for line in lines]
    rows[0]["acc"] = 1.0 - rows[0]["acc"]
    with gzip.open(records, "wt") as out:
        out.writelines(json.dumps(r) + "\n" for r in rows)
    assert report(load(folder))["grid"] != again["grid"]


def test_a_sweep_goes_on_from_its_published_rows_on_a_fresh_machine(swept, smollm2_tokenizer, examples, tmp_path):
    from ragscale.experiments.sweep.adopt import MANIFEST
    from ragscale.published.sweeps import load, publish

    result, _, runs_dir = swept
    folder = publish(result.sweep_dir, runs_dir, tmp_path / "published", command="pytest")
    made = json.loads((folder / MANIFEST).read_text())["rows"]["rag-k1-m0"]["made"]
    assert made["cpu"] and made["git_commit"]
    fresh = tmp_path / "fresh" / "runs"  # no MLflow store, no work folders, no ledger: only the published folder
    again = run_sweep(
        GRID,
        base_config(fresh),
        SweepOptions(progress=False, adopt_from=folder),
        Loaded(lm=tokenizer_lm(smollm2_tokenizer, examples), examples=examples, speed=SPEED),
        report=lambda _: None,
    )
    assert again.ran == [] and again.failed == [] and len(again.rows) == len(result.rows)
    assert [r.run_id for r in again.oracle] == [r.run_id for r in result.oracle]
    assert (again.sweep_dir / "table.md").read_text() == (result.sweep_dir / "table.md").read_text()
    before = (folder / "rag-k1-m0.jsonl.gz").read_bytes()
    publish(again.sweep_dir, fresh, folder, command="pytest")  # its rows were adopted: kept as they are
    assert (folder / "rag-k1-m0.jsonl.gz").read_bytes() == before
    assert json.loads((folder / MANIFEST).read_text())["rows"]["rag-k1-m0"]["made"] == made
    assert len(load(folder).rows) == len(result.rows)

    from ragscale.experiments.identity import data_fingerprint
    from ragscale.experiments.sweep.compiling import compile_once, compile_point, compiled_path
    from ragscale.experiments.sweep.ledger import COMPILED

    assert {p.name.rsplit("-", 1)[0] for p in (folder / COMPILED).glob("*.json")} >= {"drag-m2", "iterdrag-m2"}
    config = point_config(base_config(fresh), compile_point(Point("iterdrag", 3, 2, 3), GRID))
    saved = compiled_path(again.sweep_dir / COMPILED, config, data_fingerprint(*examples))
    kept = compile_once(config, [], lm=None, retriever=None, saved=saved)  # no LM, no questions: it can only load
    assert any(predictor.demos for predictor in kept.predictors())


def test_a_sweep_stopped_at_its_time_limit_reports_what_finished_and_a_rerun_runs_the_rest(
    tmp_path, smollm2_tokenizer, examples
):
    grid = Grid(methods=("rag",), docs=(1,), shots=(0,), iterations=(1,), budgets=(3000,))
    base, lm = base_config(tmp_path / "runs"), tokenizer_lm(smollm2_tokenizer, examples)
    reports: list[str] = []
    loaded = Loaded(lm=lm, examples=examples, speed=SPEED)
    stopped = run_sweep(grid, base, SweepOptions(progress=False, stop_after=0.0), loaded, report=reports.append)
    assert stopped.ran == [] and stopped.failed == [] and len(stopped.stopped) == 3  # closed-book m=0, m=1, rag
    assert stopped.oracle == [] and any("not started, the time limit passed" in line for line in reports)
    assert (stopped.sweep_dir / "results.json").exists()
    rest = run_sweep(grid, base, SweepOptions(progress=False), loaded, report=lambda _: None)
    assert len(rest.ran) == 3 and rest.stopped == [] and len(rest.oracle) == 2


def test_the_time_limit_ends_the_configuration_in_flight_and_a_rerun_resumes_it(tmp_path, smollm2_tokenizer, examples):
    import dspy
    from doubles import MeteredLM, TokenizerEngine

    from ragscale.experiments.sweep.stopping import TimeLimitError

    class ReachesTheLimit(TokenizerEngine):
        """Its first call is where the sweep's time limit passes: it sets the stopper's reason as the timer does."""

        def complete(self, request):
            if self.calls == 0:
                stopper = next(c for c in dspy.settings.get("callbacks", []) if hasattr(c, "reason"))
                stopper.reason = TimeLimitError("the time limit of 1 s passed")
            return super().complete(request)

    golds = {ex.question: ex.answers[0] for split in examples for ex in split}
    lm = MeteredLM("local/scripted", engine=ReachesTheLimit(smollm2_tokenizer, golds), cache=False, num_retries=0,
                   context_window=8192)  # fmt: skip
    grid = Grid(methods=("rag",), docs=(1,), shots=(0,), iterations=(1,), budgets=(3000,), baselines=False)
    base, reports = replace(base_config(tmp_path / "runs"), threads=1), []
    loaded = Loaded(lm=lm, examples=examples, speed=SPEED)
    stopped = run_sweep(grid, base, SweepOptions(progress=False, stop_after=3600.0), loaded, report=reports.append)
    assert stopped.ran == [] and stopped.failed == [] and len(stopped.stopped) == 1
    # not run to its end, as DSPy would let it, and the report says why
    assert any("ended, the time limit of 1 s passed" in line for line in reports)
    [killed] = tracking.finished_runs(base.runs_dir, statuses=("KILLED",))
    assert len(run_records(base.runs_dir, killed.info.run_id)) == 1  # the question it was answering finished
    loaded = replace(loaded, lm=tokenizer_lm(smollm2_tokenizer, examples))
    rest = run_sweep(grid, base, SweepOptions(progress=False), loaded, report=lambda _: None)
    assert len(rest.ran) == 1 and rest.stopped == [] and rest.rows[0].run_id == killed.info.run_id  # resumed


@pytest.fixture
def taught(smollm2_tokenizer, examples, monkeypatch):
    """The teacher the sweep loads, and what happened to it: ``"loaded"``, ``("released", whether it was it)``."""
    import ragscale.experiments.sweep.compiling as compiling

    teacher, events = tokenizer_lm(smollm2_tokenizer, examples), []
    monkeypatch.setattr(compiling, "load_teacher_for", lambda config: events.append("loaded") or teacher)
    monkeypatch.setattr(compiling, "release_lm", lambda lm: events.append(("released", lm is teacher)))
    return teacher, events


def test_the_teacher_is_released_once_every_compile_that_runs_it_is_done(tmp_path, smollm2_tokenizer, examples, taught):
    teacher, events = taught
    grid = Grid(methods=("iterdrag",), docs=(1,), shots=(0, 1, 2), iterations=(1,), budgets=(8000,), baselines=False)
    loaded = Loaded(lm=tokenizer_lm(smollm2_tokenizer, examples), examples=examples, speed=SPEED)
    result = run_sweep(
        grid, base_config(tmp_path / "runs"), SweepOptions(teacher="smollm2-135m", progress=False), loaded
    )
    assert len(result.ran) == 3 and teacher.history  # m=1 and m=2 compiled on the teacher, m=0 needs none
    assert events == ["loaded", ("released", True)]


def test_the_oracle_rows_run_once_beside_the_grid_as_child_runs_outside_the_budget_table(swept):
    result, _, runs_dir = swept
    assert [r.method for r in result.oracle] == ["oracle-gold", "oracle-distractors"]
    client = tracking.client(runs_dir)
    for r in result.oracle:
        assert client.get_run(r.run_id).data.tags["mlflow.parentRunId"] == result.parent_run_id
    assert not {r.run_id for r in result.oracle} & {r.run_id for r in result.rows}
    assert all(not r["config"].startswith("oracle") for r in result.table)
    assert any(c["claim"].startswith("distractors hurt") for c in result.claims)


def test_the_allocation_model_is_stored_as_json_and_allocate_reads_it(swept):
    result, _, _ = swept
    stored = json.loads((result.sweep_dir / ALLOCATION).read_text())
    assert {"model", "informativeness", "at_budget", "extrapolation", "candidates"} <= stored.keys()
    choice = allocate(result.sweep_dir, 3000)
    assert choice[EFFECTIVE_CONTEXT] <= 3000
    assert choice["method"] in {"closed-book", "drag", "iterdrag"}


def test_configurations_over_the_largest_budget_are_skipped_before_running(tmp_path, smollm2_tokenizer, examples):
    lm = tokenizer_lm(smollm2_tokenizer)
    grid = Grid(methods=("drag",), docs=(1, 16), shots=(0,), iterations=(1,), budgets=(1000,), baselines=False)
    result = run_sweep(
        grid,
        base_config(tmp_path / "runs"),
        SweepOptions(progress=False),
        Loaded(lm=lm, examples=examples, speed=SPEED),
    )
    status = {p.point.docs: p.status for p in result.plan}
    assert status == {1: "run", 16: "over budget"}
    assert [r.docs for r in result.rows] == [1]


def test_only_configurations_that_cannot_fit_are_skipped_an_iterdrag_bound_over_budget_still_runs(
    tmp_path, smollm2_tokenizer, examples
):
    lm = tokenizer_lm(smollm2_tokenizer)
    grid = Grid(methods=("iterdrag",), docs=(1,), shots=(0,), iterations=(6,), budgets=(2000,), baselines=False)
    result = run_sweep(
        grid,
        base_config(tmp_path / "runs"),
        SweepOptions(progress=False),
        Loaded(lm=lm, examples=examples, speed=SPEED),
    )
    (item,) = result.plan
    assert item.estimate.low <= 2000 < item.estimate.high  # stopping at once fits; every follow-up would not
    assert item.status == "run" and result.rows[0].effective_context() <= 2000


def test_a_configuration_a_learned_estimate_puts_past_the_largest_budget_is_skipped_unless_asked_for(
    tmp_path, smollm2_tokenizer, examples
):
    # IterDRAG k=1 runs first and teaches how many follow-ups the script asks; k=4 is then estimated from it.
    grid = Grid(methods=("iterdrag",), docs=(1, 4), shots=(0,), iterations=(3,), budgets=(100_000,), baselines=False)
    quiet = SweepOptions(progress=False)
    loaded = Loaded(lm=tokenizer_lm(smollm2_tokenizer), examples=examples, speed=SPEED)
    measured = run_sweep(grid, base_config(tmp_path / "measured"), quiet, loaded)
    wide = measured.plan[1].estimate
    assert wide.learned and wide.low * 1.1 < wide.tokens / 1.1
    budget = round(wide.tokens / 1.1 / 1.05)  # its fewest fit; its learned estimate exceeds it by more than 10%
    reports: list[str] = []
    cut = replace(grid, budgets=(budget,))
    skipped = run_sweep(cut, base_config(tmp_path / "runs"), quiet, loaded, report=reports.append)
    assert [p.status for p in skipped.plan] == ["run", "expected over budget"]
    assert [r.docs for r in skipped.rows] == [1] and skipped.failed == []
    assert any("k=4" in line and "skipped, expected over budget" in line for line in reports)
    again = run_sweep(cut, base_config(tmp_path / "runs"), quiet, loaded)  # now learned before it runs: in the plan
    assert [p.status for p in again.plan] == ["done", "expected over budget"] and again.ran == []
    asked = run_sweep(replace(cut, beyond_budget=True), base_config(tmp_path / "runs"), quiet, loaded)
    assert [r.docs for r in asked.rows] == [1, 4] and len(asked.ran) == 1


def test_a_reader_that_teaches_itself_compiles_on_its_own_lm(tmp_path, smollm2_tokenizer, examples, taught):
    teacher, events = taught
    grid = Grid(methods=("iterdrag",), docs=(1,), shots=(1,), iterations=(1,), budgets=(8000,), baselines=False)
    reader = tokenizer_lm(smollm2_tokenizer, examples)
    base = replace(base_config(tmp_path / "runs"), lm="smollm2-135m")
    result = run_sweep(
        grid,
        base,
        SweepOptions(teacher="smollm2-135m", progress=False),
        Loaded(lm=reader, examples=examples, speed=SPEED),
    )
    assert len(result.ran) == 1 and events == [] and not teacher.history and reader.history


def test_iterdrag_chains_are_written_at_few_documents_and_shown_with_each_configurations_k(
    tmp_path, smollm2_tokenizer, examples, monkeypatch
):
    import ragscale.experiments.sweep.compiling as compiling
    import ragscale.experiments.sweep.run as sweep_run
    from ragscale.experiments.sweep.ledger import COMPILED
    from ragscale.programs.retrieval import format_passage, merge_by_rank, most_relevant_last

    monkeypatch.setattr(compiling, "CHAIN_DOCS", 1)
    given, real = [], sweep_run.run_experiment
    monkeypatch.setattr(
        sweep_run, "run_experiment", lambda config, **kw: given.append(kw["compiled"]) or real(config, **kw)
    )
    grid = Grid(methods=("iterdrag",), docs=(3,), shots=(2,), iterations=(2,), budgets=(100_000,), baselines=False)
    base, lm = base_config(tmp_path / "runs"), tokenizer_lm(smollm2_tokenizer, examples)
    result = run_sweep(
        grid, base, SweepOptions(progress=False), Loaded(lm=lm, examples=examples, speed=SPEED), report=lambda _: None
    )
    assert len(result.ran) == 1
    (kept,) = (result.sweep_dir / COMPILED).glob("iterdrag-m2-*.json")
    written = [d for p in json.loads(kept.read_text()).values() for d in p.get("demos", []) if "documents" in d]
    assert written and all(len(d["documents"]) == 1 for d in written)  # the chains: one document per query
    program = given[0]
    shown = [(n, d) for n, p in program.named_predictors() for d in p.demos if "documents" in d]
    assert len(shown) == len(written)
    for name, demo in shown:  # each demonstration: its queries' documents at the configuration's k = 3
        rankings = [program.retriever(q, 3) for q in program.demo_queries(name, demo)]
        assert demo["documents"] == [format_passage(p) for p in most_relevant_last(merge_by_rank(rankings))][-3:]
        assert len(demo["documents"]) == 3


def test_the_teacher_is_released_when_the_last_compile_it_would_run_is_skipped(
    tmp_path, smollm2_tokenizer, examples, taught
):
    _, events = taught
    grid = Grid(methods=("iterdrag",), docs=(4,), shots=(0, 1, 2), iterations=(1,), budgets=(100_000,), baselines=False)
    taught_by = SweepOptions(teacher="smollm2-135m", progress=False)
    loaded = Loaded(lm=tokenizer_lm(smollm2_tokenizer, examples), examples=examples, speed=SPEED)
    measured = run_sweep(grid, base_config(tmp_path / "measured"), taught_by, loaded)
    one, two = (p.estimate for p in measured.plan[1:])
    assert one.learned and two.learned and one.tokens * 1.1 < two.tokens / 1.1 and two.low < one.tokens
    events.clear()
    cut = replace(grid, budgets=(round(one.tokens * 1.1 + 1),))  # m=1 runs, compiled on the teacher; m=2 does not
    result = run_sweep(cut, base_config(tmp_path / "runs"), taught_by, loaded)
    assert [p.status for p in result.plan] == ["run", "run", "expected over budget"]
    assert events == ["loaded", ("released", True)]


def test_budget_table_ranks_by_em_then_f1_then_accuracy_then_fewer_tokens():
    rows = [
        Row("drag", 1, 0, 0, em=10, f1=20, acc=30, effective_context_tokens_per_question=500),
        Row("drag", 2, 0, 0, em=10, f1=20, acc=30, effective_context_tokens_per_question=900),
        Row("rag", 5, 0, 0, em=50, f1=50, acc=50, effective_context_tokens_per_question=3000),
        Row("rag", 1, 0, 0, em=5, f1=20, acc=60, effective_context_tokens_per_question=400),  # more Acc, less EM
    ]
    table = budget_table(rows, [1000, 4000])
    small = {r["method"]: r for r in table if r["budget"] == 1000}
    assert set(small) == {"drag", "rag", "best"} and small["best"]["config"] == "drag k=1 m=0"
    assert small["rag"]["config"] == "rag k=1 m=0"
    large = {r["method"]: r for r in budget_table(rows, [4000]) if r["budget"] == 4000}
    assert large["drag"]["config"] == "rag k=5 m=0"  # a RAG row with no shot is DRAG with no demonstration
    tiny = {r["method"]: r["config"] for r in budget_table(rows, [450])}  # only RAG k=1 fits: DRAG has it too
    assert tiny == {"rag": "rag k=1 m=0", "drag": "rag k=1 m=0", "best": "rag k=1 m=0"}
    assert next(r for r in table if r["budget"] == 4000 and r["method"] == "best")["config"] == "rag k=5 m=0"


def test_iterdrag_is_taught_its_sub_question_chains_where_the_sweep_labels_the_others(swept):
    from ragscale.experiments.sweep.grid import point_config

    base = base_config(Path("runs"))
    for method, optimizer in (("rag", "labeled"), ("drag", "labeled"), ("iterdrag", "bootstrap")):
        config = point_config(base, Point(method, 3, 2, 3 if method == "iterdrag" else 0), teacher="qwen2.5-coder-1.5b")
        assert (config.optimizer, config.teacher) == (
            optimizer,
            "qwen2.5-coder-1.5b" if optimizer != "labeled" else None,
        )
    assert point_config(base, Point("iterdrag", 3, 0, 3)).optimizer == "none"

    result, _, runs_dir = swept
    (row,) = [r for r in result.rows if r.method == "iterdrag" and r.shots == 2 and r.docs == 3]
    state = json.loads((runs_dir / "work" / row.run_id / "program.json").read_text())
    demos = {name: len(predictor["demos"]) for name, predictor in state.items() if "demos" in predictor}
    assert demos.get("decompose") and demos.get("answer_sub"), demos  # the chain, not the final answer alone


def test_iterdrag_under_a_larger_cap_carries_the_questions_that_stopped_before_a_smaller_one(
    tmp_path, smollm2_tokenizer, examples
):
    # The script asks 2 follow-ups, then "none": under a cap of 2 every question reaches the cap, under 3 none does.
    def sweep(iterations: tuple[int, ...], runs_dir: Path):
        lm, reports = tokenizer_lm(smollm2_tokenizer, examples), []
        grid = Grid(methods=("iterdrag",), docs=(1,), shots=(0,), iterations=iterations, budgets=(8000,),
                    baselines=False)  # fmt: skip
        result = run_sweep(
            grid,
            base_config(runs_dir),
            SweepOptions(progress=False),
            Loaded(lm=lm, examples=examples, speed=SPEED),
            report=reports.append,
        )
        return result, reports, lm.engine.calls

    _, _, asked = sweep((2, 3), tmp_path / "to-3")
    result, reports, asked_with_4 = sweep((2, 3, 4), tmp_path / "to-4")
    assert asked_with_4 == asked  # the cap of 4 asked the LM nothing: every question stopped before 3
    assert any(line.endswith("n=3: carries 0 of 3 questions from iterdrag k=1 m=0 n=2, whose loop stopped before "
                              "its cap of 2") for line in reports)  # fmt: skip
    assert any("n=4: carries 3 of 3 questions from iterdrag k=1 m=0 n=3" in line for line in reports)
    runs = tmp_path / "to-4"
    by_cap = {row.iterations: run_records(runs, row.run_id) for row in result.rows}
    kept = ("id", "prediction", "em", "input_tokens", "lm_calls", "sub_questions", "behaviour")
    assert [{k: r[k] for k in kept} for r in by_cap[4]] == [{k: r[k] for k in kept} for r in by_cap[3]]
    assert [r["behaviour"]["follow_ups"] for r in by_cap[3]] == [2, 2, 2]
    resumed = {r.iterations: tracking.client(runs).get_run(r.run_id).data.metrics["resumed"] for r in result.rows}
    assert resumed == {2: 0, 3: 0, 4: 3}
    widened, _, asked_again = sweep((2, 3, 4), tmp_path / "to-3")  # a cap of 4 added to the finished sweep
    assert [(p.point.iterations, p.status) for p in widened.plan] == [(2, "done"), (3, "done"), (4, "run")]
    assert widened.plan[2].seconds == 0  # its time estimate leaves out the questions it carries: all of them
    assert asked_again == 0
    ledger_path = widened.sweep_dir / LEDGER  # as if the cap of 3 had run other demonstrations than the cap of 4 will
    ledger = json.loads(ledger_path.read_text())
    for key in ledger:
        ledger[key]["program"] = "another program"
    ledger_path.write_text(json.dumps(ledger))
    again, reports, asked_again = sweep((2, 3, 4, 5), tmp_path / "to-3")
    assert asked_again > 0 and not any("n=5: carries" in line for line in reports)
    assert {r.iterations: r.carried for r in again.rows} == {2: 0, 3: 0, 4: 3, 5: 0}
