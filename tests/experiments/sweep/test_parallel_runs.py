"""Several configurations of a sweep at once, spread over replicas of one server (``SweepOptions(parallel_runs=N)``).

Each replica is a scripted LM standing for one ``--api-base`` URL (made-up questions, BM25 over their 14 passages,
one question at a time per run): what is checked is where the configurations ran, how many ran at once, what their
keys are, and what a failure or a Ctrl-C does to the others.
"""

import re
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from doubles import SCRIPT, ScriptedChatEngine

from ragscale.experiments import tracking
from ragscale.experiments.cli import main
from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.identity import config_key
from ragscale.experiments.signals import Terminated, terminate_on_sigterm
from ragscale.experiments.sweep import compiling
from ragscale.experiments.sweep import run as sweep_run
from ragscale.experiments.sweep.estimate import Planner
from ragscale.experiments.sweep.grid import Grid
from ragscale.experiments.sweep.replicas import shared_api_base
from ragscale.experiments.sweep.run import run_sweep
from ragscale.experiments.sweep.setup import Loaded
from ragscale.experiments.sweep.sitting import SweepOptions
from ragscale.experiments.sweep.speed import Speed
from ragscale.programs.lm.meter import MeteredLM

URLS = ("http://replica-a:8000/v1", "http://replica-b:8000/v1")
SPEED = Speed(1000.0, 100.0, "stated")  # given: else the sweep times two calls of its LM before planning
GRID = Grid(methods=("rag",), docs=(1, 2), shots=(0, 1), iterations=(1,), budgets=(100_000,), baselines=False)
QUESTIONS = 3  # the dev questions of the data_dir fixture
WAIT_S = 10.0  # the longest a replica waits for another to be answering too


class Replica(ScriptedChatEngine):
    """One server's answers (the script's), counting its calls. Given ``together`` (a barrier shared by the
    replicas), its call number ``at_call`` waits there until the other replicas' are in flight too, and records
    whether they were (False when the barrier timed out); ``pause_s`` delays each call."""

    def __init__(self, together: threading.Barrier | None = None, pause_s: float = 0.0, at_call: int = 1):
        super().__init__(SCRIPT)
        self.together, self.pause_s, self.at_call = together, pause_s, at_call
        self.calls, self.overlapped, self._lock = 0, None, threading.Lock()

    def complete(self, request):
        with self._lock:
            self.calls += 1
            meets = self.calls == self.at_call
        if meets and self.together is not None:
            try:
                self.together.wait()
                self.overlapped = True
            except threading.BrokenBarrierError:
                self.overlapped = False
        time.sleep(self.pause_s)
        return super().complete(request)


def replica_lm(engine: Replica) -> MeteredLM:
    return MeteredLM("local/scripted", engine=engine, cache=False, num_retries=0, context_window=4096)


def base_config(tmp_path: Path, data_dir: Path, api_base: str = ",".join(URLS)) -> RunConfig:
    return RunConfig(
        method="rag", dataset="hotpotqa", optimizer="labeled", lm="openai/served-model", api_base=api_base,
        adapter="chat", retriever="bm25", data_dir=data_dir, runs_dir=tmp_path / "runs", limit=QUESTIONS,
        train_limit=4, threads=1,
    )  # fmt: skip


def sweep(base: RunConfig, replicas: list[Replica], *, grid: Grid = GRID, parallel_runs: int = 2, reports=None):
    return run_sweep(
        grid,
        base,
        SweepOptions(progress=False, parallel_runs=parallel_runs),
        Loaded(lm=[replica_lm(r) for r in replicas], speed=SPEED),
        report=reports.append if reports is not None else lambda line: None,
    )


def test_two_runs_at_once_spread_every_configuration_once_over_both_replicas(tmp_path, data_dir):
    together = threading.Barrier(2, timeout=WAIT_S)
    a, b = Replica(together), Replica(together)
    reports: list[str] = []
    result = sweep(base_config(tmp_path, data_dir), [a, b], reports=reports)

    planned = [p.key for p in result.plan]
    assert len(planned) == 4 and sorted(result.ran) == sorted(planned) and result.failed == []
    assert a.overlapped and b.overlapped, "the first two configurations were not answering at the same time"
    assert a.calls > 0 and b.calls > 0, (a.calls, b.calls)
    # each configuration answered its questions once, all on one replica
    assert a.calls + b.calls == 4 * QUESTIONS and a.calls % QUESTIONS == b.calls % QUESTIONS == 0
    assert len({row.run_id for row in result.rows}) == 4
    numbers = {}
    for item in result.plan:
        (found,) = [line for line in reports if re.match(rf"\[\d/4\] {item.point.label}: EM ", line)]
        numbers[found[1]] = item.point.label
    assert sorted(numbers) == ["1", "2", "3", "4"], numbers


def test_a_program_two_configurations_need_at_once_is_compiled_once(tmp_path, data_dir, monkeypatch):
    compiled, real = [], compiling.compile_once

    def slow_compile(config, train, **kwargs):
        compiled.append((config.method, config.shots))
        time.sleep(0.3)  # long enough for the other configuration to ask for it meanwhile
        return real(config, train, **kwargs)

    monkeypatch.setattr(compiling, "compile_once", slow_compile)
    grid = replace(GRID, shots=(1,))
    result = sweep(base_config(tmp_path, data_dir), [Replica(), Replica()], grid=grid)
    assert len(result.ran) == 2 and compiled == [("rag", 1)]


