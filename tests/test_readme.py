"""The README's Python example runs as printed (compile DRAG with bootstrap on the packaged model, answer, meter); its
demo table is checked with every page's results (``test_pages.py``)."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


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
