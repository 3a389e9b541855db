"""Published runs: the committed records give back every score the run's summary had, and the table from them."""

import gzip
import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest
from doubles import SCRIPT, clean_checkout, scripted_lm

from ragscale.experiments.config import RunConfig
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT, record_scores
from ragscale.experiments.oracle import OracleRetriever
from ragscale.experiments.parts import load_examples
from ragscale.experiments.runner import run_experiment
from ragscale.experiments.sweep.adopt import MANIFEST
from ragscale.published.plan import planned
from ragscale.published.runs import KEPT, load, plan_table, publish, table

pytestmark = pytest.mark.usefixtures("clean_checkout")


def test_published_records_give_back_the_summary_and_the_table_pairs_them_against_the_baseline(tmp_path, data_dir):
    runs = tmp_path / "runs"
    common = dict(dataset="hotpotqa", retriever="bm25", adapter="chat", docs=2, data_dir=data_dir, runs_dir=runs)
    summaries = [
        run_experiment(RunConfig(method=method, **common), lm=scripted_lm(SCRIPT), progress=False)
        for method in ("closed-book", "rag")
    ]
    config = RunConfig(method="rag", **common)
    oracle = OracleRetriever(load_examples(config)[1], gold_only=True)  # an oracle row is told apart from RAG
    summaries.append(run_experiment(config, lm=scripted_lm(SCRIPT), retriever=oracle, progress=False))
    folder = publish(runs, [s["mlflow_run_id"] for s in summaries[:2]], tmp_path / "published", command="pytest")
    publish(runs, [summaries[2]["mlflow_run_id"]], folder, command="pytest")  # a later sitting adds its row

    manifest, records = load(folder)
    assert list(records) == ["closed-book-none", "rag-none", "oracle-gold-none"] and manifest["command"] == "pytest"
    assert manifest["machine"]["cpu"] and manifest["runs"]["rag-none"]["params"]["docs"] == "2"
    assert manifest["runs"]["closed-book-none"]["made"]["cpu"] == manifest["machine"]["cpu"]
    for summary, rows in zip(summaries, records.values(), strict=True):
        assert all(set(row) == set(KEPT) for row in rows)
        again = record_scores(rows)
        assert {k: again[k] for k in ("n", "em", "f1", "acc", "retrieval_recall", EFFECTIVE_CONTEXT)} == {
            k: summary[k] for k in ("n", "em", "f1", "acc", "retrieval_recall", EFFECTIVE_CONTEXT)
        }
    with gzip.open(folder / "rag-none.jsonl.gz", "rb") as first:
        kept = first.read()
    publish(runs, [s["mlflow_run_id"] for s in summaries], folder, command="pytest")
    with gzip.open(folder / "rag-none.jsonl.gz", "rb") as second:
        assert second.read() == kept  # the same runs publish the same records
    assert (folder / MANIFEST).exists()

    assert plan_table(folder, "closed-book-none") == [("rag-none", "closed-book-none"),
                                                      ("oracle-gold-none", "closed-book-none")]  # fmt: skip
    assert plan_table(folder, "closed-book-none") == []  # planned once
    lines = table(folder, "closed-book-none").splitlines()
    assert lines[-1].endswith("the 2 comparisons planned on `published` (plan.json).")
    assert lines[2].startswith("| closed-book | none | ") and "| baseline |" in lines[2]
    rag = summaries[1]
    assert (
        lines[3].startswith(f"| rag | none | {rag['em']:.1f} | ")
        and f"| {rag['f1']:.1f} | {rag['acc']:.1f} |" in lines[3]
    )
    assert lines[4].startswith(f"| oracle-gold | none | {summaries[2]['em']:.1f} | ")
    backwards = publish(runs, [s["mlflow_run_id"] for s in reversed(summaries)], tmp_path / "b", command="pytest")
    assert list(load(backwards)[1]) == ["oracle-gold-none", "rag-none", "closed-book-none"]
    plan_table(backwards, "closed-book-none")
    assert table(backwards, "closed-book-none").replace("`b`", "`published`") == table(folder, "closed-book-none")


def test_a_later_sitting_adopts_the_published_cells_and_refuses_one_made_otherwise(tmp_path, data_dir):
    spec = importlib.util.spec_from_file_location("cells", Path(__file__).parents[2] / "benchmarks" / "cells.py")
    cells = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cells)
    runs = tmp_path / "runs"

    class ChatCells(cells.Cells):  # cells whose reader answers in ChatAdapter's format, as the script does
        def config_of(self, *cell):
            return replace(super().config_of(*cell), adapter="chat")

    def sitting(limit, **settings):  # a machine that keeps nothing: an empty out dir, the published folder
        return ChatCells(lm="smollm2-135m", teacher=None, limit=limit, train_limit=2, runs_dir=runs,
                           out_dir=tmp_path / f"cells-{len(list(tmp_path.iterdir()))}", docs=2, **settings)  # fmt: skip

    config = replace(sitting(None).config_of("hotpotqa", "rag", "none"), data_dir=data_dir, threads=1)
    summary = run_experiment(config, lm=scripted_lm(SCRIPT), progress=False)  # the cell, as a first sitting ran it
    folder = publish(runs, [summary["mlflow_run_id"]], tmp_path / "published", command="pytest")

    adopted = sitting(None, adopt=folder).done("hotpotqa", "rag", "none")
    assert {k: adopted[k] for k in ("n", "em", "f1", "acc", "mlflow_run_id")} == {
        k: summary[k] for k in ("n", "em", "f1", "acc", "mlflow_run_id")
    }
    assert set(adopted["scores"]) == {"q4", "q5", "q6"} and adopted["adopted_from"] == str(folder)
    assert cells.paired(adopted, adopted, runs).diff == 0  # compared from the committed scores alone
    assert sitting(None, adopt=folder).done("hotpotqa", "closed-book", "none") is None  # not published: it runs
    assert sitting(None, adopt=folder).done("musique", "rag", "none") is None  # the folder holds HotpotQA's
    with pytest.raises(SystemExit, match="rag-none was made with limit=None, this benchmark asks limit=2"):
        sitting(2, adopt=folder).done("hotpotqa", "rag", "none")
    with pytest.raises(SystemExit, match="rag-none was made with corpus=hotpotqa, this benchmark asks corpus="):
        sitting(None, adopt=folder, corpus="questions").done("hotpotqa", "rag", "none")


