"""One failure stays its own: a full or read-only disk ends a run in one line, a question too long for the model fails
alone, and a run whose process was killed is marked KILLED by the next command (a finished run's failed questions
asked again in it: ``test_resume.py``).

The disk tests mount a tmpfs (a full one, or a read-only one) where the run writes, and skip, saying why, where
``mount`` is refused (not root, no tmpfs). A runs directory that needs an MLflow store gets a copy of one whose
tables MLflow made once for the module (``store``): making them takes seconds.
"""

import contextlib
import errno
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dspy
import pytest
from doubles import SCRIPT, ScriptedChatEngine
from dspy.lm15 import ContextLengthError
from servers import faulty_chat, serving_in_thread

from ragscale.data import load_split
from ragscale.experiments import resume, tracking
from ragscale.experiments.cli import main
from ragscale.experiments.config import RunConfig
from ragscale.experiments.evaluate import PREDICTIONS, answer_one
from ragscale.experiments.runner import run_experiment
from ragscale.optimizers.context import ContextWindowError
from ragscale.programs import build_program
from ragscale.programs.lm import make_adapter
from ragscale.programs.lm.meter import MeteredLM

MAIN = "import sys; from ragscale.experiments.cli import main; sys.exit(main())"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """An MLflow sqlite store with its tables made and no ragscale experiment yet (each runs directory's own
    ``client`` adds it, with its own artifact folder)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}")
    return path


def runs_with(store: Path, runs: Path) -> Path:
    """``runs``, a runs directory holding a copy of ``store``."""
    runs.mkdir(parents=True, exist_ok=True)
    shutil.copy(store, runs / "mlflow.db")
    return runs


@contextlib.contextmanager
def tmpfs(folder: Path, *options: str):
    """A tmpfs mounted on ``folder`` with ``options`` (``size=256k``, ``ro``) for the block; the test skips, saying
    why, where it cannot be mounted."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here ({mounted.stderr.strip() or mounted.returncode})")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], check=True)  # a file MLflow left open: gone once closed


