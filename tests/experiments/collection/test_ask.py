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
        result = ask("Which cell is under Header 2?", collection="c", runs_dir=runs, method="rag", docs=3)
    assert result["answer"] == "Cell 2"
    assert len(result["sources"]) == 3
    assert {"document", "page", "kind", "id"} <= set(result["sources"][0])
    assert any(s["document"] == "simple_table.pdf" and s["kind"] == "table" for s in result["sources"])
    prompt = json.dumps(lm.history[-1]["messages"])
    assert "| Header 1 | Header 2 |" in prompt  # the table reached the answering prompt as markdown


def test_ask_reranks_with_the_grader_in_fused_order_by_default(documents, tmp_path):
    import pytest

    runs = tmp_path / "runs"
    ingest([documents / "report.md", documents / "notes.txt"], collection="c", runs_dir=runs, ocr=False)
    with dspy.context(lm=DummyLM([{"answer": "it grows"}]), adapter=dspy.ChatAdapter()):
        plain = ask("What does the report say?", collection="c", runs_dir=runs, docs=3, retriever_kind="bm25")
    lm = DummyLM([{"grade": "relevant"}] * 3 + [{"answer": "it grows"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        fused = ask("What does the report say?", collection="c", runs_dir=runs, docs=3, retriever_kind="bm25",
                    rerank_depth=3)  # fmt: skip
    assert fused["answer"] == "it grows"
    assert len(lm.history) == 4  # three grades, then the answer
    assert [s["id"] for s in fused["sources"]] == [s["id"] for s in plain["sources"]]  # equal grades: hybrid order
    with pytest.raises(ValueError, match="unknown reranker order 'best'; valid: grade, fused"):
        ask("What?", collection="c", runs_dir=runs, rerank_depth=3, rerank_order="best")
