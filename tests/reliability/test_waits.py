"""Every wait bounded: a run against an LM server that hangs, errors, answers garbage or dies ends with its questions
failed and what finished kept; SIGTERM ends a run waiting on a hung request within seconds; a sweep's time limit ends
the configuration waiting on one; a tracking server whose API fails is refused at once, and MLflow's own retries of
one are bounded. The LM is the fake server of ``tests/servers.py`` (closed-book, so no index is built)."""

import http.server
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from servers import faulty_chat, send_json, serving_in_thread

from ragscale.experiments import tracking
from ragscale.experiments.cli import main
from ragscale.experiments.evaluate import PREDICTIONS

ENTRY = "from ragscale.experiments.cli import entry; entry()"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """One MLflow store for the module's runs (a new store costs seconds to create): each test's server has its own
    URL, so its runs have their own keys, found by it (``runs_of``)."""
    return tmp_path_factory.mktemp("waits") / "runs"


def run_args(data_dir: Path, runs: Path, url: str, *extra: str, limit: int = 1) -> list[str]:
    return [
        "run", "--method", "closed-book", "--dataset", "hotpotqa", "--lm", "openai/x", "--api-base", f"{url}/v1",
        "--data-dir", str(data_dir), "--runs-dir", str(runs), "--limit", str(limit), "--threads", "1",
        "--no-cache", "--no-progress", *extra,
    ]  # fmt: skip


def runs_of(runs: Path, url: str) -> list:
    """The MLflow runs whose LM was the server at ``url``."""
    return tracking.search_runs(runs, f"params.api_base = '{url}/v1'")


def records(runs: Path, run) -> list[dict]:
    path = runs / "work" / run.info.run_id / PREDICTIONS
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_a_hung_server_fails_the_question_at_the_request_timeout_and_the_rerun_asks_it_again(data_dir, runs,
                                                                                                capsys):  # fmt: skip
    hang = faulty_chat("hang")
    with serving_in_thread(hang) as url:
        assert main(run_args(data_dir, runs, url, "--request-timeout", "0.3")) == 1
        [run] = runs_of(runs, url)
        [record] = records(runs, run)
        assert record["latency_s"] < 10  # 3 tries of 0.3 s, 1 s and 2 s apart
        assert record["error"].startswith("TimeoutError: openai/x at ")
        assert "no answer within 0.3 s, 3 tries" in record["error"]
        assert "no answer within 0.3 s" in capsys.readouterr().err
        asked = hang.calls
        assert asked == 3

        assert main(run_args(data_dir, runs, url, "--request-timeout", "0.3")) == 1
        assert hang.calls == 2 * asked  # the failed question is asked again, in the same run
        assert [r.info.status for r in runs_of(runs, url)] == ["FAILED"]


@pytest.mark.parametrize(("fault", "error"), [("500", "LMServerError"), ("garbage", "is not JSON")])
def test_a_server_that_errors_or_answers_garbage_fails_the_run_in_one_message(fault, error, data_dir, runs,
                                                                              capsys):  # fmt: skip
    with serving_in_thread(faulty_chat(fault)) as url:
        assert main(run_args(data_dir, runs, url)) == 1
        [run] = runs_of(runs, url)
    err = capsys.readouterr().err
    assert "the run failed" in err and error in err and "Traceback" not in err
    [failure] = [line for line in err.splitlines() if "the run failed" in line]
    assert failure.endswith("asks the failed questions again")  # one line, however long the server's answer
    assert error in records(runs, run)[0]["error"]
    assert run.info.status == "FAILED"


def test_a_server_that_dies_mid_run_keeps_the_answers_it_gave(data_dir, runs, capsys):
    with serving_in_thread(faulty_chat("dies", after=1)) as url:
        assert main(run_args(data_dir, runs, url, "--max-failed", "0.25", limit=2)) == 1
        [run] = runs_of(runs, url)
    err = capsys.readouterr().err
    assert "1 of 2 questions failed" in err and "Traceback" not in err
    answered, failed = sorted(records(runs, run), key=lambda r: r["error"] is not None)
    assert answered["error"] is None and answered["prediction"]
    assert "LMTransportError" in failed["error"]