def fill(folder: Path) -> None:
    """Write into ``folder`` until its file system is full."""
    with (folder / "filler").open("wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65536)
    with pytest.raises(OSError) as full:
        (folder / "probe").write_bytes(b"\0" * 4096)
    assert full.value.errno == errno.ENOSPC


def run_argv(url: str, runs: Path, data_dir: Path) -> list[str]:
    """``ragscale run`` of closed-book on the server at ``url``, asking it every question (no cache)."""
    return [
        "run", "--method", "closed-book", "--dataset", "hotpotqa", "--lm", "openai/x", "--api-base", f"{url}/v1",
        "--data-dir", str(data_dir), "--runs-dir", str(runs), "--no-progress", "--no-cache",
    ]  # fmt: skip


def run_fails_in_one_line(runs: Path, data_dir: Path, capfd, caplog, pattern: str) -> None:
    """``ragscale run`` of closed-book on a server that answers exits 1, its one error line matching ``pattern``,
    with no traceback: none raised out of the command, none logged."""
    with serving_in_thread(faulty_chat("dies", after=10**6)) as url:  # it answers every call this test makes
        code = main(run_argv(url, runs, data_dir))
    err = capfd.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err and not [r for r in caplog.records if r.exc_info], err
    errors = [line for line in err.splitlines() if line.startswith("ragscale run:")]  # progress bars aside
    assert len(errors) == 1 and re.fullmatch(pattern, errors[0]), err


def statuses(runs: Path) -> list[str]:
    return [run.info.status for run in tracking.search_runs(runs, "attributes.status != 'none'")]


def test_a_full_disk_ends_the_run_in_one_line_naming_the_file_and_the_run_failed(tmp_path, data_dir, store, capfd,
                                                                                  caplog):  # fmt: skip
    runs = runs_with(store, tmp_path / "runs")
    with tmpfs(runs / "work", "size=256k") as work:
        fill(work)
        run_fails_in_one_line(runs, data_dir, capfd, caplog,
                              rf"ragscale run: error: No space left on device: {work}/\w+/program\.json")  # fmt: skip
        assert statuses(runs) == ["FAILED"]  # the store, on another disk, took the status
        assert list(runs.rglob("*.tmp")) == []


def test_a_full_disk_under_the_store_leaves_no_half_made_store(tmp_path, data_dir, capfd, caplog):
    with tmpfs(tmp_path / "runs", "size=256k") as runs:
        run_fails_in_one_line(runs, data_dir, capfd, caplog,
                              rf"ragscale run: error: No space left on device: {runs}/mlflow\.db")  # fmt: skip
        assert not (runs / "mlflow.db").exists()  # a half-made one would fail every later command on its tables
        assert list(runs.rglob("*.tmp")) == []


def test_a_read_only_file_system_ends_the_run_in_one_line_and_the_run_failed(tmp_path, data_dir, store, capfd,
                                                                             caplog):  # fmt: skip
    runs = runs_with(store, tmp_path / "runs")
    with tmpfs(runs / "artifacts", "ro", "size=256k") as artifacts:
        run_fails_in_one_line(runs, data_dir, capfd, caplog,
                              rf"ragscale run: error: Read-only file system: {artifacts}/\S+")  # fmt: skip
        assert statuses(runs) == ["FAILED"]


def scripted(engine, window: int = 4096) -> MeteredLM:
    return MeteredLM("local/scripted", engine=engine, cache=False, num_retries=0, context_window=window)


class Counting(ScriptedChatEngine):
    def __init__(self, script):
        super().__init__(script)
        self.asked: list[str] = []

    def complete(self, request):
        self.asked.append(request.messages[-1].text or "")
        return super().complete(request)


def config_on(runs: Path, data_dir: Path) -> RunConfig:
    return RunConfig(method="closed-book", dataset="hotpotqa", adapter="chat", data_dir=data_dir, runs_dir=runs,
                     threads=1, cache=False)  # fmt: skip


def test_a_question_too_long_for_the_window_fails_alone_naming_itself_and_the_others_run(tmp_path, data_dir, store):
    config = config_on(runs_with(store, tmp_path / "runs"), data_dir)
    long_question = "Which sea does the Zorblat River flow into? " + "very " * 40_000  # ~50,000 tokens
    evalset = [
        ex if ex.id != "q5" else ex.copy(question=long_question)
        for ex in _examples(config, "dev")  # q4, q5, q6
    ]
    engine = Counting(SCRIPT)
    summary = run_experiment(config, lm=scripted(engine), examples=(_examples(config, "train"), evalset),
                             check_context=True, progress=False)  # fmt: skip
    assert (summary["n"], summary["failed"], len(engine.asked)) == (3, 1, 2)  # q5 never reached the model
    written = config.runs_dir / "work" / summary["mlflow_run_id"] / PREDICTIONS
    records = {r["id"]: r for r in map(json.loads, written.read_text().splitlines())}
    assert records["q5"]["error"].startswith("ContextWindowError: question q5: its prompt is ")
    assert "tokens" in records["q5"]["error"] and "the model's window is 4,096" in records["q5"]["error"]
    assert records["q4"]["error"] is None and records["q6"]["error"] is None
    assert tracking.client(config.runs_dir).get_run(summary["mlflow_run_id"]).info.status == "FINISHED"


def test_a_train_question_too_long_fails_the_run_before_it_opens_naming_the_question_and_its_file(tmp_path, data_dir):
    config = config_on(tmp_path / "runs", data_dir)
    train = [ex if ex.id != "q1" else ex.copy(question="why " * 40_000) for ex in _examples(config, "train")]
    with pytest.raises(
        ContextWindowError, match=rf"train question q1: its prompt is [\d,]+ tokens .*{config.train_path}"
    ):
        run_experiment(config, lm=scripted(Counting(SCRIPT)), examples=(train, _examples(config, "dev")),
                       check_context=True, progress=False)  # fmt: skip
    assert not config.runs_dir.exists()  # refused before any run was opened


def _examples(config: RunConfig, split: str) -> list:
    return list(load_split(config.dataset, split, config.data_dir))


class RefusesLongPrompts(ScriptedChatEngine):
    """Raises what the local engine raises on a prompt over its window."""

    def complete(self, request):
        raise ContextLengthError(
            "local/x: prompt of 612345 tokens + max_tokens=256 exceeds the context window of 32768"
        )


def test_a_prompt_the_engine_refuses_as_too_long_is_recorded_in_one_line_with_its_counts(data_dir):
    program = build_program("closed-book", None, k=1, iterations=1)
    example = _examples(config_on(data_dir, data_dir), "dev")[0]  # no run: its runs directory is never made
    with dspy.context(lm=scripted(RefusesLongPrompts(SCRIPT)), adapter=make_adapter("chat")):
        error = answer_one(program, example, retrieves=False)["error"]
    assert error.startswith("ContextWindowExceededError: ") and "prompt of 612345 tokens" in error
    assert "\n" not in error  # DSPy's advice after it is left out


def test_a_run_killed_by_sigkill_is_marked_killed_by_the_next_command(tmp_path, data_dir, store):
    runs = runs_with(store, tmp_path / "runs")
    hangs = faulty_chat("hang")
    with serving_in_thread(hangs) as url:
        process = subprocess.Popen(
            [sys.executable, "-c", MAIN, *run_argv(url, runs, data_dir)], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while hangs.calls == 0 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # until it asks its first question: its run is open
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL, process.stderr.read()[-3000:]
    assert statuses(runs) == ["RUNNING"]
    main(["compare", "--no-chart", "--runs-dir", str(runs)])
    assert statuses(runs) == ["KILLED"]


@pytest.mark.parametrize(
    "command", [["compare", "--no-chart"], ["allocate", "--budget", "8k", "--dataset", "hotpotqa"]]
)
def test_every_command_that_reads_runs_ends_those_no_live_process_holds_a_sweeps_too(tmp_path, store, command):
    runs = runs_with(store, tmp_path / "runs")
    dead = [resume.start_claimed(runs, run_name="run", params={}),
            resume.start_claimed(runs, run_name="sweep", params={}, kind="sweep")]  # fmt: skip
    for _, lock in dead:
        lock.close()  # what the death of the process that held it does
    nested = tracking.start_run(runs, run_name="evaluation", params={}, parent_run_id=dead[0][0])  # as autolog's
    run_id, live = resume.start_claimed(runs, run_name="live", params={})
    own = tracking.start_run(runs, run_name="a user's", params={})  # no lock: not ragscale's to end
    with contextlib.suppress(SystemExit):  # allocate finds no sweep to read: what it reads is not the point
        main([*command, "--runs-dir", str(runs)])
    client = tracking.client(runs)
    ended = [dead_id for dead_id, _ in dead] + [nested]
    assert [client.get_run(ended_id).info.status for ended_id in ended] == ["KILLED", "KILLED", "KILLED"]
    assert client.get_run(run_id).info.status == "RUNNING"  # its lock is held: a live run is left alone
    assert client.get_run(own).info.status == "RUNNING"
    live.close()
