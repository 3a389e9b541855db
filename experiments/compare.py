"""Compare tracked runs: a table over method x optimizer x dataset x LM with paired bootstrap CIs.

Each run's per-question EM and F1 (from its `predictions.jsonl` artifact) are paired with the baseline's by question
id (``paired.paired_bootstrap``: the percentile CI of the mean difference over `resamples` seeded resamples of the
paired questions, so the same runs give the same table, and the exact p-value of ``paired.sign_flip_p``). A table is
one family: its EM differences, EM being the primary metric, have their p-values adjusted together (``family``:
Holm), and only those are marked as real; F1 is shown beside them and decides nothing. Differences are in percentage
points. The baseline is a given run (`--baseline RUN`: an id, a unique id prefix or a run name) or, per dataset, the
latest closed-book run with the same LM (else any LM), else the dataset's first run. Each row also shows the
method's defining behaviour (``behaviour.<name>`` metrics: IterDRAG's follow-ups, Self-RAG's retrieval rate, ...)
and how many of its questions failed (they score 0). Only FINISHED runs are compared unless FAILED and KILLED runs
are asked for (``load_runs(unfinished=True)``, ``compare --unfinished``): their rows are marked with their status.
Each row names the corpus its run searched (``--corpus``, with the start of its sha256); a run is never paired with
a baseline that searched another corpus, and the latest run is kept per corpus too. Runs made by different code,
libraries, machines, model files or data files (``provenance``) are named as such under the table
(``provenance_note``). The table prints as markdown, JSON or CSV; ``chart.py`` draws it.

One concept in one file: the comparison of tracked runs, from reading them back through their paired CIs
(``paired``) to the forms the table is printed in.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ragscale.experiments import family, tracking
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT, PREDICTIONS
from ragscale.experiments.paired import RESAMPLES, format_ci, paired_bootstrap
from ragscale.experiments.provenance import PREFIX, differing
from ragscale.programs import PROGRAMS
from ragscale.programs.behaviour import is_rate


@dataclass
class RunResult:
    """One finished run: its labels, summary metrics and per-question scores (in percent) by question id."""

    run_id: str
    run_name: str
    method: str
    optimizer: str
    dataset: str
    lm: str
    start_time: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    status: str = "FINISHED"
    failed: int = 0
    em: dict[str, float] = field(default_factory=dict)
    f1: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)  # what produced it (``provenance.provenance_tags``)
    corpus: str = ""  # the corpus's name ("" for a run that searches none)
    corpus_sha256: str = ""

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.method, self.optimizer, self.dataset, self.lm, self.corpus_sha256)

    @classmethod
    def from_records(cls, run_id: str, records: Sequence[Mapping[str, Any]], **labels: Any) -> RunResult:
        return cls(
            run_id=run_id,
            run_name=labels.pop("run_name", run_id),
            em={str(r["id"]): 100 * float(r["em"]) for r in records},
            f1={str(r["id"]): 100 * float(r["f1"]) for r in records},
            **labels,
        )


def load_runs(runs_dir: Path, *, unfinished: bool = False) -> list[RunResult]:
    """Finished runs of the store under `runs_dir`, oldest first, with their predictions; with `unfinished`, also
    the FAILED and KILLED runs that logged predictions (their rows say so in the status column)."""
    statuses = ("FINISHED", "FAILED", "KILLED") if unfinished else ("FINISHED",)
    results = []
    for run in tracking.finished_runs(runs_dir, statuses=statuses):
        params = run.data.params
        if run.info.status != "FINISHED":
            logged = [a.path for a in tracking.client(runs_dir).list_artifacts(run.info.run_id)]
            if PREDICTIONS not in logged:
                continue
        path = tracking.artifact_path(runs_dir, run.info.run_id, PREDICTIONS)
        with path.open(encoding="utf-8") as fh:
            records = [json.loads(line) for line in fh if line.strip()]
        results.append(
            RunResult.from_records(
                run.info.run_id,
                records,
                run_name=run.info.run_name or run.info.run_id,
                method=params.get("method", "?"),
                optimizer=params.get("optimizer", "?"),
                dataset=params.get("dataset", "?"),
                lm=params.get("lm", "?"),
                start_time=run.info.start_time or 0,
                metrics=dict(run.data.metrics),
                status=run.info.status,
                failed=sum(r.get("error") is not None for r in records),
                provenance={k: v for k, v in run.data.tags.items() if k.startswith(PREFIX)},
                corpus=params.get("corpus", "") if "corpus_sha256" in params else "",
                corpus_sha256=params.get("corpus_sha256", ""),
            )
        )
    return results


def find_run(runs: Sequence[RunResult], ref: str) -> RunResult:
    """The run whose id, unique id prefix or name is `ref`; a clear error listing runs otherwise."""
    exact = [r for r in runs if ref in (r.run_id, r.run_name)]
    matches = exact or [r for r in runs if r.run_id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(f"{r.run_id[:8]} ({r.run_name})" for r in runs) or "none"
    what = "matches several runs" if matches else "matches no finished run"
    raise ValueError(f"--baseline {ref!r} {what}; runs: {known}")


def retrieves(run: RunResult) -> bool:
    """Whether the run's method searches a corpus (its ``Method.retrieves``); a method no longer registered is taken
    to retrieve."""
    method = PROGRAMS.get(run.method)
    return method is None or method.retrieves


def other_corpus(a: RunResult, b: RunResult) -> bool:
    """Whether two runs searched different corpora (a run that searches none, closed-book, pairs with any)."""
    return bool(a.corpus_sha256 and b.corpus_sha256 and a.corpus_sha256 != b.corpus_sha256)


def default_baseline(runs: Sequence[RunResult], run: RunResult) -> RunResult | None:
    same_data = [r for r in runs if r.dataset == run.dataset and not other_corpus(r, run)]
    closed = [r for r in same_data if not retrieves(r)]
    same_lm = [r for r in closed if r.lm == run.lm]
    for pool in (same_lm, closed):
        if pool:
            return max(pool, key=lambda r: r.start_time)
    return min(same_data, key=lambda r: r.start_time) if same_data else None


def behaviour_of(metrics: Mapping[str, float]) -> dict[str, float]:
    """The run's behaviour values (its ``behaviour.<name>`` metrics) by name; ``{}`` for a method without one."""
    return {name.split(".", 1)[1]: value for name, value in sorted(metrics.items()) if name.startswith("behaviour.")}


