"""A process that succeeded exits 0: the LM engine's worker thread is stopped before the interpreter finalizes.

A daemon thread alive at finalization is ended by ``pthread_exit`` when it takes the GIL back; inside a torch op
that aborts the process ("terminate called without an active exception", exit 134). The first test exits while the
engine is generating, the moment a worker left running aborts; the second reruns a SmolLM2 run into a runs
directory that already holds its indexes, as a user does, and checks every exit.
"""

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragscale.programs.lm import load_lm
from ragscale.programs.lm.engine import EngineStoppedError

pytestmark = pytest.mark.slow

ABORT = "terminate called"

# Two callers ask for long answers in daemon threads; the main thread returns once the engine has decoded a few
# steps, with both requests still generating, and reports how many were unfinished at that moment.
EXIT_WHILE_GENERATING = """
import threading, time
from ragscale.programs.lm import load_lm

lm = load_lm("smollm2-135m", cache=False, max_tokens=400)
unfinished = {0, 1}

def ask(i):
    try:
        lm(f"Count from {i} to 500, one number per line.")
    except Exception:
        pass
    unfinished.discard(i)

for i in (0, 1):
    threading.Thread(target=ask, args=(i,), daemon=True).start()
deadline = time.monotonic() + 240
while lm.engine.work["steps"] < 3 and time.monotonic() < deadline:
    time.sleep(0.01)
print(f"unfinished at exit: {len(unfinished)}", flush=True)
"""

MAIN = "import sys; from ragscale.experiments.cli import main; sys.exit(main())"


def test_a_process_that_exits_while_the_engine_generates_exits_0(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", EXIT_WHILE_GENERATING], capture_output=True, text=True, timeout=400, cwd=tmp_path
    )
    assert ABORT not in done.stderr
    assert done.returncode == 0, done.stderr[-3000:]
    assert "unfinished at exit: 0" not in done.stdout, "the engine had finished: the exit did not race a generation"


def causes(error: BaseException | None) -> list[type]:
    found = []
    while error is not None:
        found.append(type(error))
        error = error.__cause__ or error.__context__
    return found


def test_closing_without_finishing_fails_the_unfinished_request_and_a_later_request_starts_a_new_worker():
    lm = load_lm("smollm2-135m", cache=False, max_tokens=400)
    steps = lm.engine.work["steps"]
    failed: list[BaseException] = []

    def ask() -> None:
        try:
            lm("Count from 1 to 500, one number per line.")
        except Exception as error:
            failed.append(error)

    caller = threading.Thread(target=ask)
    caller.start()
    deadline = time.monotonic() + 120
    while lm.engine.work["steps"] < steps + 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    lm.engine.close(finish_running=False)
    caller.join(timeout=60)
    assert len(failed) == 1
    assert EngineStoppedError in causes(failed[0])
    assert lm("Say yes.", max_tokens=3)


def rag_run(runs: Path) -> list[str]:
    return [
        sys.executable, "-c", MAIN, "run", "--method", "rag", "--dataset", "hotpotqa", "--lm", "smollm2-135m",
        "--limit", "2", "--train-limit", "2", "--threads", "2", "--no-cache", "--no-progress", "--runs-dir", str(runs),
        "--corpus", "questions",
    ]  # fmt: skip


def test_a_run_rerun_into_an_existing_runs_dir_exits_0_every_time(tmp_path):
    runs = tmp_path / "runs"
    first = subprocess.run(rag_run(runs), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (runs / "indexes").is_dir()
    for attempt in range(3):
        rerun = subprocess.run(rag_run(runs), capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert ABORT not in rerun.stderr, f"rerun {attempt + 1}: {rerun.stderr[-2000:]}"
        assert rerun.returncode == 0, f"rerun {attempt + 1}: {rerun.stderr[-3000:]}"
