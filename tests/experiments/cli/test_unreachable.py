"""A server named by URL that does not answer stops the command at once, exit 2, naming the flag and the URL:
before this check MLflow's client retried a refused tracking server for minutes, and a run reached its LM server
only after building its indexes."""

import contextlib
import http.server
import time

import pytest
from servers import free_port, serving_in_thread

from ragscale.experiments import parts
from ragscale.experiments.cli import main


@contextlib.contextmanager
def answering(status: int):
    """A real HTTP server on localhost that answers every GET with ``status``; yields its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    with serving_in_thread(Handler) as url:
        yield url


@pytest.fixture
def no_model(monkeypatch):
    """Any model load fails the test: every check must come before it."""

    def load(config):
        raise AssertionError("a model loaded before the servers were checked")

    monkeypatch.setattr(parts, "load_lm_for", load)


def run_args(data_dir, tmp_path, *extra: str) -> list[str]:
    return ["run", "--method", "rag", "--dataset", "hotpotqa", "--data-dir", str(data_dir), "--runs-dir",
            str(tmp_path / "runs"), "--no-progress", *extra]  # fmt: skip


def exits_2_quickly(argv: list[str], capsys) -> str:
    began = time.monotonic()
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert time.monotonic() - began < 10
    return capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "compare", "sweep"])
def test_an_unreachable_tracking_server_exits_2_naming_it(command, data_dir, tmp_path, monkeypatch, capsys, no_model):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    argv = {
        "run": run_args(data_dir, tmp_path),
        "compare": ["compare", "--runs-dir", str(tmp_path / "runs")],
        "sweep": ["sweep", "--dataset", "hotpotqa", "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs")],
    }[command]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "unset")  # restored after the test, also after the flag sets it
    err = exits_2_quickly([*argv, "--tracking-uri", uri], capsys)
    assert f"--tracking-uri {uri}" in err and f"GET {uri}/health" in err and "refused" in err

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    err = exits_2_quickly(argv, capsys)
    assert f"MLFLOW_TRACKING_URI {uri}" in err
    assert not (tmp_path / "runs" / "mlflow.db").exists()


def test_an_unreachable_lm_server_or_chroma_server_exits_2_before_any_model_loads(data_dir, tmp_path, capsys, no_model):
    url = f"http://127.0.0.1:{free_port()}/v1"
    err = exits_2_quickly(run_args(data_dir, tmp_path, "--lm", "openai/qwen", "--api-base", url), capsys)
    assert f"--api-base {url}" in err and f"GET {url}/models" in err

    teacher = ("--teacher", "openai/qwen", "--teacher-api-base", url, "--optimizer", "bootstrap")
    err = exits_2_quickly(run_args(data_dir, tmp_path, *teacher), capsys)
    assert f"--teacher-api-base {url}" in err

    chroma = f"127.0.0.1:{free_port()}"  # host:port, as the dense index takes it
    err = exits_2_quickly(run_args(data_dir, tmp_path, "--chroma-url", chroma), capsys)
    assert f"--chroma-url http://{chroma}" in err and "/api/v2/heartbeat" in err


def test_a_server_that_answers_passes_and_a_wrong_base_url_is_named(data_dir, tmp_path, capsys):
    from ragscale.experiments.config import ConfigError
    from ragscale.experiments.reach import check_reachable

    for status in (200, 401):
        with answering(status) as url:
            check_reachable(url, "--api-base", "openai")
    with answering(404) as url, pytest.raises(ConfigError, match=r"HTTP 404 .*ending in /v1"):
        check_reachable(url, "--api-base", "openai")