def format_behaviour(behaviour: Mapping[str, float]) -> str:
    """``name value`` pairs, rates as percentages; "none" for a method without a defining step."""
    if not behaviour:
        return "none"

    return ", ".join(
        f"{name} {100 * value:.0f}%" if is_rate(name) else f"{name} {value:.2f}" for name, value in behaviour.items()
    )


def compare_runs(
    runs: Sequence[RunResult],
    *,
    baseline: str | None = None,
    latest_only: bool = True,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per run (the latest FINISHED run of each method x optimizer x dataset x LM unless `latest_only` is
    False), and a row for each FAILED or KILLED run given; baselines are FINISHED runs only."""
    fixed = find_run(runs, baseline) if baseline is not None else None
    finished = [r for r in runs if r.status == "FINISHED"]
    shown = list(finished)
    if latest_only:
        latest: dict[tuple, RunResult] = {}
        for run in finished:
            if run.key not in latest or run.start_time >= latest[run.key].start_time:
                latest[run.key] = run
        shown = [r for r in finished if latest[r.key] is r]
    shown += [r for r in runs if r.status != "FINISHED"]
    rows = []
    for run in sorted(shown, key=lambda r: (r.dataset, r.lm, retrieves(r), r.method, r.optimizer)):
        base = fixed or default_baseline(finished, run)
        if base is not None and other_corpus(base, run):
            base = None  # never paired: the questions met other passages
        is_base = base is not None and base.run_id == run.run_id
        rows.append(
            {
                "run_id": run.run_id,
                "method": run.method,
                "optimizer": run.optimizer,
                "dataset": run.dataset,
                "lm": run.lm,
                "corpus": run.corpus,
                "corpus_sha256": run.corpus_sha256,
                "n": len(run.em),
                "failed": run.failed,
                "status": run.status,
                "em": sum(run.em.values()) / len(run.em) if run.em else 0.0,
                "f1": sum(run.f1.values()) / len(run.f1) if run.f1 else 0.0,
                EFFECTIVE_CONTEXT: run.metrics.get(EFFECTIVE_CONTEXT),
                "behaviour": behaviour_of(run.metrics),
                "provenance": run.provenance,
                "baseline_run_id": base.run_id if base is not None else None,
                "is_baseline": is_base,
                "em_diff": None
                if base is None or is_base
                else paired_bootstrap(run.em, base.em, resamples=resamples, seed=seed),
                "f1_diff": None
                if base is None or is_base
                else paired_bootstrap(run.f1, base.f1, resamples=resamples, seed=seed),
            }
        )
    for row, ci in zip(rows, family.adjust([row["em_diff"] for row in rows]), strict=True):
        row["em_diff"] = ci  # the table is one family; EM, its primary metric, decides (family.RULE)
    return rows


def format_corpus(name: str, sha256: str) -> str:
    """A corpus as the table shows it: its name (a file's stem) and the start of its sha256; "" for none."""
    if not sha256:
        return ""
    return f"{Path(name).stem if '/' in name else name} ({sha256[:8]})"


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A markdown table of `compare_runs` rows; `*` marks an EM difference called real within the table
    (``family.RULE``); F1 is shown beside it, never marked."""
    header = [
        "run",
        "method",
        "optimizer",
        "dataset",
        "lm",
        "corpus",
        "n",
        "failed",
        "EM",
        "F1",
        "dEM [95% CI]",
        "dF1 [95% CI]",
        "tokens/q",
        "behaviour",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        tokens = row[EFFECTIVE_CONTEXT]
        cells = [
            row["run_id"][:8] + ("" if row["status"] == "FINISHED" else f" ({row['status']})"),
            row["method"],
            row["optimizer"],
            row["dataset"],
            row["lm"],
            format_corpus(row["corpus"], row["corpus_sha256"]),
            str(row["n"]),
            str(row["failed"]),
            f"{row['em']:.1f}",
            f"{row['f1']:.1f}",
            format_ci(row["em_diff"], row["is_baseline"]),
            format_ci(row["f1_diff"], row["is_baseline"], mark=False),
            "" if tokens is None else f"{tokens:.0f}",
            format_behaviour(row["behaviour"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """``compare_runs`` rows as CSV: one line per run, each CI as its difference, low and high; the behaviour as
    JSON."""
    columns = ["run_id", "method", "optimizer", "dataset", "lm", "corpus", "corpus_sha256", "n", "failed", "status",
               "em", "f1", "em_diff", "em_low", "em_high", "em_p", "em_p_adjusted", "f1_diff", "f1_low", "f1_high",
               EFFECTIVE_CONTEXT,
               "behaviour", "baseline_run_id"]  # fmt: skip
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    for row in rows_to_json(rows):
        line = {name: row.get(name) for name in columns}
        for score in ("em", "f1"):
            ci = row[f"{score}_diff"] or {}
            line.update(
                {f"{score}_diff": ci.get("diff"), f"{score}_low": ci.get("low"), f"{score}_high": ci.get("high")}
            )
        line.update(
            {"em_p": (row["em_diff"] or {}).get("p"), "em_p_adjusted": (row["em_diff"] or {}).get("p_adjusted")}
        )
        line["behaviour"] = json.dumps(row["behaviour"])
        writer.writerow(line)
    return out.getvalue()


def provenance_note(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """What tells the compared runs apart beyond their labels (code, libraries, machine, model or data files), or
    None when they were produced alike."""
    apart = differing([row.get("provenance") or {} for row in rows])
    return f"the runs were produced differently: {', '.join(apart)} differ (see each run's tags)" if apart else None


def rows_to_json(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        item = dict(row)
        for key in ("em_diff", "f1_diff"):
            ci = row[key]
            item[key] = None if ci is None else asdict(ci)
        out.append(item)
    return out