def test_a_rerun_given_the_replicas_in_the_other_order_skips_every_finished_configuration(tmp_path, data_dir):
    first = sweep(base_config(tmp_path, data_dir), [Replica(), Replica()])
    assert len(first.ran) == 4
    client = tracking.client(tmp_path / "runs")
    assert {client.get_run(row.run_id).data.params["api_base"] for row in first.rows} == {",".join(sorted(URLS))}

    b, a = Replica(), Replica()
    again = sweep(base_config(tmp_path, data_dir, api_base=",".join(reversed(URLS))), [b, a])
    assert again.ran == [] and b.calls == a.calls == 0
    assert {row.key for row in again.rows} == {row.key for row in first.rows}


def test_one_server_url_is_kept_as_given_so_single_server_keys_stay_what_they_were(tmp_path, data_dir):
    base = base_config(tmp_path, data_dir, api_base="http://localhost:8000/v1/")
    assert shared_api_base(base) == base
    assert config_key(shared_api_base(base), "data") == config_key(base, "data")


def test_several_servers_with_a_local_model_are_refused_naming_both_flags(tmp_path, data_dir):
    base = replace(base_config(tmp_path, data_dir), lm="smollm2-135m")
    with pytest.raises(ConfigError, match=r"--api-base names 2 servers .* --lm 'smollm2-135m' is a local model"):
        shared_api_base(base)


def test_one_configuration_failing_does_not_stop_the_others_and_a_rerun_retries_it(tmp_path, data_dir, monkeypatch):
    real = sweep_run.run_experiment
    tried = []

    def replica_down_for_k2_m0(config, lm, **kwargs):
        if (config.docs, config.shots) == (2, 0):
            tried.append(lm)
            raise ConnectionError("replica went away")
        return real(config, lm=lm, **kwargs)

    monkeypatch.setattr(sweep_run, "run_experiment", replica_down_for_k2_m0)
    reports: list[str] = []
    result = sweep(base_config(tmp_path, data_dir), [Replica(), Replica()], reports=reports)
    (broken,) = [p for p in result.plan if p.point.label == "rag k=2 m=0"]
    assert result.failed == [broken.key]
    assert sorted(result.ran) == sorted(p.key for p in result.plan if p is not broken)
    assert len(tried) == 2 and tried[0] is not tried[1]  # tried once more, on the other replica
    failed = r"\[\d/4\] rag k=2 m=0: failed on LM (\d) of 2: ConnectionError: replica went away"
    [first] = [m for m in map(re.compile(failed + r"; trying it again on LM (\d) of 2").fullmatch, reports) if m]
    [then] = [m for m in map(re.compile(failed).fullmatch, reports) if m]
    assert first[1] != first[2] == then[1], (first.group(0), then.group(0))

    monkeypatch.setattr(sweep_run, "run_experiment", real)
    again = sweep(base_config(tmp_path, data_dir), [Replica(), Replica()])
    assert again.ran == [broken.key] and again.failed == []


@pytest.mark.parametrize(
    ("signum", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)], ids=["ctrl-c", "sigterm"]
)
def test_ctrl_c_or_sigterm_cancels_the_configurations_not_started_and_ends_those_running_killed(
    signum, raised, tmp_path, data_dir, monkeypatch, request
):
    def stop():
        signal.pthread_kill(threading.main_thread().ident, signum)

    # Python's own Ctrl-C handler, whatever an earlier test or library of this process installed
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))

    started, estimate = [], Planner.estimate

    def estimate_when_started(planner, point, docs_per_demo):  # a configuration's first step in its thread
        if threading.current_thread() is not threading.main_thread():
            started.append(point.label)
        return estimate(planner, point, docs_per_demo)

    monkeypatch.setattr(Planner, "estimate", estimate_when_started)

    # the signal once both runs have answered their first question and are answering the second: a run stops while
    # it waits for that one (paused), keeping the first
    together = threading.Barrier(2, action=stop, timeout=WAIT_S)
    replicas = [Replica(together, pause_s=1.0, at_call=2), Replica(together, pause_s=1.0, at_call=2)]
    base = base_config(tmp_path, data_dir)
    began, reports = time.monotonic(), []
    with terminate_on_sigterm(), pytest.raises(raised):
        sweep(base, replicas, reports=reports)
    assert time.monotonic() - began < WAIT_S
    assert any(line.startswith(f"stopping ({raised.__name__}): the running configurations end") for line in reports)
    assert len(started) == 2, started  # the other two configurations never started
    assert all(1 <= r.calls < QUESTIONS for r in replicas), [r.calls for r in replicas]  # stopped before the end

    client = tracking.client(base.runs_dir)
    runs = client.search_runs([tracking.experiment_id(client, base.runs_dir)])
    kinds = {run.data.tags[tracking.RUN_KIND_TAG] for run in runs}
    assert kinds == {"sweep", "run"} and {run.info.status for run in runs} == {"KILLED"}
    assert len(runs) == 1 + 2  # the sweep and the two configurations that had started

    again = sweep(base, [Replica(), Replica()])
    assert len(again.ran) == 4
    resumed = sorted(row.resumed for row in again.rows)  # the two stopped runs go on from where they were
    assert resumed[:2] == [0, 0] and all(0 < n < QUESTIONS for n in resumed[2:]), resumed


def test_the_command_line_refuses_no_parallel_runs(tmp_path, data_dir, capsys):
    argv = ["sweep", "--dataset", "hotpotqa", "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs")]
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--parallel-runs", "0"])
    assert stopped.value.code == 2
    assert "--parallel-runs 0: must be at least 1" in capsys.readouterr().err


def test_the_command_line_refuses_several_servers_for_a_local_model_before_trying_them(tmp_path, data_dir, capsys):
    argv = ["sweep", "--dataset", "hotpotqa", "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs")]
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--lm", "smollm2-135m", "--api-base", ",".join(URLS)])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "--api-base names 2 servers" in err and "--lm 'smollm2-135m' is a local model" in err
    assert "no server answered" not in err