def test_a_methods_benchmarks_cells_are_published_in_their_tables_order(tmp_path, data_dir, monkeypatch):
    benchmarks = Path(__file__).parents[2] / "benchmarks"
    modules = {}
    for name in ("cells", "publish"):
        spec = importlib.util.spec_from_file_location(name, benchmarks / f"{name}.py")
        modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(modules[name])
    runs, out = tmp_path / "runs", tmp_path / "cells"

    class ScriptedCells(modules["cells"].Cells):  # the script's cells, answered by the scripted LM
        def config_of(self, *cell):
            return replace(super().config_of(*cell), adapter="chat", data_dir=data_dir, threads=1)

        def _lm(self, *args, **kwargs):
            return scripted_lm(SCRIPT)

    benchmark = ScriptedCells(lm="smollm2-135m", teacher=None, limit=None, train_limit=2, runs_dir=runs,
                              out_dir=out, docs=2)  # fmt: skip
    cells = (("rag", "none"), ("closed-book", "none"), ("rag", "labeled"))
    ran = [benchmark.run("hotpotqa", *cell)["mlflow_run_id"] for cell in cells]
    monkeypatch.setattr(modules["publish"], "RESULTS", tmp_path / "results")
    command = ["--runs-dir", str(runs), "--name", "m", "--command", "pytest", "--baseline", "rag-none"]
    assert modules["publish"].main([*command, "--cells", str(out)]) == 0

    manifest, records = load(tmp_path / "results" / "m")
    assert list(records) == ["closed-book-none", "rag-none", "rag-labeled"]  # the table's order, not the run's
    assert [manifest["runs"][name]["run_id"] for name in records] == [ran[1], ran[0], ran[2]]
    assert planned(tmp_path / "results" / "m") == [("closed-book-none", "rag-none"), ("rag-labeled", "rag-none")]
    kept = sorted(path.name for path in (tmp_path / "results" / "m").glob("*.program.json"))
    assert kept == ["rag-labeled.program.json"]  # what compiling learned, beside the runs compiled
    program = json.loads((tmp_path / "results" / "m" / kept[0]).read_text(encoding="utf-8"))
    assert program["answer"]["demos"]


def test_a_run_made_from_a_dirty_checkout_is_refused_before_anything_is_written(tmp_path, data_dir):
    runs = tmp_path / "runs"
    config = RunConfig(method="rag", dataset="hotpotqa", retriever="bm25", adapter="chat", docs=2, data_dir=data_dir,
                       runs_dir=runs)  # fmt: skip
    with clean_checkout({"git_commit": "abc", "git_dirty": "true"}):
        dirty = run_experiment(config, lm=scripted_lm(SCRIPT), progress=False)["mlflow_run_id"]
    clean = run_experiment(config, lm=scripted_lm(SCRIPT), progress=False)["mlflow_run_id"]
    with pytest.raises(ValueError, match=rf"run {dirty} \(rag-none\) was made from a checkout with uncommitted"):
        publish(runs, [clean, dirty], tmp_path / "published", command="pytest")
    assert not (tmp_path / "published").exists()


def test_a_rerun_of_a_row_is_a_new_entry_and_the_one_it_replaces_stays_whole_in_superseded(tmp_path, data_dir):
    runs = tmp_path / "runs"
    config = RunConfig(method="rag", dataset="hotpotqa", retriever="bm25", adapter="chat", docs=2, data_dir=data_dir,
                       runs_dir=runs)  # fmt: skip
    first = run_experiment(config, lm=scripted_lm(SCRIPT), progress=False)["mlflow_run_id"]
    folder = publish(runs, [first], tmp_path / "published", command="first sitting")
    entry = load(folder)[0]["runs"]["rag-none"]
    assert entry["command"] == "first sitting" and "replaces" not in entry
    publish(runs, [first], folder, command="the same run again")
    assert load(folder)[0]["runs"]["rag-none"] == entry and load(folder)[0]["superseded"] == []  # nothing new

    again = run_experiment(config, lm=scripted_lm(SCRIPT), progress=False, fresh=True)["mlflow_run_id"]
    publish(runs, [again], folder, command="a re-run")
    manifest = load(folder)[0]
    assert manifest["superseded"] == [{"name": "rag-none", **entry}]
    rerun = manifest["runs"]["rag-none"]
    assert rerun["run_id"] == again and rerun["command"] == "a re-run"
    assert rerun["replaces"] == {"run_id": first, "same_predictions": True}  # the scripted LM answers alike
