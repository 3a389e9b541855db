"""What the methods benchmarks (``faithful.py``, ``methods.py``) share: a cell and the comparisons of two cells.

A cell is one row of a methods table: a method (or an oracle row) x an optimizer on a dataset, run by ``run_experiment``
as ``ragscale run`` runs it (hybrid retrieval over the corpus, by default the dataset's own, k = 5, 2 demonstrations of
at most 3 documents, DSPy's cache off, tracked in MLflow under ``runs_dir``, by default the out dir's parent). A
compiling optimizer that runs DSPy's teacher program (bootstrap, ...) runs it on the teacher LM. Its summary is written
to ``<out-dir>/<dataset>__<row>__<optimizer>__n<limit>.json`` with each question's scores (``scores``: id -> em, f1,
acc): a rerun reads it instead of running the cell again, so an interrupted benchmark resumes where it stopped, and a
folder of finished cells compares its cells by itself, on a machine without the MLflow store that ran them.

The oracle rows are the RAG program given the question's gold paragraphs (``oracle-gold``), and given them padded to k =
5 with the highest-ranked non-gold passages its retriever finds in the corpus (``oracle-distractors``), through
``OracleRetriever``; ``oracle-all`` (all of a question's paragraphs, the distractor setting's bound) is a cell too. Two
cells are compared question by question: the paired bootstrap 95% CI of the difference of their EM (or F1), from the
cells' scores (or, for a cell kept without them, the per-question records MLflow holds).

A table measured over several sittings on machines that keep nothing between them gathers in a published folder
(``benchmarks/publish.py``); ``adopt`` names it, and a cell it holds, made with the same settings (all but where
things lie on the machine and how fast it runs: ``UNCOMPARED``), counts as finished: its summary is made again from
the committed records and the manifest (``adopted``), so a later sitting runs only the cells the folder lacks and
still compares every cell with the baseline. A published cell made with other settings is an error naming the
setting, not a cell run again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.files import write_json

ORACLE_ROWS = ("oracle-gold", "oracle-distractors")
"""The oracle rows a methods table has beside it."""
ORACLES = (*ORACLE_ROWS, "oracle-all")
"""Every oracle row a cell can be: also all of a question's paragraphs, the distractor setting's."""
SCORES = ("em", "f1", "acc")
DOCS = 5
"""The documents k of every cell unless given: the methods' retrieval, and the padding of oracle-distractors."""
UNCOMPARED = frozenset(
    {"api_base", "teacher_api_base", "chroma_url", "weights", "cache", "data_dir", "runs_dir", "threads", "trace"}
)
"""The settings of a published cell that may differ from a later sitting's: where things are on the machine, how
fast it runs, the weight layout its CPU picks. Every other setting, the run's name included, must be the same."""
__all__ = ["EFFECTIVE_CONTEXT", "ORACLE_ROWS", "Cells", "behaviour_cell", "paired", "records_of"]


