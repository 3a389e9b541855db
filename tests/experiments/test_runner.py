"""The experiment runner: tracked runs, per-question records, failures that do not stop a run."""

import json
import os
from pathlib import Path

import dspy
import pytest
from doubles import SCRIPT, scripted_lm

from ragscale.data.corpora import CorpusIdentity
from ragscale.experiments import tracking
from ragscale.experiments.config import RunConfig
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT, PREDICTIONS, SUMMARY_KEYS
from ragscale.experiments.provenance import PREFIX
from ragscale.experiments.record import corpus_params
from ragscale.experiments.runner import run_experiment
from ragscale.programs import PROGRAMS


def config(tmp_path, data_dir, **overrides) -> RunConfig:
    values = {
        "method": "rag",
        "dataset": "hotpotqa",
        "retriever": "bm25",
        "adapter": "chat",
        "docs": 2,
        "data_dir": data_dir,
        "runs_dir": tmp_path / "runs",
        "threads": 2,
        **overrides,
    }
    return RunConfig(**values)


def test_a_run_logs_the_whole_config_its_metrics_and_its_artifacts_to_mlflow(tmp_path, data_dir):
    cfg = config(tmp_path, data_dir, method="drag", optimizer="labeled", shots=2, docs_per_demo=1)
    summary = run_experiment(cfg, lm=scripted_lm(SCRIPT), progress=False)

    assert tuple(summary) == SUMMARY_KEYS
    assert summary["weights_gb"] is None and summary["peak_rss_gb"] > 0.1  # a scripted LM has no weights
    assert (summary["n"], summary["failed"]) == (3, 0)
    assert summary["em"] == pytest.approx(200 / 3)
    assert summary["retrieval_recall"] == pytest.approx(100.0)  # k=2 over 14 passages finds each gold paragraph
    assert summary["lm_calls_per_question"] == 1

    client = tracking.client(cfg.runs_dir)
    run = client.get_run(summary["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    params = dict(run.data.params)
    assert "local/scripted" in params.pop("lm_params")  # DSPy's compile logging (autolog) says the LM compiled with
    assert params == {**cfg.to_params(), **corpus_params(CorpusIdentity(**summary["corpus"]))}
    assert run.data.params["corpus_sha256"] == summary["corpus"]["sha256"] == run.data.tags[PREFIX + "corpus_sha256"]
    assert run.data.params["method"] == "drag" and run.data.params["shots"] == "2"
    for metric in (
        "em",
        "f1",
        "acc",
        "retrieval_recall",
        "effective_context_tokens_per_question",
        "lm_calls_per_question",
        "wall_s",
        "questions_per_minute",
        "failed",
    ):
        assert metric in run.data.metrics, metric
    assert run.data.metrics[EFFECTIVE_CONTEXT] == summary[EFFECTIVE_CONTEXT] > 0
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {PREDICTIONS, "predictions.csv", "predictions.md", "program.json", "config.toml"} <= artifacts
    assert {"eval_results_table.json", "best_model.json"} <= artifacts  # the evaluation table, DSPy's compile log
    assert summary["model_uri"] == f"runs:/{run.info.run_id}/model"
    assert model_config(cfg.runs_dir, summary["model_uri"])["method"] == "drag"
    assert str(Path(run.info.artifact_uri.removeprefix("file://")).resolve()).startswith(str(cfg.runs_dir))


def model_config(runs_dir, uri: str) -> dict:
    """The config.json of the model at ``uri`` in the store under ``runs_dir``."""
    import mlflow

    mlflow.set_tracking_uri(tracking.local_uri(runs_dir))
    try:
        location = mlflow.get_logged_model(mlflow.models.get_model_info(uri).model_id).artifact_location
        return mlflow.artifacts.load_dict(f"{location}/artifacts/config.json")
    finally:
        mlflow.set_tracking_uri(None)


def test_without_autolog_a_run_logs_no_dspy_compile_record_and_still_its_model(tmp_path, data_dir):
    cfg = config(tmp_path, data_dir, method="drag", optimizer="labeled", shots=1, docs_per_demo=1, autolog=False)
    summary = run_experiment(cfg, lm=scripted_lm(SCRIPT), progress=False)
    client = tracking.client(cfg.runs_dir)
    artifacts = {a.path for a in client.list_artifacts(summary["mlflow_run_id"])}
    assert "best_model.json" not in artifacts and "eval_results_table.json" in artifacts
    assert "lm_params" not in client.get_run(summary["mlflow_run_id"]).data.params
    assert model_config(cfg.runs_dir, summary["model_uri"])["max_tokens"] == cfg.max_tokens


def test_runs_of_a_dataset_with_different_limits_search_one_corpus_and_share_its_index(tmp_path, data_dir):
    few = run_experiment(config(tmp_path, data_dir, limit=1, train_limit=1), lm=scripted_lm(SCRIPT), progress=False)
    indexes = {path.name for path in (tmp_path / "runs" / "indexes" / "bm25").iterdir()}
    many = run_experiment(config(tmp_path, data_dir, limit=3), lm=scripted_lm(SCRIPT), progress=False)
    assert few["corpus"] == many["corpus"] and few["corpus"]["name"] == "hotpotqa"
    assert {path.name for path in (tmp_path / "runs" / "indexes" / "bm25").iterdir()} == indexes
    assert [name.split("-")[0] for name in indexes] == [few["corpus"]["sha256"][:16]]


def test_a_run_on_another_corpus_is_a_new_run_not_a_resumed_one(tmp_path, data_dir):
    own = run_experiment(config(tmp_path, data_dir, limit=1, train_limit=1), lm=scripted_lm(SCRIPT), progress=False)
    cfg = config(tmp_path, data_dir, limit=1, train_limit=1, corpus="questions")
    pool = run_experiment(cfg, lm=scripted_lm(SCRIPT), progress=False)
    assert pool["corpus"]["name"] == "questions" and pool["corpus"]["sha256"] != own["corpus"]["sha256"]
    assert pool["mlflow_run_id"] != own["mlflow_run_id"] and pool["resumed"] == 0


def test_a_closed_book_run_searches_no_corpus(tmp_path, data_dir):
    summary = run_experiment(config(tmp_path, data_dir, method="closed-book"), lm=scripted_lm(SCRIPT), progress=False)
    assert summary["corpus"] is None
    assert not (tmp_path / "runs" / "indexes").exists()


def test_the_logged_config_and_program_rerun_and_reload(tmp_path, data_dir):
    cfg = config(tmp_path, data_dir, method="drag", optimizer="labeled", shots=2, docs_per_demo=1)
    summary = run_experiment(cfg, lm=scripted_lm(SCRIPT), progress=False)
    run_id = summary["mlflow_run_id"]

    assert RunConfig.from_toml(tracking.artifact_path(cfg.runs_dir, run_id, "config.toml")) == cfg
    program = PROGRAMS["drag"](retriever=None, k=2)
    program.load(str(tracking.artifact_path(cfg.runs_dir, run_id, "program.json")))
    demos = program.answer.demos
    assert len(demos) == 2
    assert all(len(demo["documents"]) == 1 for demo in demos)


def test_a_program_compiled_earlier_is_reused_with_the_configs_k_instead_of_compiling_again(tmp_path, data_dir):
    from ragscale.data import build_corpus, load_split
    from ragscale.optimizers.metrics import em_metric
    from ragscale.optimizers.teleprompters import compile_program
    from ragscale.programs.retrieval import build_retriever

    train, dev = load_split("hotpotqa", "train", data_dir), load_split("hotpotqa", "dev", data_dir)
    retriever = build_retriever(build_corpus(train + dev), kind="bm25", index_dir=tmp_path / "idx")
    lm = scripted_lm(SCRIPT)
    compiled = compile_program(
        PROGRAMS["drag"](retriever, k=1),
        train,
        optimizer="labeled",
        metric=em_metric,
        shots=3,
        docs_per_demo=1,
        lm=lm,
        adapter=dspy.ChatAdapter(),
    )
    cfg = config(tmp_path, data_dir, method="drag", optimizer="labeled", docs=4, shots=3)
    summary = run_experiment(cfg, lm=lm, retriever=retriever, compiled=compiled, progress=False)

    saved = json.loads((tmp_path / "runs" / "work" / summary["mlflow_run_id"] / "program.json").read_text())
    assert len(saved["answer"]["demos"]) == 3
    assert saved["answer"]["demos"] == compiled.dump_state()["answer"]["demos"]
    lines = (tmp_path / "runs" / "work" / summary["mlflow_run_id"] / PREDICTIONS).read_text().splitlines()
    # The config's k=4, not the compiled program's k=1 (BM25 returns only passages sharing a word with the query).
    assert max(len(json.loads(line)["passage_ids"]) for line in lines) > 1


def test_each_question_record_holds_prediction_gold_scores_usage_and_passages(tmp_path, data_dir):
    summary = run_experiment(config(tmp_path, data_dir), lm=scripted_lm(SCRIPT), progress=False)
    lines = (tmp_path / "runs" / "work" / summary["mlflow_run_id"] / PREDICTIONS).read_text().splitlines()
    records = {r["id"]: r for r in map(json.loads, lines)}
    assert set(records) == {"q4", "q5", "q6"}
    r = records["q4"]
    assert (r["prediction"], r["answers"], r["em"], r["f1"], r["acc"]) == ("1788", ["1788"], 1.0, 1.0, 1.0)
    assert r["lm_calls"] == 1 and r["input_tokens"] > 0 and r["output_tokens"] == 2 and r["latency_s"] >= 0
    assert "Garnock Treaty" in r["passage_titles"] and len(r["passage_ids"]) == 2
    assert r["retrieval_recall"] == 1.0 and r["error"] is None
    assert (records["q6"]["prediction"], records["q6"]["em"], records["q6"]["acc"]) == ("the Mirren Sea", 0.0, 0.0)


class FailingOn:
    """A retriever that raises for one question and delegates the others to a real one."""

    def __init__(self, retriever, poison: str):
        self.retriever, self.poison = retriever, poison

    def __call__(self, query: str, k: int):
        if self.poison in query:
            raise RuntimeError(f"index unavailable for {query!r}")
        return self.retriever(query, k)

    def __deepcopy__(self, memo):
        return self


def test_one_raising_question_is_recorded_as_failed_and_the_others_are_kept(tmp_path, data_dir):
    from ragscale.data import build_corpus, load_split
    from ragscale.programs.retrieval import build_retriever

    examples = load_split("hotpotqa", "train", data_dir) + load_split("hotpotqa", "dev", data_dir)
    real = build_retriever(build_corpus(examples), kind="bm25", index_dir=tmp_path / "idx")
    retriever = FailingOn(real, poison="Pellucid")
    cfg = config(tmp_path, data_dir, limit=None)
    dev = load_split("hotpotqa", "dev", data_dir)
    poisoned = load_split("hotpotqa", "train", data_dir)[3]  # "In which city is the Pellucid Tower?"
    summary = run_experiment(
        cfg, lm=scripted_lm(SCRIPT), retriever=retriever, examples=([], [*dev, poisoned]), progress=False
    )

    assert (summary["n"], summary["failed"]) == (4, 1)
    assert summary["em"] == pytest.approx(50.0)  # 2 right of 4: the failed question counts as 0
    lines = (tmp_path / "runs" / "work" / summary["mlflow_run_id"] / PREDICTIONS).read_text().splitlines()
    records = {r["id"]: r for r in map(json.loads, lines)}
    assert set(records) == {"q3", "q4", "q5", "q6"}
    assert records["q3"]["error"].startswith("RuntimeError: index unavailable")
    assert records["q3"]["em"] == 0.0 and records["q3"]["retrieval_recall"] == 0.0
    assert records["q4"]["prediction"] == "1788" and records["q5"]["prediction"] == "Teodor Haskel"
    assert tracking.client(cfg.runs_dir).get_run(summary["mlflow_run_id"]).data.metrics["failed"] == 1


class Broken:
    def __call__(self, query: str, k: int):
        raise RuntimeError("the index is gone")

    def __deepcopy__(self, memo):
        return self


def test_a_run_that_cannot_compile_is_marked_failed_in_mlflow_and_raises(tmp_path, data_dir):
    cfg = config(tmp_path, data_dir, method="drag", optimizer="labeled")  # labeled retrieves each demo's documents
    with pytest.raises(RuntimeError, match="the index is gone"):
        run_experiment(cfg, lm=scripted_lm(SCRIPT), retriever=Broken(), progress=False)
    client = tracking.client(cfg.runs_dir)
    runs = client.search_runs([client.get_experiment_by_name(tracking.EXPERIMENT).experiment_id])
    assert [run.info.status for run in runs] == ["FAILED"]
    assert runs[0].data.params == cfg.to_params()


def test_the_runner_compiles_crag_with_label_trained_graders(data_dir):
    from dspy.utils import DummyLM

    from ragscale.data import load_split
    from ragscale.experiments.parts import compile_for
    from ragscale.programs import CRAG

    config = RunConfig(method="crag", dataset="hotpotqa", optimizer="labeled", shots=2)
    train = load_split("hotpotqa", "train", data_dir)[:3]  # too few to hold any back: no LM call is made
    program = compile_for(config, CRAG(lambda query, k: [], k=2), train, lm=DummyLM([]))
    assert len(program.grade.demos) == 2
    assert all(set(d.keys()) == {"question", "document", "grade"} for d in program.grade.demos)


def test_the_teacher_is_loaded_from_its_own_server_not_the_students(tmp_path, data_dir, monkeypatch):
    from ragscale.experiments import parts

    loaded = []

    def load(name, **settings):
        loaded.append((name, settings["api_base"], settings["decode"]))
        raise RuntimeError("stop after loading")

    monkeypatch.setattr(parts, "load_named_lm", load)
    cfg = config(
        tmp_path, data_dir, optimizer="bootstrap", teacher="openai/teacher", teacher_api_base="http://teacher:8000/v1"
    )
    with pytest.raises(RuntimeError, match="stop after loading"):
        run_experiment(cfg, lm=scripted_lm(SCRIPT), progress=False)
    assert loaded == [("openai/teacher", "http://teacher:8000/v1", parts.TEACHER_DECODE)]


def test_a_teacher_loaded_for_compiling_is_released_before_the_evaluation_and_a_given_one_is_not(
    tmp_path, data_dir, monkeypatch
):
    from ragscale.experiments import parts, runner

    teacher, student, released = scripted_lm(SCRIPT), scripted_lm(SCRIPT), []
    monkeypatch.setattr(parts, "load_named_lm", lambda name, **settings: teacher)
    monkeypatch.setattr(runner, "release_lm", lambda lm: released.append((lm, len(lm.history), len(student.history))))
    cfg = config(tmp_path, data_dir, optimizer="bootstrap", teacher="smollm2-135m", shots=1)
    run_experiment(cfg, lm=student, progress=False)
    ((lm, taught, answered),) = released
    assert lm is teacher and taught == len(teacher.history) > 0  # it taught, then was let go
    assert len(student.history) - answered == 3  # before the student answered the three evaluation questions
    released.clear()
    run_experiment(config(tmp_path, data_dir, optimizer="bootstrap", teacher="smollm2-135m", shots=1, seed=1),
                   lm=student, teacher_lm=scripted_lm(SCRIPT), progress=False)  # fmt: skip
    assert released == []  # the caller's teacher is the caller's


def test_a_reader_that_teaches_itself_writes_the_traces_on_its_own_lm_not_a_second_copy(
    tmp_path, data_dir, monkeypatch
):
    from ragscale.experiments import parts, runner

    loaded, released, reader = [], [], scripted_lm(SCRIPT)
    monkeypatch.setattr(parts, "load_named_lm", lambda name, **settings: loaded.append(name) or scripted_lm(SCRIPT))
    monkeypatch.setattr(runner, "release_lm", released.append)
    cfg = config(tmp_path, data_dir, optimizer="bootstrap", lm="smollm2-135m", teacher="smollm2-135m", shots=1)
    run_experiment(cfg, lm=reader, progress=False)
    assert loaded == [] and released == [] and len(reader.history) > 3  # it taught, then answered the three
    run_experiment(config(tmp_path, data_dir, optimizer="bootstrap", teacher="qwen2.5-coder-1.5b", shots=1),
                   lm=scripted_lm(SCRIPT), progress=False)  # fmt: skip
    assert loaded == ["qwen2.5-coder-1.5b"] and len(released) == 1  # another model is loaded, then let go


def test_a_local_teacher_decodes_without_compiled_graphs_and_a_server_takes_no_decode_way():
    from ragscale.experiments.parts import TEACHER_DECODE, load_named_lm

    teacher = load_named_lm("smollm2-135m", cache=False, decode=TEACHER_DECODE)
    assert teacher.engine.batcher.decoder.way == "hf" and teacher.engine is not load_named_lm("smollm2-135m").engine
    server = load_named_lm("openai/teacher", api_base="http://teacher:8000/v1", decode=TEACHER_DECODE)
    assert server.model == "openai/teacher"  # a server decodes as it was started; the way is not passed on


def test_a_traced_run_links_one_trace_per_question_with_its_lm_calls_as_spans(tmp_path, data_dir):
    from ragscale.experiments.traces import RUN_TAG

    cfg = config(tmp_path, data_dir, trace=True)
    summary = run_experiment(cfg, lm=scripted_lm(SCRIPT), progress=False)
    assert "MLFLOW_TRACKING_URI" not in os.environ  # tracing leaves where later runs track as it was
    client = tracking.client(cfg.runs_dir)
    where = [tracking.experiment_id(client, cfg.runs_dir)]
    traces = client.search_traces(locations=where, run_id=summary["mlflow_run_id"], include_spans=True)
    assert sorted(t.info.tags["ragscale.question_id"] for t in traces) == ["q4", "q5", "q6"]
    assert all(t.info.tags[RUN_TAG] == summary["mlflow_run_id"] for t in traces)
    for trace in traces:  # the question, the program, its predictor and the LM call with its prompt
        spans = {span.span_type: span for span in trace.data.spans}
        assert {"CHAIN", "LLM", "CHAT_MODEL"} <= spans.keys(), spans.keys()
        assert trace.info.tags["ragscale.question_id"] in str(spans["UNKNOWN"].name)
    untraced = run_experiment(config(tmp_path, data_dir, run_name="untraced"), lm=scripted_lm(SCRIPT), progress=False)
    assert client.search_traces(locations=where, run_id=untraced["mlflow_run_id"]) == []
