"""A stopped run resumes where it stopped; a run whose questions fail ends FAILED; runs share a store safely."""

import http.server
import json

import pytest
from doubles import FACTS, SCRIPT, ScriptedChatEngine
from servers import serving_in_thread

from ragscale.experiments import tracking
from ragscale.experiments.config import RunConfig
from ragscale.experiments.evaluate import PREDICTIONS
from ragscale.experiments.runner import RunFailedError, run_experiment
from ragscale.experiments.signals import Terminated
from ragscale.programs.lm.meter import MeteredLM


class CountingEngine(ScriptedChatEngine):
    """The script's answers, counting the calls; ``stop_on`` (a question) raises ``stop`` when asked it."""

    def __init__(self, script, *, stop_on: str | None = None, stop: BaseException | None = None):
        super().__init__(script)
        self.calls, self.stop_on, self.stop = 0, stop_on, stop

    def complete(self, request):
        self.calls += 1
        if self.stop_on is not None and self.stop_on in (request.messages[-1].text or ""):
            raise self.stop
        return super().complete(request)


def lm_on(engine) -> MeteredLM:
    return MeteredLM("local/scripted", engine=engine, cache=False, num_retries=0, context_window=4096)


@pytest.fixture
def config(tmp_path, data_dir) -> RunConfig:
    """Closed-book over the three dev questions q4-q6, one at a time (so a stop leaves the earlier ones done)."""
    return RunConfig(
        method="closed-book", dataset="hotpotqa", adapter="chat", data_dir=data_dir, runs_dir=tmp_path / "runs",
        threads=1, cache=False,
    )  # fmt: skip


def status(config, run_id) -> str:
    return tracking.client(config.runs_dir).get_run(run_id).info.status


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), Terminated("received SIGTERM")])
def test_a_stopped_run_resumes_answering_only_the_questions_it_had_not_finished(config, stop):
    first = CountingEngine(SCRIPT, stop_on=FACTS[5][2], stop=stop)
    with pytest.raises(type(stop)):
        run_experiment(config, lm=lm_on(first), progress=False)
    [run] = tracking.finished_runs(config.runs_dir, statuses=("KILLED",))
    run_id = run.info.run_id
    records = [json.loads(line) for line in (config.runs_dir / "work" / run_id / PREDICTIONS).open()]
    assert [r["id"] for r in records] == ["q4"]

    second = CountingEngine(SCRIPT)
    summary = run_experiment(config, lm=lm_on(second), progress=False)
    assert summary["mlflow_run_id"] == run_id and status(config, run_id) == "FINISHED"
    assert (summary["resumed"], summary["n"], summary["failed"]) == (1, 3, 0)
    assert second.calls == 2  # q5 and q6 only: nothing of q4 is computed again
    assert summary["em"] == pytest.approx(200 / 3)  # q4 and q5 right, q6 wrong, as an uninterrupted run scores


def test_failed_questions_are_asked_again_and_fresh_starts_over(config):
    flaky = CountingEngine(SCRIPT, stop_on=FACTS[5][2], stop=ConnectionError("server went away"))
    with pytest.raises(RunFailedError, match="1 of 3 questions failed"):
        run_experiment(config, lm=lm_on(flaky), progress=False, max_failed=0.2)
    [run] = tracking.finished_runs(config.runs_dir, statuses=("FAILED",))

    fixed = CountingEngine(SCRIPT)
    summary = run_experiment(config, lm=lm_on(fixed), progress=False, max_failed=0.2)
    assert summary["mlflow_run_id"] == run.info.run_id
    assert (summary["resumed"], summary["failed"], fixed.calls) == (2, 0, 1)  # only the failed q5 again
    table = json.loads(tracking.artifact_path(config.runs_dir, run.info.run_id, "eval_results_table.json").read_text())
    assert len(table["data"]) == 3  # logged once, when the run finished: no question twice
    assert len(list((config.runs_dir / "artifacts").rglob("MLmodel"))) == 1  # and one model

    again = CountingEngine(SCRIPT)
    fresh = run_experiment(config, lm=lm_on(again), progress=False, fresh=True)
    assert fresh["mlflow_run_id"] != run.info.run_id
    assert (fresh["resumed"], again.calls) == (0, 3)