class Cells:
    """Runs cells of one student LM (and its teacher), loading each LM once, keeping each summary as JSON."""

    def __init__(self, *, lm: str, teacher: str | None, limit: int, train_limit: int, out_dir: Path,
                 threads: int = 8, gepa_budget: str | None = None, prefix: str = "cell",
                 api_base: str | None = None, runs_dir: Path | None = None, corpus: str | None = None,
                 docs: int = DOCS, adopt: Path | None = None):  # fmt: skip
        self.docs = docs  # k of every row but the gold oracles, which give the gold paragraphs whatever k
        self.lm_name, self.teacher_name, self.limit, self.train_limit = lm, teacher, limit, train_limit
        self.api_base = api_base  # the server of the student (an openai/<model>); the teacher is local
        self.out_dir, self.threads, self.gepa_budget, self.prefix = out_dir, threads, gepa_budget, prefix
        self.runs_dir = runs_dir or out_dir.parent
        self.corpus = corpus  # --corpus of every cell; None: each dataset's own
        self.adopt = adopt  # a published folder whose cells count as finished (``adopted``)
        self._lms: dict[tuple[str, int | None, str | None, str | None], object] = {}
        out_dir.mkdir(parents=True, exist_ok=True)

    def path(self, dataset: str, row: str, optimizer: str) -> Path:
        """The cell's file; a corpus other than ``questions`` (the setting of the committed cells) is in its name."""
        corpus = "" if self.corpus == "questions" else f"__{Path(self.corpus or dataset).stem}"
        k = "" if self.docs == DOCS else f"__k{self.docs}"
        return self.out_dir / f"{dataset}__{row}__{optimizer}__n{self.limit}{corpus}{k}.json"

    def docs_of(self, row: str) -> int:
        """k of a row: the cells' ``docs``, but for the gold oracles, whose prompt holds the gold paragraphs
        whatever k asks (k as large as MuSiQue's 20 paragraphs, for the prompt's length check)."""
        return 20 if row in ("oracle-gold", "oracle-all") else self.docs

    def done(self, dataset: str, row: str, optimizer: str) -> dict | None:
        path = self.path(dataset, row, optimizer)
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else self.adopted(dataset, row, optimizer)

    def adopted(self, dataset: str, row: str, optimizer: str) -> dict | None:
        """The cell as the published folder ``adopt`` holds it (None where it holds none): the manifest's metrics
        with the scores re-derived from the committed records (``evaluate.record_scores``) and each question's
        scores, kept in the out dir as a cell run here is."""
        if self.adopt is None:
            return None
        from ragscale.experiments.evaluate import record_scores
        from ragscale.experiments.sweep.adopt import read_records
        from ragscale.published.runs import load_manifest

        name = f"{row}-{optimizer}"
        run = load_manifest(self.adopt)["runs"].get(name)
        if run is None or run["params"].get("dataset") != dataset:  # a folder holds one dataset's table
            return None
        wanted = self.config_of(dataset, row, optimizer).to_params()
        for key in sorted(set(wanted) - UNCOMPARED):
            if run["params"].get(key) != wanted[key]:
                raise SystemExit(
                    f"--adopt {self.adopt}: its {name} was made with {key}={run['params'].get(key)}, "
                    f"this benchmark asks {key}={wanted[key]}"
                )
        records = read_records(self.adopt / f"{name}.jsonl.gz")
        metrics = {k: v for k, v in run["metrics"].items() if not k.startswith("behaviour.")}
        summary = {
            **metrics, **record_scores(records), "method": run["params"]["method"], "dataset": dataset,
            "optimizer": optimizer, "lm": self.lm_name, "row": row, "mlflow_run_id": run["run_id"],
            "adopted_from": str(self.adopt), "scores": {r["id"]: {k: r[k] for k in SCORES} for r in records},
        }  # fmt: skip
        write_json(self.path(dataset, row, optimizer), summary, indent=2)
        return summary

    def config_of(self, dataset: str, row: str, optimizer: str):
        """The ``RunConfig`` the cell runs with (an oracle row runs the RAG program)."""
        from ragscale.experiments.config import RunConfig
        from ragscale.optimizers.teleprompters import TEACHER_OPTIMIZERS

        taught = optimizer in TEACHER_OPTIMIZERS and self.teacher_name is not None
        return RunConfig(
            method="rag" if row in ORACLES else row,
            dataset=dataset,
            optimizer=optimizer,
            lm=self.lm_name,
            api_base=self.api_base,
            teacher=self.teacher_name if taught else None,
            budget=self.gepa_budget if optimizer == "gepa" else None,
            docs=self.docs_of(row),
            shots=2,
            docs_per_demo=3,
            limit=self.limit,
            train_limit=self.train_limit,
            corpus=self.corpus,
            runs_dir=self.runs_dir,
            threads=self.threads,
            cache=False,  # questions per minute of this run, not of an earlier run's cached calls
            run_name=f"{self.prefix}-{dataset}-{row}-{optimizer}-n{self.limit}",
        )

    def _lm(self, name: str, max_tokens: int | None = None, api_base: str | None = None, decode: str | None = None):
        from ragscale.experiments.parts import load_named_lm

        key = (name, max_tokens, api_base, decode)
        if key not in self._lms:
            extra = {"max_tokens": max_tokens} if max_tokens else {}
            self._lms[key] = load_named_lm(name, cache=False, api_base=api_base, decode=decode, **extra)
        return self._lms[key]

    def run(self, dataset: str, row: str, optimizer: str) -> dict:
        """The cell's summary: read back when it finished before, else run now and kept."""
        summary = self.done(dataset, row, optimizer)
        if summary is not None:
            return summary
        from ragscale.experiments.inputs import corpus_for
        from ragscale.experiments.oracle import OracleRetriever
        from ragscale.experiments.parts import TEACHER_DECODE, build_retriever_for, load_examples
        from ragscale.experiments.runner import run_experiment

        config = self.config_of(dataset, row, optimizer)
        oracle, taught = row in ORACLES, config.teacher is not None
        teacher = None  # the run loads the teacher and releases it once compiled, for the student's decode graphs
        if taught and optimizer == "gepa":  # GEPA's teacher reflects: room for a rewritten instruction
            teacher = self._lm(self.teacher_name, 1024, decode=TEACHER_DECODE)
        retriever, corpus = None, None  # the corpus an oracle's distractors come from names the run's key
        if oracle:
            train, evalset = load_examples(config)
            distractors = None
            if row == "oracle-distractors":
                corpus = corpus_for(config, train, evalset)
                distractors = build_retriever_for(config, train, evalset, corpus=corpus)
            retriever = OracleRetriever(evalset, gold_only=row != "oracle-all", distractors=distractors)
        start = time.perf_counter()
        summary = run_experiment(
            config,
            lm=self._lm(self.lm_name, api_base=self.api_base),
            teacher_lm=teacher,
            retriever=retriever,
            corpus=corpus,
            progress=False,
            check_context=True,  # a cell whose prompts cannot fit fails before it runs
        )
        summary["row"], summary["benchmark_wall_s"] = row, round(time.perf_counter() - start, 1)
        records = records_of(summary, self.runs_dir)
        summary["scores"] = {i: {k: r[k] for k in SCORES} for i, r in records.items()}
        write_json(self.path(dataset, row, optimizer), summary, indent=2)
        return summary


