"""Small faults of the command line, each refused or handled as a user expects: a budget that is no positive
token count, a FIFO given as a file, a text field holding a list, and ``ragscale mlflow ui`` stopped by SIGTERM.

The refusals run the real command line (``main([...])``) and exit 2 before any model loads; the MLflow test starts
the real ``ragscale mlflow ui`` in a process of its own and watches every process it started."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from doubles import record, refused
from servers import answers, free_port

MAIN = "import sys; from ragscale.experiments.cli import main; sys.exit(main())"
START_S = 180  # MLflow's server starts in seconds, but this machine may be busy
GONE_S = 15  # how long what ragscale mlflow started may take to end after SIGTERM


def run_argv(data_dir: Path, tmp_path: Path, *flags: str) -> list[str]:
    return ["run", "--method", "rag", "--dataset", "hotpotqa", "--lm", "smollm2-135m", "--no-progress",
            "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs"), *flags]  # fmt: skip


# --budgets


@pytest.mark.parametrize("budgets", ["0", "2k,0", "0.1", "-1", "many"])
def test_a_sweep_budget_that_is_no_positive_token_count_exits_2_naming_it(budgets, data_dir, tmp_path, capsys):
    dead = f"http://127.0.0.1:{free_port()}/v1"  # were the budgets accepted, this would be refused instead
    argv = ["sweep", "--dataset", "hotpotqa", "--lm", "openai/x", "--api-base", dead, "--budgets", budgets,
            "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs")]  # fmt: skip
    err = refused(argv, capsys)
    bad = next(b for b in budgets.split(",") if b != "2k")
    assert f"--budgets {bad!r} is not a" in err and "token count" in err
    assert dead not in err


# a FIFO given as a file


@pytest.mark.parametrize("flag", ["--corpus", "--eval-file"])
def test_a_fifo_given_as_a_file_is_named_a_fifo_not_a_missing_file(flag, data_dir, tmp_path, capsys):
    fifo = tmp_path / "passages.jsonl"
    os.mkfifo(fifo)
    err = refused(run_argv(data_dir, tmp_path, flag, str(fifo)), capsys)
    assert "is a FIFO, not a regular file" in err and str(fifo) in err and flag in err
    assert "no such file" not in err
    if flag == "--corpus":
        assert f"--corpus {fifo} is a FIFO, not a regular file" in err


# a text field that holds a list


@pytest.mark.parametrize(
    ("line", "field", "found"),
    [
        ({"id": "a", "contents": ["Paris", "is the capital"]}, "contents", "list"),
        ({"id": "a", "contents": 7}, "contents", "int"),
        ({"id": "a", "title": "T", "text": ["one", "two"]}, "text", "list"),
        ({"id": ["a"], "text": "one"}, "id", "list"),
    ],
)
def test_a_corpus_field_that_is_no_string_names_the_file_the_line_the_field_and_its_type(
    line, field, found, data_dir, tmp_path, capsys
):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "z", "text": "fine"}) + "\n" + json.dumps(line) + "\n")
    err = refused(run_argv(data_dir, tmp_path, "--corpus", str(corpus)), capsys)
    assert f"{corpus}, line 2: field {field!r}" in err and f"got {found}" in err
    assert "is empty" not in err


@pytest.mark.parametrize(
    ("field", "value", "found"),
    [("question", ["Who?", "Where?"], "list"), ("answers", "Paris", "str"), ("answers", ["Paris", 3], "list of int")],
)
def test_a_dataset_field_of_the_wrong_type_names_the_file_the_line_the_field_and_its_type(
    field, value, found, data_dir, tmp_path, capsys
):
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps(record(4)) + "\n" + json.dumps({**record(5), field: value}) + "\n")
    err = refused(run_argv(data_dir, tmp_path, "--eval-file", str(path)), capsys)
    assert f"{path}, line 2: field {field!r}" in err and f"got {found}" in err


# ragscale mlflow ui


def started_by(mark: str) -> dict[int, str]:
    """The live processes whose environment holds ``mark``, by id, with their command lines: every process a
    command given it started, and theirs, whatever became of their parents and whatever group they are in."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or mark.encode() not in (entry / "environ").read_bytes():
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


@pytest.mark.slow  # a real MLflow server: a few seconds to start, and each of its ten processes imports MLflow
def test_sigterm_to_ragscale_mlflow_ui_ends_every_process_mlflow_started(tmp_path):
    port, value = free_port(), uuid.uuid4().hex
    mark = f"RAGSCALE_TEST_MARK={value}"  # as /proc/PID/environ holds it
    command = [sys.executable, "-c", MAIN, "mlflow", "ui", "--backend-store-uri", f"sqlite:///{tmp_path}/mlflow.db",
               "--port", str(port), "--workers", "1"]  # fmt: skip
    log_path = tmp_path / "mlflow.log"
    with log_path.open("w") as log:
        env = {**os.environ, "RAGSCALE_TEST_MARK": value}
        ragscale = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + START_S
        while not answers(port, f"http://127.0.0.1:{port}/health"):
            if ragscale.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ragscale mlflow ui did not answer: {log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        # the job runner's huey workers, which outlived a stopped MLflow, start a few seconds after the server
        while not any("huey" in line for line in started_by(mark).values()) and time.monotonic() < deadline:
            time.sleep(0.2)

        ragscale.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + GONE_S
        while (ragscale.poll() is None or started_by(mark)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(started_by(mark).values()) == [], f"still running {GONE_S} s after SIGTERM to ragscale"
        assert ragscale.returncode == 128 + signal.SIGTERM
    finally:
        ragscale.kill()
        ragscale.wait()
        for pid in started_by(mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
