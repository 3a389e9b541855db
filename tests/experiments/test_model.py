"""A compiled program travels as an MLflow model with no pickle: logged by ``ragscale run`` (and ``ragscale.compile``
under an active run), loaded in a fresh process by ``mlflow.pyfunc.load_model``, it answers as the run did."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragscale.experiments import tracking
from ragscale.experiments.config import RunConfig
from ragscale.experiments.model import questions
from ragscale.experiments.runner import run_experiment

LOAD = """
import json, sys
import mlflow, pandas
model = mlflow.pyfunc.load_model(sys.argv[1])
asked = json.loads(sys.argv[2])
one = model.predict({"question": asked[0]})
many = model.predict([{"question": q} for q in asked])
frame = model.predict(pandas.DataFrame({"question": asked}))
program = type(model.unwrap_python_model().program).__name__
print(json.dumps({"one": one["answer"], "many": [p["answer"] for p in many], "frame": [p["answer"] for p in frame],
                  "passages": one["passages"], "program": program}))
"""

PICKLE_OPENINGS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


@pytest.mark.slow
def test_a_run_logs_its_program_as_a_model_that_a_fresh_process_loads_and_that_answers_as_the_run_did(
    tmp_path, data_dir
):
    config = RunConfig(method="drag", dataset="hotpotqa", optimizer="labeled", lm="smollm2-135m", retriever="bm25",
                       docs=2, shots=1, docs_per_demo=1, data_dir=data_dir, runs_dir=tmp_path / "runs", threads=1,
                       cache=False, limit=2)  # fmt: skip
    summary = run_experiment(config, progress=False)
    work = tmp_path / "runs" / "work" / summary["mlflow_run_id"]
    records = [json.loads(line) for line in (work / "predictions.jsonl").read_text().splitlines()]
    asked = [r["question"] for r in records]

    env = {"MLFLOW_TRACKING_URI": tracking.local_uri(config.runs_dir), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "RAGSCALE_DECODE": "static"}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", LOAD, summary["model_uri"], json.dumps(asked)], env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded["program"] == "DRAG"
    assert loaded["one"] == records[0]["prediction"]
    assert loaded["many"] == loaded["frame"] == [r["prediction"] for r in records]
    assert [p["id"] for p in loaded["passages"]] == records[0]["passage_ids"]

    models = list((tmp_path / "runs" / "artifacts").rglob("MLmodel"))
    assert len(models) == 1
    files = [path for path in models[0].parent.rglob("*") if path.is_file()]
    assert {path.name for path in files} >= {"model_code.py", "program.json", "config.json"}
    assert not [
        path for path in files if path.suffix in (".pkl", ".pickle") or path.read_bytes()[:2] in PICKLE_OPENINGS
    ]


def test_predict_takes_a_question_a_dict_a_list_or_a_dataframe_and_names_what_it_cannot_read():
    import pandas

    assert questions("Who?") == (["Who?"], True)
    assert questions({"question": "Who?"}) == (["Who?"], True)
    assert questions([{"question": "a"}, "b"]) == (["a", "b"], False)
    assert questions(pandas.DataFrame({"question": ["a", "b"]})) == (["a", "b"], False)
    with pytest.raises(ValueError, match="'question' column, got \\['q'\\]"):
        questions(pandas.DataFrame({"q": ["a"]}))
    with pytest.raises(ValueError, match="needs a string 'question'"):
        questions([{"query": "a"}])
    with pytest.raises(TypeError, match="got int"):
        questions(3)


def test_a_program_over_a_function_retriever_cannot_be_logged_and_says_how_to_make_one_that_can():
    from ragscale.experiments.model import log_program
    from ragscale.programs import RAG

    with pytest.raises(ValueError, match=r"cannot travel.*ragscale.retriever\(corpus\)"):
        log_program(RAG(lambda q, k: [], k=2), lm={"lm": "smollm2-135m"}, adapter="field", searched=None)


def test_only_a_registered_method_with_its_default_settings_is_logged_and_what_it_would_lose_is_named():
    from ragscale.experiments.model import model_config
    from ragscale.programs import ClosedBook, IRCoT

    class MyClosedBook(ClosedBook):
        """A user's own method."""

    lm = {"lm": "smollm2-135m"}
    with pytest.raises(ValueError, match="MyClosedBook is not a registered method"):
        model_config(MyClosedBook(), lm=lm, adapter="field", searched=None)
    with pytest.raises(ValueError, match="IRCoT's max_steps=2 is not its default 4"):
        model_config(IRCoT(None, k=2, max_steps=2), lm=lm, adapter="field", searched=None)
    assert model_config(IRCoT(None, k=2), lm=lm, adapter="field", searched=None)["k"] == 2


def test_a_corpus_changed_since_the_program_was_logged_is_refused_naming_both_digests(tmp_path):
    from ragscale.experiments.model import load

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "1", "title": "A", "text": "a text"}) + "\n")
    config = {"method": "rag", "k": 1, "lm": "smollm2-135m", "adapter": "field", "retriever": "bm25",
              "corpus": str(corpus), "corpus_sha256": "0" * 64}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"corpus '{corpus}' has changed.*logged"):
        load(None, {"config": str(tmp_path / "config.json"), "program": str(Path(tmp_path / "p.json"))})


def test_a_model_config_given_at_load_time_is_laid_over_the_logged_one(tmp_path):
    from ragscale.experiments.model import load
    from ragscale.programs import ClosedBook

    ClosedBook().save(str(tmp_path / "program.json"))
    config = {"method": "closed-book", "k": 0, "lm": "openai/qwen", "api_base": "http://logged:8000/v1",
              "adapter": "chat", "retriever": None}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    artifacts = {"config": str(tmp_path / "config.json"), "program": str(tmp_path / "program.json")}
    assert load(None, artifacts).lm.kwargs["api_base"] == "http://logged:8000/v1"
    moved = load({"api_base": "http://replica:8000/v1"}, artifacts)
    assert moved.lm.kwargs["api_base"] == "http://replica:8000/v1" and type(moved.program).__name__ == "ClosedBook"