def records_of(summary: dict, runs_dir: Path) -> dict[str, dict]:
    """The per-question scores of a finished cell, by question id: those it keeps, else its MLflow run's records
    (``ledger.run_records``)."""
    if "scores" in summary:
        return summary["scores"]
    from ragscale.experiments.sweep.ledger import run_records

    rows = run_records(runs_dir, summary["mlflow_run_id"])
    if rows is None:
        raise SystemExit(f"run {summary['mlflow_run_id']} has no per-question records under {runs_dir}")
    return {row["id"]: row for row in rows}


def paired(a: dict, b: dict, runs_dir: Path, score: str = "em"):
    """The paired bootstrap 95% CI of cell ``a`` minus cell ``b`` on ``score`` (points), over their questions."""
    from ragscale.experiments.paired import paired_bootstrap

    ra, rb = records_of(a, runs_dir), records_of(b, runs_dir)
    return paired_bootstrap({i: 100 * r[score] for i, r in ra.items()}, {i: 100 * r[score] for i, r in rb.items()})


def behaviour_cell(summary: dict, shown: tuple[str, ...] | None = None) -> str:
    """The method's behaviour values (those named in ``shown``, else all) as ``ragscale compare`` shows them."""
    from ragscale.experiments.compare import format_behaviour

    values = summary.get("behaviour") or {}
    if shown is not None:
        values = {name: values[name] for name in shown if name in values}
    return format_behaviour(values) if values else "none (no defining step)"
