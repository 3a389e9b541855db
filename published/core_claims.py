"""The papers' core claims, checked on published methods tables, each in its folder's planned family, EM deciding.

Each claim is one paired comparison of two runs of a table (``runs.py``), named in advance with its direction:

- retrieval beats closed-book: RAG - closed-book;
- demonstrations that carry their documents beat RAG's (Yue et al. 2024, DRAG): compiled DRAG - RAG;
- IterDRAG beats DRAG on multi-hop questions (Yue et al. 2024): compiled IterDRAG - compiled DRAG;
- retrieval bounds the reader: the gold paragraphs (``oracle-gold``) - RAG;
- what retrieval misses costs: the gold paragraphs among RAG's k (``oracle-distractors``) - RAG;
- distractors hurt the reader: the gold paragraphs alone - among RAG's k.

Each claim is a comparison planned on its table's folder (``plan.py``), and its exact p-value on per-question EM
(``paired.sign_flip_p``, McNemar's test) is adjusted with the others of that folder's family by Holm's rule, the
same verdict it carries on the folder's own tables; ``family.verdict`` calls a claim ``held`` on a table when its
difference is real in the claim's direction, ``not held`` when real against it, ``not shown`` otherwise; F1 and
Acc decide nothing. A claim one of whose runs is compiled below a floor of its method (``floors.shortfalls``) is
``not tested`` there, whatever its difference: IterDRAG that asks no follow-up tests nothing of IterDRAG. A table
that lacks either run of a claim leaves that cell empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragscale.experiments import family
from ragscale.experiments.paired import format_ci
from ragscale.published import plan

CLAIMS = (
    ("retrieval beats closed-book", "rag-none", "closed-book-none"),
    ("demonstrations with their documents beat RAG's (DRAG)", "drag-bootstrap", "rag-none"),
    ("IterDRAG beats DRAG on multi-hop questions", "iterdrag-bootstrap", "drag-bootstrap"),
    ("retrieval bounds the reader: the gold paragraphs beat RAG", "oracle-gold-none", "rag-none"),
    ("what retrieval misses costs: the gold among RAG's k beat RAG", "oracle-distractors-none", "rag-none"),
    ("distractors hurt the reader: the gold alone beat it among k", "oracle-gold-none", "oracle-distractors-none"),
)
"""(claim, run a, run b): the claim is that a scores above b."""


def check(folders: Sequence[Path]) -> list[dict[str, Any]]:
    """Each claim with, per folder, its comparison (``ci``: a ``BootstrapCI`` from the folder's planned family,
    ``plan.compared``; None where the folder lacks a run) and verdict."""
    from ragscale.published.runs import load  # the records' module loads DSPy

    loaded = {folder: load(folder) for folder in folders}
    return [
        {
            "claim": claim,
            "a": a,
            "b": b,
            "found": {
                folder.name: _found(folder, *loaded[folder], a, b) if {a, b} <= loaded[folder][1].keys() else None
                for folder in folders
            },
        }
        for claim, a, b in CLAIMS
    ]


def _found(folder: Path, manifest: dict, records: dict, a: str, b: str) -> dict[str, Any]:
    from ragscale.experiments.floors import shortfalls  # the methods' floors: DSPy

    ci = plan.compared(folder, a, b)
    below = [name for name in (a, b) if shortfalls(manifest["runs"][name]["params"], records[name])]
    return {"ci": ci, "verdict": family.not_tested(below) if below else family.verdict(ci)}


def table(folders: Sequence[Path], labels: Sequence[str]) -> str:
    """The claims as a markdown table: a column per folder (headed by ``labels``), each cell the EM difference with
    its 95% CI and the verdict, and under it the rule and the families."""
    lines = [
        "| claim | compared | " + " | ".join(labels) + " |",
        "|---|---|" + "---|" * len(labels),
    ]
    for claim in check(folders):
        cells = [
            "" if found is None else f"{format_ci(found['ci'])}: {found['verdict']}"
            for found in claim["found"].values()
        ]
        compared = f"{claim['a']} - {claim['b']}"
        lines.append(f"| {claim['claim']} | {compared} | " + " | ".join(cells) + " |")
    families = "; ".join(f"{label}: {len(plan.planned(folder))}" for label, folder in zip(labels, folders, strict=True))
    lines.append(
        f"\nVerdicts: {family.RULE}; each column's family is the comparisons planned on its folder ({plan.PLAN}; "
        f"{families})."
    )
    return "\n".join(lines)
