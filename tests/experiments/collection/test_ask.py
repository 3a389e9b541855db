"""Asking a collection: the answer with the sources of the passages the method used."""

import json

import dspy
from dspy.utils import DummyLM

from ragscale.experiments.collection import ask, ingest


def test_ask_answers_with_the_sources_it_used(documents, tmp_path):
    runs = tmp_path / "runs"
    ingest(
        [documents / "simple_table.pdf", documents / "report.md", documents / "page.html", documents / "notes.txt"],
        collection="c",
        runs_dir=runs,
        ocr=False,
    )
    lm = DummyLM([{"answer": "Cell 2"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        result = ask("Which cell is under Header 2?", collection="c", runs_dir=runs, method="rag", k=3)
    assert result["answer"] == "Cell 2"
    assert len(result["sources"]) == 3
    assert {"document", "page", "kind", "id"} <= set(result["sources"][0])
    assert any(s["document"] == "simple_table.pdf" and s["kind"] == "table" for s in result["sources"])
    prompt = json.dumps(lm.history[-1]["messages"])
    assert "| Header 1 | Header 2 |" in prompt  # the table reached the answering prompt as markdown