def test_a_run_whose_questions_all_fail_ends_failed_and_says_why(config):
    down = CountingEngine(SCRIPT, stop_on="", stop=ConnectionError("Connection refused"))
    with pytest.raises(RunFailedError, match=r"3 of 3 questions failed.*Connection refused"):
        run_experiment(config, lm=lm_on(down), progress=False, max_failed=1.0)  # all failed fails even at 1.0
    [run] = tracking.finished_runs(config.runs_dir, statuses=("FAILED",))
    assert tracking.finished_runs(config.runs_dir) == []  # compare and the sweep see no finished run
    assert PREDICTIONS in [a.path for a in tracking.client(config.runs_dir).list_artifacts(run.info.run_id)]


def test_compare_leaves_failed_runs_out_unless_asked_and_counts_failed_questions(config):
    from ragscale.experiments.compare import compare_runs, format_table, load_runs

    down = CountingEngine(SCRIPT, stop_on="", stop=ConnectionError("Connection refused"))
    with pytest.raises(RunFailedError):
        run_experiment(config, lm=lm_on(down), progress=False)
    assert load_runs(config.runs_dir) == []
    [row] = compare_runs(load_runs(config.runs_dir, unfinished=True))
    assert (row["status"], row["failed"], row["n"]) == ("FAILED", 3, 3)
    assert "(FAILED)" in format_table([row])


class RefusesEveryCompletion(http.server.BaseHTTPRequestHandler):
    """A server that lists its models (so the check before the run passes) and answers every completion 404."""

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"data": []}')

    def do_POST(self):
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_run_against_a_server_that_fails_every_call_exits_1_and_is_failed(tmp_path, capsys):
    from ragscale.experiments.cli import main

    runs = tmp_path / "runs"
    with serving_in_thread(RefusesEveryCompletion) as url:
        code = main(
            ["run", "--method", "closed-book", "--dataset", "hotpotqa", "--lm", "openai/x", "--api-base",
             f"{url}/v1", "--limit", "2", "--runs-dir", str(runs), "--no-progress"]
        )  # fmt: skip
    assert code == 1
    assert "2 of 2 questions failed" in capsys.readouterr().err
    assert [run.info.status for run in tracking.finished_runs(runs, statuses=("FAILED", "FINISHED"))] == ["FAILED"]


def test_a_run_that_fresh_replaced_is_not_taken_up_again(config):
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, lm=lm_on(CountingEngine(SCRIPT, stop_on=FACTS[5][2], stop=KeyboardInterrupt())))
    [killed] = tracking.finished_runs(config.runs_dir, statuses=("KILLED",))
    replaced = run_experiment(config, lm=lm_on(CountingEngine(SCRIPT)), progress=False, fresh=True)
    again = run_experiment(config, lm=lm_on(CountingEngine(SCRIPT)), progress=False)
    assert killed.info.run_id not in (replaced["mlflow_run_id"], again["mlflow_run_id"])
    assert again["resumed"] == 0


def test_a_finished_run_with_failed_questions_asks_them_again_in_the_same_run(config):
    flaky = CountingEngine(SCRIPT, stop_on=FACTS[5][2], stop=ConnectionError("server went away"))
    first = run_experiment(config, lm=lm_on(flaky), progress=False)  # 1 of 3 failed: under max_failed, FINISHED
    run_id = first["mlflow_run_id"]
    assert (first["failed"], status(config, run_id)) == (1, "FINISHED")

    fixed = CountingEngine(SCRIPT)
    again = run_experiment(config, lm=lm_on(fixed), progress=False)
    assert again["mlflow_run_id"] == run_id and status(config, run_id) == "FINISHED"
    assert (again["resumed"], again["failed"], fixed.calls) == (2, 0, 1)  # only q5 asked again
    run = tracking.client(config.runs_dir).get_run(run_id)
    assert (run.data.metrics["failed"], run.data.metrics["em"]) == (0, again["em"])  # the new scores
    table = json.loads(tracking.artifact_path(config.runs_dir, run_id, "eval_results_table.json").read_text())
    assert len(table["data"]) == 3 and "server went away" not in json.dumps(table)  # replaced, not appended to
    assert len(list((config.runs_dir / "artifacts").rglob("MLmodel"))) == 1  # the same program, logged once
