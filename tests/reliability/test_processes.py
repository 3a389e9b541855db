"""Real processes: kill -9 and SIGTERM part-way through a run, then the same command resumes it; two runs started
together on a new runs directory both finish. SmolLM2 answers (the answers do not matter, the records do)."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragscale.experiments import tracking

pytestmark = pytest.mark.slow

MAIN = "import sys; from ragscale.experiments.cli import main; sys.exit(main())"


def command(runs: Path, *extra: str, limit: int = 8) -> list[str]:
    return [
        sys.executable, "-c", MAIN, "run", "--method", "closed-book", "--dataset", "hotpotqa", "--lm", "smollm2-135m",
        "--limit", str(limit), "--threads", "1", "--no-cache", "--no-progress", "--runs-dir", str(runs), *extra,
    ]  # fmt: skip


def complete_lines(path: Path) -> list[str]:
    """The records a reader can parse (a kill may cut the last line short)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            json.loads(line)
        except json.JSONDecodeError:
            continue
        lines.append(line)
    return lines


def stop_after(runs: Path, records: int, signum: int) -> tuple[subprocess.Popen, Path]:
    """Start a run and send it ``signum`` once ``records`` questions are written; the run's predictions file."""
    process = subprocess.Popen(command(runs), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        found = list((runs / "work").glob("*/predictions.jsonl")) if (runs / "work").exists() else []
        if found and len(complete_lines(found[0])) >= records:
            process.send_signal(signum)
            return process, found[0]
        if process.poll() is not None:
            pytest.fail(f"the run ended before it was stopped: {process.communicate()[1][-2000:]}")
        time.sleep(0.2)
    process.kill()
    pytest.fail("the run wrote no records in time")


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_run_stopped_by_a_signal_resumes_with_the_same_command(tmp_path, signum):
    runs = tmp_path / "runs"
    process, predictions = stop_after(runs, 2, signum)
    _, err = process.communicate(timeout=120)
    run_id = predictions.parent.name
    status = tracking.client(runs).get_run(run_id).info.status
    if signum == signal.SIGTERM:
        assert process.returncode == 143, err[-2000:]
        assert "terminated; rerun the same command to resume" in err
        assert status == "KILLED"
        logged = [a.path for a in tracking.client(runs).list_artifacts(run_id)]
        assert "predictions.jsonl" in logged and "program.json" in logged
    else:
        assert process.returncode == -signal.SIGKILL
        assert status == "RUNNING"  # nobody could mark it: the lock file tells a resumed run it is dead
    before = complete_lines(predictions)

    out = tmp_path / "summary.json"
    done = subprocess.run(command(runs, "--json", str(out)), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(out.read_text())
    assert summary["mlflow_run_id"] == run_id and summary["resumed"] == len(before) >= 2
    assert summary["n"] == 8 and tracking.client(runs).get_run(run_id).info.status == "FINISHED"
    after = complete_lines(predictions)
    assert after[: len(before)] == before  # carried as they were, latency and all: not computed again
    assert len(after) == 8


def test_two_runs_started_together_on_a_new_runs_directory_both_finish(tmp_path):
    runs = tmp_path / "runs"
    hybrid = ["--method", "rag", "--retriever", "hybrid", "--corpus", "questions"]
    processes = [
        subprocess.Popen(command(runs, *hybrid, limit=2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [p.communicate(timeout=400) for p in processes]
    for process, (_, err) in zip(processes, results, strict=True):
        assert process.returncode == 0, err[-3000:]
    summaries = [json.loads(out) for out, _ in results]
    assert summaries[0]["mlflow_run_id"] != summaries[1]["mlflow_run_id"]  # a live run is never taken over
    assert summaries[0]["retrieval_recall"] == summaries[1]["retrieval_recall"]
    indexed = [err.count("indexed ") for _, err in results]
    assert sorted(indexed) == [0, 1], indexed  # the corpus is embedded once; the other run finds it built
    assert len(tracking.finished_runs(runs)) == 2


def test_main_gives_the_previous_sigterm_handler_back(tmp_path):
    from ragscale.experiments.cli import main

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit):  # fails inside the command (an unknown LM), after the handler was set
        main(["run", "--method", "rag", "--dataset", "hotpotqa", "--lm", "gpt-17", "--runs-dir", str(tmp_path)])
    assert signal.getsignal(signal.SIGTERM) is before
