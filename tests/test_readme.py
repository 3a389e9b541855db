"""The README's Python blocks run as printed (compile DRAG with bootstrap on the packaged model, evaluate, save) and
use only ``import dspy`` and ``import ragscale``; its demo table is checked with every page's results
(``published/test_pages.py``)."""

import ast
import re
from pathlib import Path

import dspy
import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_the_readmes_python_imports_only_dspy_and_ragscale_in_at_most_twelve_lines():
    blocks = python_blocks()
    assert blocks, "the README has no Python example"
    for block in blocks:
        nodes = [node for node in ast.walk(ast.parse(block)) if isinstance(node, ast.Import | ast.ImportFrom)]
        imported = {alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names}
        assert imported <= {"dspy", "ragscale"} and not any(isinstance(n, ast.ImportFrom) for n in nodes), imported
        assert len(block.strip().splitlines()) <= 12


@pytest.mark.slow
def test_every_python_block_in_the_readme_runs_as_printed(tmp_path, monkeypatch, shared_datasets, capsys):
    monkeypatch.chdir(tmp_path)  # its index goes to runs/indexes under the working directory, drag.json beside it
    before = dspy.settings.lm, dspy.settings.adapter
    namespace = {"__name__": "readme"}
    try:
        for block in python_blocks():
            exec(compile(block, str(README), "exec"), namespace)
    finally:
        dspy.configure(lm=before[0], adapter=before[1])  # the README configures DSPy for the process
    em, f1, context = (float(n) for n in capsys.readouterr().out.split()[-3:])
    assert 0 <= em <= f1 <= 100 and context > 0
    (predictor,) = namespace["drag"].predictors()
    assert len(predictor.demos) == 2 and all(demo.documents for demo in predictor.demos)  # demos carry documents
    assert (tmp_path / "drag.json").is_file()
