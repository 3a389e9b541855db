"""A method registered by a test alone runs through ``run``, the sweep's estimate and ``compare``: the rest of
ragscale reads only what a method declares (``programs/base.py``), never its name."""

import json

import dspy
import pytest
from doubles import SCRIPT, scripted_lm, tokenizer_lm

from ragscale.experiments.compare import compare_runs, load_runs
from ragscale.experiments.config import RunConfig
from ragscale.experiments.runner import PROGRAM, run_experiment
from ragscale.experiments.sweep.grid import Grid, Point, grid_points
from ragscale.experiments.sweep.run import run_sweep
from ragscale.experiments.sweep.setup import Loaded
from ragscale.experiments.sweep.sitting import SweepOptions
from ragscale.experiments.sweep.speed import Speed
from ragscale.optimizers.metrics import em_metric
from ragscale.optimizers.teleprompters import keeping_behaviour
from ragscale.programs import PROGRAMS
from ragscale.programs.base import Method
from ragscale.programs.retrieval import format_passage, most_relevant_last, references
from ragscale.signatures import Answer


class TwoReads(Method):
    """Reads the question's documents twice: answers over them, then over them again with that answer appended as
    a question of its own; its defining step is the second reading."""

    name = "two-reads"
    iterates = True

    def __init__(self, retriever, k: int, max_iterations: int):
        super().__init__()
        self.retriever, self.k, self.max_iterations = retriever, k, max_iterations
        self.answer = dspy.Predict(Answer)

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        return {"readings": prediction.readings}

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        return prediction.readings == 2

    def forward(self, question: str) -> dspy.Prediction:
        passages = most_relevant_last(self.retriever(question, self.k))
        documents = [format_passage(p) for p in passages]
        answer = self.answer(documents=documents, question=question).answer
        readings = 1
        for _ in range(min(self.max_iterations, 1)):
            answer = self.answer(documents=documents, question=f"{question} ({answer}?)").answer
            readings += 1
        return dspy.Prediction(answer=answer, passages=references(passages), readings=readings)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(PROGRAMS, TwoReads.name, TwoReads)


def config(tmp_path, data_dir, **overrides) -> RunConfig:
    values = dict(dataset="hotpotqa", retriever="bm25", adapter="chat", docs=2, data_dir=data_dir,
                  runs_dir=tmp_path / "runs", threads=2)  # fmt: skip
    return RunConfig(**{**values, **overrides})


def test_a_registered_method_runs_with_demonstrations_that_carry_documents_and_is_compared_to_closed_book(
    registered, tmp_path, data_dir
):
    closed = run_experiment(config(tmp_path, data_dir, method="closed-book"), lm=scripted_lm(SCRIPT), progress=False)
    summary = run_experiment(
        config(tmp_path, data_dir, method="two-reads", optimizer="labeled", shots=1, docs_per_demo=1, iterations=1),
        lm=scripted_lm(SCRIPT),
        progress=False,
    )
    assert summary["behaviour"] == {"readings": 2.0}
    assert summary["lm_calls_per_question"] == 2
    assert summary["retrieval_recall"] == pytest.approx(100.0)  # it retrieves: recall is reported
    assert closed["retrieval_recall"] is None  # closed-book declares it retrieves nothing
    state = json.loads((tmp_path / "runs" / "work" / summary["mlflow_run_id"] / PROGRAM).read_text())
    (demo,) = state["answer"]["demos"]  # demo_documents: the labeled demonstration keeps docs_per_demo documents
    assert len(demo["documents"]) == 1

    rows = compare_runs(load_runs(tmp_path / "runs"))
    mine = next(r for r in rows if r["method"] == "two-reads")
    assert mine["baseline_run_id"] == closed["mlflow_run_id"]  # paired by default against what retrieves nothing
    assert mine["behaviour"] == {"readings": 2.0}


def test_a_bootstrapped_trace_becomes_a_demonstration_only_when_the_registered_method_says_it_shows_its_step():
    kept = keeping_behaviour(em_metric, TwoReads(retriever=None, k=1, max_iterations=1))
    example = dspy.Example(question="q", answers=["a"]).with_inputs("question")
    assert kept(example, dspy.Prediction(answer="a", readings=2), trace=[]) == 1.0
    assert kept(example, dspy.Prediction(answer="a", readings=1), trace=[]) == 0.0
    assert kept(example, dspy.Prediction(answer="a", readings=1)) == 1.0  # scoring without a trace is unchanged


def test_the_sweep_varies_documents_and_iterations_for_a_registered_method_that_retrieves_and_iterates(registered):
    points = grid_points(Grid(methods=("two-reads",), docs=(1, 3), shots=(0,), iterations=(1, 2), baselines=False))
    assert points == [Point("two-reads", k, 0, n) for k in (1, 3) for n in (1, 2)]
    assert Point("two-reads", 3, 0, 2).label == "two-reads k=3 m=0 n=2"


def test_the_sweep_estimates_a_registered_methods_effective_context_before_running_it(
    registered, tmp_path, shared_datasets
):
    from transformers import AutoTokenizer

    from ragscale.data import load_split
    from ragscale.programs.lm.models import resolve

    path = resolve("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    examples = load_split("hotpotqa", "train", shared_datasets)[:4], load_split("hotpotqa", "dev", shared_datasets)[:3]
    base = RunConfig(method="rag", dataset="hotpotqa", retriever="bm25", runs_dir=tmp_path / "runs", limit=3,
                     train_limit=4, threads=2)  # fmt: skip
    grid = Grid(methods=("two-reads",), docs=(1, 3), shots=(0,), iterations=(1,), budgets=(8000,), baselines=False)
    result = run_sweep(
        grid,
        base,
        SweepOptions(progress=False),
        Loaded(lm=tokenizer_lm(tokenizer, examples), examples=examples, speed=Speed(1000.0, 100.0, "stated")),
        report=lambda _: None,
    )
    assert [(r.method, r.docs) for r in result.rows] == [("two-reads", 1), ("two-reads", 3)]
    for row in result.rows:  # two calls a question, both counted before the run and again while it ran
        assert abs(row.estimated_effective_context - row.effective_context()) <= 0.10 * row.effective_context(), row
    assert result.rows[1].effective_context() > result.rows[0].effective_context()
