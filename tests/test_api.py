"""The calls of ``import ragscale``: configure, retriever from every kind of source, compile with a metric by name or
a callable, evaluate into an ``Evaluation``, and a compiled program logged under an active MLflow run."""

import dspy
import pytest
from doubles import FACTS, SCRIPT, record, scripted_lm

import ragscale
from ragscale.data.datasets import to_example
from ragscale.programs.lm import FieldAdapter

TEXTS = [f"{title}: {text}" for title, text, _, _ in FACTS]


@pytest.fixture
def scripted():
    """The scripted LM (answers dev questions q4-q6 from ``SCRIPT``) configured with DSPy's ChatAdapter."""
    lm = scripted_lm(SCRIPT)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        yield lm


@pytest.fixture
def restored():
    """DSPy's global LM and adapter as they were before the test."""
    before = dspy.settings.lm, dspy.settings.adapter
    yield
    dspy.configure(lm=before[0], adapter=before[1])


def test_configure_sets_the_lm_and_ragscales_adapter_by_default_and_takes_any_dspy_lm(restored):
    lm = scripted_lm(SCRIPT)
    assert ragscale.configure(lm) is lm
    assert dspy.settings.lm is lm and isinstance(dspy.settings.adapter, FieldAdapter)
    ragscale.configure(lm, adapter="json")
    assert isinstance(dspy.settings.adapter, dspy.JSONAdapter)
    with pytest.raises(ValueError, match="unknown adapter 'xml'; valid choices: chat, field"):
        ragscale.configure(lm, adapter="xml")
    with pytest.raises(TypeError, match="options \\['max_tokens'\\] are load_lm's"):
        ragscale.configure(lm, max_tokens=10)


def test_a_retriever_is_built_over_a_list_of_texts_or_dicts_and_finds_the_passage_by_its_rare_words(tmp_path):
    for source in (TEXTS, [{"title": t, "text": x} for t, x, _, _ in FACTS]):
        retriever = ragscale.retriever(source, kind="bm25", index_dir=tmp_path, progress=False)
        assert "Garnock" in retriever("Garnock Treaty year", 1)[0].text
        assert retriever.searched.corpus.passages and retriever.searched.kind == "bm25"


def test_a_retriever_over_a_dataset_name_searches_its_every_paragraph(tmp_path, data_dir):
    retriever = ragscale.retriever("hotpotqa", kind="bm25", index_dir=tmp_path, data_dir=data_dir, progress=False)
    assert len(retriever.searched.corpus) == 14  # 7 questions, a gold paragraph and a distractor each
    assert retriever("Ommeline opera", 1)[0].title == "Ommeline Opera"


def test_a_corpus_retriever_shows_the_parts_of_the_retriever_it_wraps(tmp_path):
    built = ragscale.retriever(TEXTS, kind="bm25", index_dir=tmp_path, progress=False)
    assert built.key == built.inner.key  # as HyDE reaches a hybrid's dense side
    with pytest.raises(AttributeError):
        built.dense  # noqa: B018 -- a BM25 retriever has none


def test_a_search_function_is_its_own_retriever_and_a_bad_source_is_named():
    retriever = ragscale.retriever(lambda query, k: TEXTS[:k])
    assert [p.text for p in retriever("q", 2)] == TEXTS[:2]
    with pytest.raises(TypeError, match="got int"):
        ragscale.retriever(3)
    with pytest.raises(TypeError, match=r"passage 1: .*got float"):
        ragscale.retriever(["a text", 2.5])
    with pytest.raises(ValueError, match="empty"):
        ragscale.retriever([])


def test_evaluate_scores_every_question_and_counts_its_tokens(scripted, tmp_path):
    program = ragscale.RAG(ragscale.retriever(TEXTS, kind="bm25", index_dir=tmp_path, progress=False), k=2)
    result = ragscale.evaluate(program, [to_example(record(i)) for i in (4, 5, 6)], threads=2)
    assert (result.n, result.failed) == (3, 0)
    assert result.em == pytest.approx(200 / 3, abs=0.01)  # q6 is answered wrong by the script
    assert result.lm_calls == 3 and result.input_tokens > 0
    assert result.effective_context == pytest.approx(result.input_tokens / 3, abs=0.1)
    assert [r["id"] for r in result.records] == ["q4", "q5", "q6"]
    assert "EM 66.7" in str(result)


def test_compile_takes_a_metric_by_name_or_a_callable_and_names_the_valid_ones(scripted, tmp_path):
    program = ragscale.DRAG(ragscale.retriever(TEXTS, kind="bm25", index_dir=tmp_path, progress=False), k=2)
    train = [to_example(record(i)) for i in range(4)]
    judged = []

    def anything_goes(example, prediction, trace=None):
        judged.append(example.id)
        return 1.0

    compiled = ragscale.compile(program, train, metric=anything_goes, shots=2, docs_per_demo=1)
    assert judged, "the callable metric was not asked"
    assert len(compiled.answer.demos) == 2 and all(demo.documents for demo in compiled.answer.demos)
    by_name = ragscale.compile(program, train, optimizer="labeled", metric="f1", shots=1)
    assert len(by_name.answer.demos) == 1
    with pytest.raises(ValueError, match="unknown metric 'bleu'; valid choices: em, f1, acc"):
        ragscale.compile(program, train, metric="bleu")
    with pytest.raises(ValueError, match="unknown optimizer 'adam'"):
        ragscale.compile(program, train, optimizer="adam")


