"""Contextual chunks: contexts cached by model, document and chunk, so re-ingesting costs no LM call."""

import dspy
from dspy.utils import DummyLM

from ragscale.experiments.collection import Collection, contextualize_chunks, ingest


def test_cached_contexts_cost_no_lm_call_on_reingestion(documents, tmp_path):
    runs = tmp_path / "runs"
    lm = DummyLM([{"context": f"From the harbour survey, part {i}."} for i in range(20)])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        first = ingest(
            [documents / "report.md"], collection="c", runs_dir=runs, contextual=True, model="dummy", threads=1
        )
        calls_first = len(lm.history)
        (runs / "collections" / "c" / "manifest.json").unlink()  # forget the file: it is ingested again
        second = ingest(
            [documents / "report.md"], collection="c", runs_dir=runs, contextual=True, model="dummy", threads=1
        )
    chunks = Collection("c", runs).chunks
    assert calls_first == first.contexts_written == len(chunks) > 0
    assert len(lm.history) == calls_first  # no new call
    assert second.contexts_cached == len(chunks) and second.contexts_written == 0
    assert all(c["context"].startswith("From the harbour survey") for c in chunks)
    corpus = Collection("c", runs).corpus()
    assert all(entry["text"].startswith("From the harbour survey") for entry in corpus)


def test_the_contexts_cache_key_covers_the_model(documents):
    chunks = [{"text": "The fleet shrank to 37 boats."}]
    cache: dict[str, str] = {}
    lm = DummyLM([{"context": "one"}, {"context": "two"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        assert contextualize_chunks(chunks, model="a", cache=cache, threads=1) == ["one"]
        assert contextualize_chunks(chunks, model="a", cache=cache, threads=1) == ["one"]
        assert contextualize_chunks(chunks, model="b", cache=cache, threads=1) == ["two"]
    assert len(lm.history) == 2
