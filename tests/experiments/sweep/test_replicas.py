"""A sweep over replicas of one server, as a user expects: a replica that does not answer when the sweep starts is
left out with a warning naming it, a configuration that fails on one replica is tried once more on another before
it counts as failed, and the summary says which replica ran what.

The replicas are real HTTP servers in threads (``servers.py``: ``ChatCompletions`` answers, ``faulty_chat`` fails
as a broken server does) behind ``openai/<model>`` LMs, asked the made-up closed-book questions (``data_dir``): no
model, no index. A replica named ``localhost`` sorts after one named ``127.0.0.1``, so the first replica the sweep
takes is the one the test means it to.
"""

import json
from pathlib import Path

import pytest
from servers import ChatCompletions, faulty_chat, free_port, serving_in_thread

from ragscale.experiments.cli import main
from ragscale.experiments.config import RunConfig
from ragscale.experiments.sweep.grid import Grid
from ragscale.experiments.sweep.run import run_sweep
from ragscale.experiments.sweep.setup import Loaded
from ragscale.experiments.sweep.sitting import SweepOptions
from ragscale.experiments.sweep.speed import Speed

SPEED = Speed(1000.0, 100.0, "stated")  # given: else the sweep times two calls of its first replica before planning
QUESTIONS = 2
CLOSED_BOOK = Grid(methods=("closed-book",), shots=(0,), budgets=(100_000,), baselines=False)


def sweep_argv(data_dir: Path, tmp_path: Path, api_base: str) -> list[str]:
    return ["sweep", "--dataset", "hotpotqa", "--methods", "closed-book", "--shots", "0", "--no-baselines",
            "--lm", "openai/served-model", "--api-base", api_base, "--adapter", "chat", "--limit", str(QUESTIONS),
            "--train-limit", "2", "--threads", "1", "--no-progress", "--data-dir", str(data_dir),
            "--runs-dir", str(tmp_path / "runs"), "--json", str(tmp_path / "sweep.json")]  # fmt: skip


def test_a_replica_dead_at_the_start_is_warned_about_and_the_sweep_runs_on_the_others(data_dir, tmp_path, capsys):
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with serving_in_thread(ChatCompletions) as url:
        live = f"{url}/v1"
        assert main(sweep_argv(data_dir, tmp_path, f"{dead},{live}")) == 0
    out = capsys.readouterr().out
    warned = [line for line in out.splitlines() if dead in line]
    assert len(warned) == 1 and warned[0].startswith(f"warning: --api-base {dead}: no server answered"), warned
    assert warned[0].endswith(f"the sweep leaves it out and runs on {live}")
    assert f"on {live}: 1 ran (closed-book k=0 m=0)" in out.splitlines()
    [row] = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    assert row["replica"] == live and row["n"] == QUESTIONS


def test_a_sweep_whose_every_replica_is_dead_exits_2_naming_one(data_dir, tmp_path, capsys):
    dead = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    with pytest.raises(SystemExit) as stopped:
        main(sweep_argv(data_dir, tmp_path, ",".join(dead)))
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "no server answered" in err and any(f"--api-base {url}" in err for url in dead)


@pytest.mark.parametrize("fault", ["garbage"])  # a 500 fails the same way after LiteLLM retried it
def test_a_configuration_that_fails_on_one_replica_is_tried_again_on_another(fault, data_dir, tmp_path):
    broken = faulty_chat(fault)
    with serving_in_thread(broken) as first, serving_in_thread(ChatCompletions) as second:
        failing = f"{first}/v1"
        answering = f"{second.replace('127.0.0.1', 'localhost')}/v1"  # sorts after the failing one: taken second
        base = RunConfig(
            method="closed-book", dataset="hotpotqa", lm="openai/served-model", api_base=f"{answering},{failing}",
            adapter="chat", data_dir=data_dir, runs_dir=tmp_path / "runs", limit=QUESTIONS, train_limit=2, threads=1,
            cache=False,  # DSPy's cache, keyed without the server, would answer for the failing replica
        )  # fmt: skip
        reports: list[str] = []
        result = run_sweep(CLOSED_BOOK, base, SweepOptions(progress=False), Loaded(speed=SPEED), report=reports.append)
    assert broken.calls > 0, reports
    assert result.failed == [] and len(result.ran) == 1
    [row] = result.rows
    assert row.replica == answering and row.n == QUESTIONS and row.failed == 0
    tried = [line for line in reports if "trying it again" in line]
    assert len(tried) == 1 and f"failed on {failing}: RunFailedError" in tried[0], reports
    assert tried[0].endswith(f"trying it again on {answering}")
    assert f"on {answering}: 1 ran (closed-book k=0 m=0)" in reports
