"""Every how-to of ``docs/guide.md`` runs as printed, one test per section: its Python blocks in a fresh namespace,
its shell blocks with bash, in a scratch folder. Only what a test cannot have is swapped: the OpenAI-compatible
server at localhost:8000 is a small one in a thread (``servers.ChatCompletions``), and port 5000 a free port."""

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dspy
import pytest
from servers import ChatCompletions, free_port, serving_in_thread

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"


def sections() -> dict[str, list[tuple[str, str]]]:
    """Each ``## `` section's fenced blocks in order, as (language, code)."""
    found = {}
    for part in re.split(r"^## ", GUIDE.read_text(encoding="utf-8"), flags=re.M)[1:]:
        title = part.splitlines()[0]
        found[title] = re.findall(r"```(python|bash)\n(.*?)```", part, flags=re.S)
    return found


def test_every_how_to_the_issue_asks_for_is_in_the_guide_with_a_block_to_run():
    titles = " / ".join(sections()).lower()
    for topic in ("own corpus", "compile drag, save it", "dspy.lm", "own method", "paired test", "sweep", "mlflow"):
        assert topic in titles, topic
    assert all(sections().values())


def shell(code: str, cwd: Path, env: dict, background: bool = False):
    command = ["bash", "-ec", code]
    if background:
        return subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT)  # fmt: skip
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{code}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def wait_for(url: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"nothing answered at {url} in {seconds:.0f} s")


@pytest.mark.slow
@pytest.mark.parametrize("title", list(sections()))
def test_a_how_to_runs_as_printed(title, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    port = str(free_port())
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    before = dspy.settings.lm, dspy.settings.adapter
    background = []
    ChatCompletions.received = []
    try:
        with serving_in_thread(ChatCompletions) as fake:
            for language, code in sections()[title]:
                code = code.replace("http://localhost:8000", fake).replace("5000", port)
                if language == "python":
                    exec(compile(code, f"{GUIDE}: {title}", "exec"), {"__name__": "guide"})
                elif "# terminal 1" in code:
                    background.append(shell(code, tmp_path, env, background=True))
                    wait_for(f"http://127.0.0.1:{port}/health")
                else:
                    shell(code, tmp_path, env)
    finally:
        dspy.configure(lm=before[0], adapter=before[1])  # a how-to configures DSPy for the process
        if "mlflow" in sys.modules:  # and one points MLflow at its server: later tests track where they would have
            sys.modules["mlflow"].set_tracking_uri(None)
        for process in background:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
    printed = capsys.readouterr().out
    if "dspy.LM" in title:
        assert printed.split() == ["Paris", "Paris"] and len(ChatCompletions.received) == 2
    elif "sweep" in title:
        assert (tmp_path / "sweep.json").is_file()
    else:
        assert printed.strip(), f"the how-to {title!r} printed nothing"
