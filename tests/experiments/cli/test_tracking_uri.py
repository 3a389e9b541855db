"""Where runs go: the sqlite store under --runs-dir by default, MLFLOW_TRACKING_URI, --tracking-uri over both;
and (opt-in, ``-m server``) a real MLflow tracking server that ``ragscale run`` and ``ragscale compare`` use."""

import os
import sys
from pathlib import Path

import pytest
from doubles import SCRIPT, scripted_lm
from servers import free_port, served

from ragscale.experiments import parts, tracking
from ragscale.experiments.cli import main


def run_closed_book(data_dir, runs_dir, *extra: str) -> int:
    return main(
        ["run", "--method", "closed-book", "--dataset", "hotpotqa", "--adapter", "chat", "--data-dir",
         str(data_dir), "--runs-dir", str(runs_dir), "--no-progress", *extra]
    )  # fmt: skip


def no_tracking_uri(monkeypatch) -> None:
    """MLFLOW_TRACKING_URI unset for the test and restored after it, also when the CLI sets it (``--tracking-uri``):
    set first, so that monkeypatch records and restores the variable."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "unset")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")


def test_runs_go_to_the_flag_over_the_environment_over_the_local_store(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(parts, "load_lm_for", lambda config: scripted_lm(SCRIPT))
    monkeypatch.chdir(tmp_path)
    no_tracking_uri(monkeypatch)
    runs_dir = tmp_path / "runs"
    assert tracking.tracking_uri(runs_dir) == f"sqlite:///{runs_dir.resolve()}/mlflow.db"
    assert tracking.is_local(runs_dir)

    environment, flag = (f"sqlite:///{tmp_path / name}.db" for name in ("environment", "flag"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", environment)
    assert tracking.tracking_uri(runs_dir) == environment and not tracking.is_local(runs_dir)
    assert run_closed_book(data_dir, runs_dir) == 0
    assert run_closed_book(data_dir, runs_dir, "--tracking-uri", flag, "--fresh") == 0
    assert os.environ["MLFLOW_TRACKING_URI"] == flag

    def runs_in(uri: str) -> list:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        return tracking.finished_runs(runs_dir)

    assert len(runs_in(environment)) == len(runs_in(flag)) == 1
    assert not (runs_dir / "mlflow.db").exists()  # the local store was never opened
    assert (runs_dir / "artifacts").is_dir() and not (tmp_path / "mlruns").exists()  # not MLflow's ./mlruns


def offline_as_a_user_starts_it() -> dict:
    """A child's environment as a fresh shell gives it: no variable of ragscale's offline set (pytest's own process
    has them all, and a child would inherit them)."""
    return {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}


@pytest.mark.server
def test_run_and_compare_against_the_readmes_mlflow_server_started_offline(data_dir, tmp_path, monkeypatch, capsys):
    """The README's line, `ragscale mlflow server ...`, in a clean environment: `mlflow server` alone hangs offline
    in LiteLLM's price-map fetch; `ragscale mlflow ui` then lists the run from the same store."""
    import json
    import urllib.request

    from mlflow.tracking import MlflowClient

    monkeypatch.setattr(parts, "load_lm_for", lambda config: scripted_lm(SCRIPT))
    no_tracking_uri(monkeypatch)
    ragscale = str(Path(sys.executable).parent / "ragscale")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    server = tmp_path / "server"
    command = [ragscale, "mlflow", "server", "--backend-store-uri", f"sqlite:///{server}/mlflow.db",
               "--artifacts-destination", str(server / "artifacts"), "--port", str(port)]  # fmt: skip
    server.mkdir()
    env = offline_as_a_user_starts_it()
    with served(command, port, tmp_path / "mlflow.log", timeout_s=120, env=env, ready=f"{uri}/health"):
        runs_dir = tmp_path / "runs"
        assert run_closed_book(data_dir, runs_dir, "--tracking-uri", uri) == 0
        summary_out = capsys.readouterr().out
        assert main(["compare", "--runs-dir", str(runs_dir), "--tracking-uri", uri]) == 0
        table = capsys.readouterr().out
        assert "closed-book" in table and "66.7" in table  # q4 and q5 of the script are right, q6 wrong

        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(tracking.EXPERIMENT).experiment_id
        [run] = client.search_runs([experiment], filter_string=f"tags.`{tracking.RUN_KIND_TAG}` = 'run'")
        assert run.info.run_id in summary_out and run.info.status == "FINISHED"
        assert run.data.params["method"] == "closed-book" and run.data.metrics["em"] == pytest.approx(66.67, 0.01)
        logged = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"predictions.jsonl", "summary.json"} <= logged
        assert (server / "artifacts").is_dir() and not (runs_dir / "mlflow.db").exists()
        assert not (runs_dir / "artifacts").exists()

    port = free_port()
    ui = [ragscale, "mlflow", "ui", "--backend-store-uri", f"sqlite:///{server}/mlflow.db", "--port", str(port)]
    with served(ui, port, tmp_path / "ui.log", timeout_s=120, env=env, ready=f"http://127.0.0.1:{port}/health"):
        search = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search",
            data=json.dumps({"experiment_ids": [experiment]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(search, timeout=30) as answer:
            listed = {r["info"]["run_id"] for r in json.load(answer)["runs"]}
        assert run.info.run_id in listed
