"""The experiment runner: tracked runs, per-question records, failures that do not stop a run."""

import json
from pathlib import Path

import dspy
import pytest
from dspy.lm15 import Message, Response, TextPart, Usage

from ragscale.experiments import tracking
from ragscale.experiments.config import RunConfig
from ragscale.experiments.runner import PREDICTIONS, SUMMARY_KEYS, evaluate, run_experiment, summarize
from ragscale.programs import PROGRAMS
from ragscale.programs.lm.meter import MeteredLM

# Made-up facts so that nothing is known to any model and BM25 finds the right paragraph by its rare words.
FACTS = [
    (
        "Zorblat River",
        "The Zorblat River flows from the Kestine hills into the Mirren Sea.",
        "Which sea does the Zorblat River flow into?",
        "Mirren Sea",
    ),
    (
        "Quillon Abbey",
        "Quillon Abbey was founded by the monk Aldric Venn in the year 1132.",
        "Who founded Quillon Abbey?",
        "Aldric Venn",
    ),
    (
        "Brastow Comet",
        "The Brastow Comet was first sighted by the astronomer Ilsa Marrow.",
        "Who first sighted the Brastow Comet?",
        "Ilsa Marrow",
    ),
    (
        "Pellucid Tower",
        "The Pellucid Tower stands 212 metres tall in the city of Ostravel.",
        "In which city is the Pellucid Tower?",
        "Ostravel",
    ),
    (
        "Garnock Treaty",
        "The Garnock Treaty ended the war between Vessia and Drummond in 1788.",
        "In which year was the Garnock Treaty signed?",
        "1788",
    ),
    (
        "Ommeline Opera",
        "Ommeline is an opera composed by Teodor Haskel about a lighthouse keeper.",
        "Who composed the opera Ommeline?",
        "Teodor Haskel",
    ),
    (
        "Fendrick Bridge",
        "The Fendrick Bridge crosses the Lune Gorge and is built of red granite.",
        "Which gorge does the Fendrick Bridge cross?",
        "Lune Gorge",
    ),
]
DISTRACTORS = [
    ("Harrow Marsh", "Harrow Marsh is a wetland known for its herons and reed beds."),
    ("Tindel Market", "Tindel Market sells spices, cloth and copper pots every Sunday."),
    ("Corvane Lighthouse", "Corvane Lighthouse was automated and its keeper retired."),
    ("Wexley Orchard", "Wexley Orchard grows pears and plums on a south-facing slope."),
    ("Saltmere Station", "Saltmere Station is a railway stop on the coastal line."),
    ("Ashby Quarry", "Ashby Quarry produced limestone for the cathedral."),
    ("Mossgrove Library", "Mossgrove Library holds maps of the northern islands."),
]


def record(i: int) -> dict:
    title, text, question, answer = FACTS[i]
    other_title, other_text = DISTRACTORS[i]
    return {
        "id": f"q{i}",
        "question": question,
        "answers": [answer],
        "paragraphs": [
            {"title": other_title, "text": other_text, "is_supporting": False},
            {"title": title, "text": text, "is_supporting": True},
        ],
        "supporting_titles": [title],
        "type": "bridge",
        "decomposition": None,
    }


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """hotpotqa/train.jsonl (q0-q3) and hotpotqa/dev.jsonl (q4-q6) in the shared schema: 14 passages."""
    folder = tmp_path / "data" / "hotpotqa"
    folder.mkdir(parents=True)
    for split, ids in (("train", range(4)), ("dev", range(4, 7))):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(record(i)) + "\n" for i in ids))
    return tmp_path / "data"


class ScriptedEngine:
    """A DSPy engine answering in ChatAdapter format from a {question: answer} script; usage = words in, 2 out."""

    def __init__(self, script: dict[str, str]):
        self.script = script

    def complete(self, request):
        texts = [m.text or "" for m in request.messages]
        last = texts[-1]
        answer = next((a for q, a in self.script.items() if q in last), "no idea")
        output = f"[[ ## answer ## ]]\n{answer}\n\n[[ ## completed ## ]]"
        words = sum(len(t.split()) for t in texts)
        return Response(
            id=None,
            model="scripted",
            message=Message.assistant([TextPart(output)]),
            finish_reason="stop",
            usage=Usage(input_tokens=words, output_tokens=2, total_tokens=words + 2),
        )