def test_sigterm_ends_a_run_waiting_on_a_hung_request_within_10_s_its_run_killed(data_dir, runs):
    hang = faulty_chat("hang", after=1)
    with serving_in_thread(hang) as url:
        command = [sys.executable, "-c", ENTRY, *run_args(data_dir, runs, url, "--request-timeout", "120", limit=2)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 180
        while hang.calls < 2:  # the first question answered, the second waiting on the hung server
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the run never waited on the hung request: {process.communicate()[1][-2000:]}")
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        began = time.monotonic()
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail("the run did not end after SIGTERM")
        took = time.monotonic() - began
        [run] = runs_of(runs, url)
    assert took < 10, took
    assert process.returncode == 143, err[-2000:]
    assert "terminated; rerun the same command to resume" in err
    assert run.info.status == "KILLED"
    [answered] = records(runs, run)  # the question that finished, kept
    assert answered["error"] is None


def test_a_sweeps_time_limit_ends_the_configuration_waiting_on_a_hung_server(shared_datasets, runs, monkeypatch):
    from ragscale.data import load_split
    from ragscale.experiments.config import RunConfig
    from ragscale.experiments.sweep.grid import Grid
    from ragscale.experiments.sweep.run import run_sweep
    from ragscale.experiments.sweep.setup import Loaded
    from ragscale.experiments.sweep.sitting import SweepOptions
    from ragscale.experiments.sweep.speed import Speed
    from ragscale.experiments.sweep.stopping import Stopper, TimeLimitError
    from ragscale.programs.lm import load_lm

    stoppers, reached = [], []
    start_timer = Stopper.stop_at
    monkeypatch.setattr(Stopper, "stop_at", lambda self, *args: stoppers.append(self) or start_timer(self, *args))

    class LimitPassesWhileItHangs(faulty_chat("hang")):
        """The sweep's time limit passes once the configuration's request hangs: as the timer does, it sets the
        sweep's reason to stop."""

        def do_POST(self):  # noqa: N802 -- http.server's name, on a class ruff cannot see the base of
            reached.append(time.monotonic())
            stoppers[0].reason = TimeLimitError("the time limit of 60 s passed")
            super().do_POST()

    examples = load_split("hotpotqa", "train", shared_datasets)[:4], load_split("hotpotqa", "dev", shared_datasets)[:2]
    grid = Grid(methods=("rag",), docs=(1,), shots=(0,), iterations=(1,), budgets=(100_000,), baselines=False)
    with serving_in_thread(LimitPassesWhileItHangs) as url:
        base = RunConfig(method="rag", dataset="hotpotqa", lm="openai/x", api_base=f"{url}/v1", retriever="bm25",
                         runs_dir=runs, limit=2, train_limit=4, threads=1, request_timeout=120)  # fmt: skip
        lm = load_lm("openai/x", api_base=f"{url}/v1", cache=False, request_timeout=120)
        loaded = Loaded(lm=lm, examples=examples, speed=Speed(1000.0, 100.0, "stated"))
        options = SweepOptions(progress=False, stop_after=3600.0)
        result = run_sweep(grid, base, options, loaded, sweep_dir=runs / "sweep", report=lambda _: None)
        took = time.monotonic() - reached[0]
        [run] = runs_of(runs, url)
    assert took < 30, took  # not the 3 tries of 120 s the hung request would take
    assert result.ran == [] and len(result.stopped) == 1
    assert run.info.status == "KILLED"  # not left RUNNING


def test_a_sweeps_time_limit_ends_it_while_the_lms_speed_is_timed_on_a_hung_server(shared_datasets, tmp_path, capsys):
    runs = tmp_path / "runs"  # a store of its own: no earlier run gives the LM's speed, so the sweep times it
    with serving_in_thread(faulty_chat("hang")) as url:
        start = time.monotonic()
        code = main(["sweep", "--dataset", "hotpotqa", "--methods", "rag", "--docs", "1", "--shots", "0", "--lm",
                     "openai/x", "--api-base", f"{url}/v1", "--limit", "2", "--retriever", "bm25", "--corpus",
                     "questions", "--data-dir", str(shared_datasets), "--runs-dir", str(runs), "--stop-after", "0.05",
                     "--no-progress", "--no-baselines"])  # fmt: skip
        took = time.monotonic() - start
    assert code == 1
    assert took < 3 + 30, took  # the limit (3 s) and the 30 s, not 3 tries of --request-timeout
    assert "the time limit passed while the LM's speed was timed" in capsys.readouterr().err
    assert [run.info.status for run in tracking.search_runs(runs, "")] == []  # no run was opened, none left RUNNING


def test_a_request_timeout_that_is_not_a_positive_number_is_a_usage_error(capsys):
    from ragscale.experiments.cli import build_parser

    for value in ("0", "-1", "soon", "nan"):
        with pytest.raises(SystemExit) as stopped:
            build_parser().parse_args(["sweep", "--dataset", "hotpotqa", "--request-timeout", value])
        assert stopped.value.code == 2
        assert f"--request-timeout: must be a positive number of seconds, got '{value}'" in capsys.readouterr().err


class StallingChroma(http.server.BaseHTTPRequestHandler):
    """A chroma server that answers the client's own checks (who it is, its tenant and database) and then never
    answers, as a stalled server does, until the test ends."""

    release = threading.Event()

    def do_GET(self):
        if "/databases/" in self.path:
            body = {"id": str(uuid.UUID(int=0)), "name": "default_database", "tenant": "default_tenant"}
        elif self.path.endswith("/auth/identity"):
            body = {"user_id": "test", "tenant": "default_tenant", "databases": ["default_database"]}
        elif "/tenants/" in self.path:
            body = {"name": "default_tenant"}
        else:
            self.release.wait(timeout=600)
            return
        send_json(self, body)

    def do_POST(self):
        self.release.wait(timeout=600)

    def log_message(self, *args):
        pass


def test_a_stalled_chroma_server_fails_its_request_at_the_timeout():
    import httpx

    from ragscale.programs.retrieval.dense import chroma_client

    with serving_in_thread(StallingChroma) as url:
        client = chroma_client(chroma_url=url, timeout_s=0.5)
        began = time.monotonic()
        with pytest.raises(httpx.TimeoutException):
            client.get_or_create_collection("stalled", embedding_function=None)
        assert time.monotonic() - began < 10


class FailingTracking(http.server.BaseHTTPRequestHandler):
    """A tracking server that is up (its health check answers) and whose API answers every request HTTP 500."""

    def do_GET(self):
        if self.path == "/health":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")
            return
        self.send_error(500, "database unavailable")

    def do_POST(self):
        self.do_GET()

    def log_message(self, *args):
        pass


def test_a_tracking_server_whose_api_fails_exits_2_at_once_in_one_line(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "unset")  # restored after the test, also after the flag sets it
    with serving_in_thread(FailingTracking) as uri:
        began = time.monotonic()
        with pytest.raises(SystemExit) as stopped:
            main([*run_args(data_dir, tmp_path / "runs", "http://127.0.0.1:9"), "--tracking-uri", uri])
        assert time.monotonic() - began < 30
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert f"--tracking-uri {uri}" in err and "HTTP 500" in err and "up but fails" in err


def test_mlflows_retries_of_a_failing_tracking_server_end_in_seconds(tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException

    with serving_in_thread(FailingTracking) as uri:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        began = time.monotonic()
        with pytest.raises(MlflowException):
            tracking.start_run(tmp_path / "runs", run_name="bounded", params={})
        assert time.monotonic() - began < 30  # MLflow's own default retries for about four minutes