def test_compile_under_an_active_mlflow_run_logs_the_program_as_a_model(scripted, tmp_path):
    import mlflow

    program = ragscale.RAG(ragscale.retriever(TEXTS, kind="bm25", index_dir=tmp_path / "idx", progress=False), k=2)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        experiment = mlflow.create_experiment("api", artifact_location=(tmp_path / "artifacts").as_uri())
        with mlflow.start_run(experiment_id=experiment) as run:
            ragscale.compile(program, [to_example(record(i)) for i in range(4)], optimizer="labeled", shots=1)
        model = mlflow.models.get_model_info(f"runs:/{run.info.run_id}/model")
        location = mlflow.get_logged_model(model.model_id).artifact_location
        config = mlflow.artifacts.load_dict(f"{location}/artifacts/config.json")
    finally:
        mlflow.set_tracking_uri(None)
    assert (config["method"], config["k"], config["lm"], config["adapter"]) == ("rag", 2, "scripted", "chat")
    assert (config["retriever"], config["corpus"]) == ("bm25", "corpus.jsonl")  # a list of texts travels whole


def test_run_makes_a_tracked_run_from_keywords(data_dir, tmp_path, monkeypatch):
    from ragscale.experiments import parts

    monkeypatch.setattr(parts, "load_lm_for", lambda config: scripted_lm(SCRIPT))
    summary = ragscale.run(method="rag", dataset="hotpotqa", data_dir=data_dir, runs_dir=tmp_path / "runs",
                           retriever="bm25", adapter="chat", threads=1, progress=False)  # fmt: skip
    assert summary["n"] == 3 and summary["em"] == pytest.approx(66.67, abs=0.01)
    assert summary["model_uri"] == f"runs:/{summary['mlflow_run_id']}/model"


def mlflow_state() -> tuple:
    """What of MLflow's process state a caller sees: the tracking URI, the active experiment, the active run and
    DSPy autolog."""
    import os

    import mlflow
    from mlflow.tracking import fluent
    from mlflow.utils.autologging_utils import autologging_is_disabled

    run = mlflow.active_run()
    with dspy.context():  # the process's settings, not a context's
        track_usage = dspy.settings.track_usage
    experiment = os.environ.get("MLFLOW_EXPERIMENT_ID"), fluent._active_experiment_id
    return (
        os.environ.get("MLFLOW_TRACKING_URI"),
        experiment,
        run and run.info.run_id,
        autologging_is_disabled("dspy"),
        track_usage,
    )


def test_a_run_inside_the_callers_own_mlflow_run_is_its_child_and_leaves_the_callers_state(
    data_dir, tmp_path, monkeypatch
):
    import mlflow

    from ragscale.experiments import parts

    monkeypatch.setattr(parts, "load_lm_for", lambda config: scripted_lm(SCRIPT))
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mine.db'}")  # ragscale tracks where MLflow is told to
    try:
        mine = mlflow.create_experiment("mine", artifact_location=(tmp_path / "mine").as_uri())
        mlflow.set_experiment(experiment_id=mine)
        with mlflow.start_run() as own:
            before = mlflow_state()
            summary = ragscale.run(method="drag", dataset="hotpotqa", optimizer="labeled", shots=1, docs_per_demo=1,
                                   data_dir=data_dir, runs_dir=tmp_path / "runs", retriever="bm25", adapter="chat",
                                   threads=1, progress=False)  # fmt: skip
            assert mlflow_state() == before
            assert mlflow.active_run().info.run_id == own.info.run_id
        run = mlflow.get_run(summary["mlflow_run_id"])
        assert mlflow.get_run(own.info.run_id).info.status == "FINISHED"
    finally:
        mlflow.set_tracking_uri(None)
        monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == own.info.run_id
    assert "lm_params" in run.data.params  # DSPy's compile logging went to ragscale's run, not the caller's
    assert summary["model_uri"] is not None


def test_compile_takes_a_teleprompters_own_options(scripted, tmp_path):
    program = ragscale.DRAG(ragscale.retriever(TEXTS, kind="bm25", index_dir=tmp_path, progress=False), k=2)
    train = [to_example(record(i)) for i in range(4)]
    compiled = ragscale.compile(program, train, optimizer="labeled", shots=1, budget="light", max_attempts=2)
    assert len(compiled.answer.demos) == 1


def test_compile_takes_a_teleprompter_built_by_hand_with_its_own_settings(scripted, tmp_path):
    from ragscale.optimizers.metrics import em_metric
    from ragscale.optimizers.teleprompters import OPTIMIZERS

    program = ragscale.DRAG(ragscale.retriever(TEXTS, kind="bm25", index_dir=tmp_path, progress=False), k=2)
    train = [to_example(record(i)) for i in range(4)]
    built = OPTIMIZERS["labeled"](metric=em_metric, shots=1, docs_per_demo=1)
    compiled = ragscale.compile(program, train, optimizer=built)
    assert len(compiled.answer.demos) == 1 and len(compiled.answer.demos[0].documents) == 1
    with pytest.raises(ValueError, match="carries its own settings; got budget, teacher"):
        ragscale.compile(program, train, optimizer=built, teacher=scripted, budget="light")


def test_run_from_keywords_compiles_iterdrag_with_its_own_settings_and_a_config_as_built(monkeypatch):
    from ragscale.experiments import inputs, runner
    from ragscale.experiments.config import RunConfig

    seen = []
    monkeypatch.setattr(inputs, "check_inputs", lambda config: None)
    monkeypatch.setattr(runner, "run_experiment", lambda config, **_: seen.append(config) or {})
    ragscale.run(method="iterdrag", dataset="hotpotqa", optimizer="bootstrap")
    ragscale.run(RunConfig(method="iterdrag", dataset="hotpotqa", optimizer="bootstrap"))
    assert [(c.teacher, c.shots, c.train_limit) for c in seen] == [("qwen2.5-coder-1.5b", 2, 16), (None, 4, 64)]
