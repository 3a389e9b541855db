"""A grader benchmark's grades, committed and scored again: each passage's label, grade and margin, beside the table.

``benchmarks/graders.py --publish NAME`` grades labelled passages (``optimizers.graders.grade_examples``) with the
Grade predictor of CRAG and Self-RAG as each optimizer compiled it, and ``publish`` writes every grade to
``benchmarks/results/NAME/<row>.jsonl.gz`` (``KEPT``: the passage, its label, the grade, and the margin log
P(relevant) - log P(irrelevant) where the LM scores the options) with a ``manifest.json`` shaped as a method
table's (``runs.py``: the command, the machine and commit, and each row's settings and timings), so that the
``made`` and ``command`` page directives read it too. ``scores`` makes a row's numbers from its grades alone, and
``table`` the table a page cites (its ``graders FOLDER`` directive).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragscale.published.runs import load, publish_rows

KEPT = ("passage_id", "label", "grade", "margin")
"""What is committed of each grade: which passage, the label the data gives it, the grade, and the margin."""
COLUMNS = ("optimizer", "demos (relevant / irrelevant)", "accuracy", "relevant recall", "irrelevant recall",
           "ambiguous", "AUC", "best threshold", "compile LM calls")  # fmt: skip


def record(passage_id: str, label: str, grade: str, probabilities: dict[str, float] | None) -> dict[str, Any]:
    """One grade as it is committed; the margin is None when the LM gave no option scores (a server)."""
    margin = None
    if probabilities is not None:
        margin = math.log(probabilities["relevant"]) - math.log(probabilities["irrelevant"])
    return {"passage_id": passage_id, "label": label, "grade": grade, "margin": margin}


def scores(records: Sequence[dict]) -> dict[str, float | None]:
    """A grader's numbers from its grades: accuracy, the recall of each label and how often it said "ambiguous"
    (never right: the labels are binary), in percent, and how well its margin separates the labels whatever the
    decision rule (``separation``)."""

    def share(rows: Sequence[dict]) -> float:
        return 100.0 * sum(r["grade"] == r["label"] for r in rows) / max(1, len(rows))

    return {
        "accuracy": share(records),
        "relevant_recall": share([r for r in records if r["label"] == "relevant"]),
        "irrelevant_recall": share([r for r in records if r["label"] == "irrelevant"]),
        "ambiguous": 100.0 * sum(r["grade"] == "ambiguous" for r in records) / max(1, len(records)),
        **separation(records),
    }


def separation(records: Sequence[dict]) -> dict[str, float | None]:
    """The AUC of the margin, and the accuracy of the best single threshold on it (chosen on these passages: the
    ceiling of any calibration that moves one threshold); None when a grade has no margin."""
    if not records or any(r["margin"] is None for r in records):
        return {"auc": None, "best_threshold_accuracy": None}
    pos = [r["margin"] for r in records if r["label"] == "relevant"]
    neg = [r["margin"] for r in records if r["label"] != "relevant"]
    auc = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg) / max(1, len(pos) * len(neg))
    thresholds = [*(r["margin"] for r in records), math.inf]
    best = max(sum((r["margin"] >= t) == (r["label"] == "relevant") for r in records) for t in thresholds)
    return {"auc": auc, "best_threshold_accuracy": 100.0 * best / len(records)}


def publish(
    folder: Path, rows: dict[str, dict], grades: dict[str, list[dict]], *, command: str, made_by: dict | None = None
) -> Path:
    """Write each row's grades, as ``<name>.jsonl.gz``, and the manifest to ``folder`` (``runs.publish_rows``,
    see the module docstring). ``rows`` holds each row's settings and timings by its name (its optimizer,
    ``-calibrated`` added for a calibrated grader): ``params`` (``optimizer``, ``demo_grades``, ...) and ``metrics``
    (``compile_lm_calls``, ...); ``made_by`` (``runs.made_here()`` taken when the benchmark started; default:
    now) where they were made."""
    return publish_rows(folder, rows, grades, KEPT, command=command, made_by=made_by)


def table(folder: Path) -> str:
    """The markdown table of the graders in ``folder``, every score made again from the committed grades
    (``format_table``)."""
    manifest, grades = load(folder)
    return format_table(manifest["runs"], grades)


def format_table(rows: dict[str, dict], grades: dict[str, list[dict]]) -> str:
    """The markdown table of graders: each row's scores from its grades (``scores``, as ``shown``), its
    demonstrations and compile calls from its settings (``rows``, as ``publish`` takes them)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|" + "--:|" * (len(COLUMNS) - 1)]
    for name, row in rows.items():
        found, demos = shown(scores(grades[name])), row["params"]["demo_grades"]
        cells = [name, f"{demos.get('relevant', 0)} / {demos.get('irrelevant', 0)}", found["accuracy"],
                 found["relevant_recall"], found["irrelevant_recall"], found["ambiguous"], found["auc"],
                 found["best_threshold_accuracy"], str(row["metrics"]["compile_lm_calls"])]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def shown(found: dict[str, float | None]) -> dict[str, str]:
    """A grader's ``scores`` as a page shows them: the AUC to three places, percentages to one, none as blank."""
    return {k: "" if v is None else f"{v:.3f}" if k == "auc" else f"{v:.1f}" for k, v in found.items()}
