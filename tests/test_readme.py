"""The README's Python example runs as printed (compile DRAG with bootstrap on the packaged model, answer, meter), and
its demo table is what the demo's committed predictions give."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DEMO_RESULTS = REPO / "benchmarks" / "results" / "demo-qwen2.5-coder-0.5b"


@pytest.mark.slow
def test_the_python_example_in_the_readme_runs(tmp_path, monkeypatch, shared_datasets, capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1, "the README has one Python example; update this test if that changes"
    monkeypatch.chdir(tmp_path)  # its index goes to runs/indexes under the working directory
    namespace = {"__name__": "readme"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    calls, input_tokens = (int(n) for n in capsys.readouterr().out.split()[-2:])
    assert calls == 1 and input_tokens > 0  # DRAG answers in one call
    (predictor,) = namespace["drag"].predictors()
    assert len(predictor.demos) == 2 and all(demo.documents for demo in predictor.demos)  # demos carry documents


def test_the_demo_table_in_the_readme_is_what_the_demos_committed_predictions_give():
    from ragscale.experiments.published import table

    expected = table(DEMO_RESULTS, "closed-book-none")
    shown = [line for line in README.read_text(encoding="utf-8").splitlines() if line.startswith("|")]
    header = expected.splitlines()[0]
    assert header in shown, "the README's demo table lost its header"
    start = shown.index(header)
    assert "\n".join(shown[start : start + len(expected.splitlines())]) == expected