def scripted_lm(script: dict[str, str]) -> MeteredLM:
    """A metered dspy.LM (as load_lm returns) whose engine follows a script instead of running weights."""
    return MeteredLM("local/scripted", engine=ScriptedEngine(script), cache=False, num_retries=0, context_window=4096)


# q4, q5 answered right, q6 wrong.
SCRIPT = {FACTS[4][2]: "1788", FACTS[5][2]: "Teodor Haskel", FACTS[6][2]: "the Mirren Sea"}


def config(tmp_path, data_dir, **overrides) -> RunConfig:
    values = {
        "method": "rag",
        "dataset": "hotpotqa",
        "retriever": "bm25",
        "adapter": "chat",
        "k": 2,
        "data_dir": data_dir,
        "runs_dir": tmp_path / "runs",
        "threads": 2,
        **overrides,
    }
    return RunConfig(**values)


def test_a_run_logs_the_whole_config_its_metrics_and_its_artifacts_to_mlflow(tmp_path, data_dir):
    cfg = config(tmp_path, data_dir, method="drag", optimizer="labeled", max_demos=2, max_docs_per_demo=1)
    summary = run_experiment(cfg, lm=scripted_lm(SCRIPT), progress=False)

    assert tuple(summary) == SUMMARY_KEYS
    assert (summary["n"], summary["failed"]) == (3, 0)
    assert summary["em"] == pytest.approx(66.67)
    assert summary["retrieval_recall"] == pytest.approx(100.0)  # k=2 over 14 passages finds each gold paragraph
    assert summary["lm_calls_per_question"] == 1

    client = tracking.client(cfg.runs_dir)
    run = client.get_run(summary["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params == cfg.to_params()
    assert run.data.params["method"] == "drag" and run.data.params["max_demos"] == "2"
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
    assert run.data.metrics["effective_context_tokens_per_question"] == summary["input_tokens_per_question"] > 0
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {PREDICTIONS, "predictions.csv", "predictions.md", "program.json", "config.toml"} <= artifacts
    assert str(Path(run.info.artifact_uri.removeprefix("file://")).resolve()).startswith(str(cfg.runs_dir))


def test_the_logged_config_and_program_rerun_and_reload(tmp_path, data_dir):
    cfg = config(tmp_path, data_dir, method="drag", optimizer="labeled", max_demos=2, max_docs_per_demo=1)
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
        max_demos=3,
        max_docs_per_demo=1,
        lm=lm,
        adapter=dspy.ChatAdapter(),
    )
    cfg = config(tmp_path, data_dir, method="drag", optimizer="labeled", k=4, max_demos=3)
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


def test_worker_threads_see_the_lm_set_with_dspy_context_and_meter_their_own_calls(tmp_path, data_dir):
    from ragscale.data import load_split

    dev = load_split("hotpotqa", "dev", data_dir)
    program = PROGRAMS["closed-book"]()
    with dspy.context(lm=scripted_lm(SCRIPT), adapter=dspy.ChatAdapter()):
        records = evaluate(program, dev, threads=3, records_path=tmp_path / "p.jsonl", progress=False)
    assert [r["id"] for r in records] == ["q4", "q5", "q6"]
    assert [r["prediction"] for r in records] == ["1788", "Teodor Haskel", "the Mirren Sea"]
    assert [r["lm_calls"] for r in records] == [1, 1, 1]
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 3


def test_failed_questions_count_as_zero_in_the_means(tmp_path, data_dir):
    base = {"acc": 1.0, "retrieval_recall": None, "lm_calls": 2, "input_tokens": 100, "output_tokens": 10}
    records = [
        {**base, "em": 1.0, "f1": 1.0, "error": None},
        {**base, "em": 0.0, "f1": 0.0, "acc": 0.0, "error": "FieldParseError: no answer"},
    ]
    summary = summarize(records, config(tmp_path, data_dir), eval_s=30.0, wall_s=40.0, run_id="x")
    assert (summary["em"], summary["f1"], summary["acc"], summary["failed"]) == (50.0, 50.0, 50.0, 1)
    assert summary["retrieval_recall"] is None
    assert summary["questions_per_minute"] == 4.0
    assert summary["input_tokens_per_question"] == 100.0


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
