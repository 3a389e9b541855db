"""MLflow traces of a run's questions: one trace per question answered inside ``tracing``, linked to the run."""

import os

import dspy
from doubles import FixedRetriever, examples
from dspy.utils import DummyLM

from ragscale.experiments import tracking
from ragscale.experiments.traces import RUN_TAG, link, question, tracing
from ragscale.programs import RAG


def test_questions_answered_while_tracing_are_traces_linked_to_the_run_and_none_after(tmp_path):
    runs_dir = tmp_path / "runs"
    run_id = tracking.start_run(runs_dir, run_name="traced", params={})
    asked = examples(3)
    lm = DummyLM([{"answer": f"City {i}"} for i in range(3)])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        with tracing(runs_dir, run_id):
            for example in asked[:2]:
                with question(example):
                    RAG(FixedRetriever(), k=1)(question=example.question)
        assert "MLFLOW_TRACKING_URI" not in os.environ  # where later runs track is left as it was
        with question(asked[2]):  # outside tracing: no trace
            RAG(FixedRetriever(), k=1)(question=asked[2].question)
    tracking.end_run(runs_dir, run_id)
    client = tracking.client(runs_dir)
    where = [tracking.experiment_id(client, runs_dir)]
    traces = client.search_traces(locations=where, run_id=run_id, include_spans=True)
    assert sorted(t.info.tags["ragscale.question_id"] for t in traces) == ["0", "1"]
    assert all(t.info.tags[RUN_TAG] == run_id for t in traces)
    assert all("LLM" in {span.span_type for span in t.data.spans} for t in traces)  # the predictor's LM call
    assert len(client.search_traces(locations=where)) == 2
    assert link(runs_dir, run_id) == 2  # linking again finds the same two
