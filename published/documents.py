"""A documents benchmark's answers, committed and scored again: each question's kept chunks and answer, beside the
tables.

``benchmarks/documents.py --publish NAME`` answers questions about PDFs with each configuration (plain or contextual
chunks, without or with the LM reranker) and writes every answered question to
``benchmarks/results/NAME/<config>.jsonl.gz`` (``KEPT``: the question's id and kind, its gold answers, the kept
chunks' ids, the rank of the first chunk on the answer's page, the answer and its scores, the LM calls, seconds and
grades it took) with a ``manifest.json`` (``runs.publish_rows``: the command, the machine and commit, each
configuration's settings, and what ingesting and compiling the grader cost). ``scores`` makes a configuration's
numbers from its records alone, ``differences`` each configuration against the first, paired over the questions,
and ``directive`` the text a page's ``documents FOLDER PART ...`` directive writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragscale.experiments import family
from ragscale.experiments.paired import format_ci, paired_bootstrap

KEPT = ("id", "kind", "answers", "passages", "rank", "answer_in_passages", "answer", "acc", "em", "lm_calls",
        "seconds", "grades")  # fmt: skip
"""What is committed of each answered question."""
SHARES: dict[str, Callable[[dict], bool]] = {
    "R@1": lambda r: r["rank"] == 1,
    "R@k": lambda r: r["rank"] is not None,
    "Ans@k": lambda r: bool(r["answer_in_passages"]),
    "Acc": lambda r: bool(r["acc"]),
    "EM": lambda r: bool(r["em"]),
}
"""Each score a share of questions: the answer page first, or among the kept chunks; the answer string in a kept
chunk; the answer right (a gold alias in it, or equal to one)."""
COMPARED = ("R@1", "R@k", "Acc", "EM")
"""The scores whose paired differences against the first configuration are shown; each column is one family."""
RULE = (
    "McNemar's exact test on each question's 0/1 score, each column's differences Holm-adjusted together, `*` when "
    "the adjusted p is below 0.05"
)


def scores(records: Sequence[dict]) -> dict[str, float]:
    """A configuration's numbers from its records: each of ``SHARES`` in percent, LM calls and seconds a question."""
    n = len(records)
    found = {name: 100.0 * sum(share(r) for r in records) / n for name, share in SHARES.items()}
    return found | {"calls": sum(r["lm_calls"] for r in records) / n, "s": sum(r["seconds"] for r in records) / n}


def differences(records: dict[str, list[dict]]) -> dict[str, dict[str, Any]]:
    """Each configuration after the first against the first, paired over the questions both answered: a
    ``paired.BootstrapCI`` in points per score of ``COMPARED``, each score's differences adjusted together
    (``family.adjust``, Holm)."""
    (_, first), *others = records.items()
    found: dict[str, dict[str, Any]] = {name: {} for name, _ in others}
    for score in COMPARED:

        def per_question(rows: list[dict], share=SHARES[score]) -> dict[str, float]:
            return {r["id"]: 100.0 * share(r) for r in rows}

        cis = family.adjust([paired_bootstrap(per_question(rows), per_question(first)) for _, rows in others])
        for (name, _), ci in zip(others, cis, strict=True):
            found[name][score] = ci
    return found


def table(records: dict[str, list[dict]], k: int) -> str:
    """The markdown table of every configuration's ``scores``."""
    head = ["chunks", "R@1 answer page", f"R@{k} answer page", "answer in passages", "Acc", "EM", "LM calls / q",
            "s / q"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---|" + "--:|" * (len(head) - 1)]
    for name, rows in records.items():
        found = scores(rows)
        cells = [label(name), *(f"{found[s]:.1f}" for s in SHARES), f"{found['calls']:.2f}", f"{found['s']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versus(records: dict[str, list[dict]], k: int) -> str:
    """The markdown table of each configuration's ``differences`` against the first."""
    head = ["chunks", *(s.replace("@k", f"@{k}") for s in COMPARED)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---|" * len(COMPARED)]
    for name, cis in differences(records).items():
        lines.append("| " + " | ".join([label(name), *(format_ci(cis[s]) for s in COMPARED)]) + " |")
    return "\n".join(lines)


def label(config: str) -> str:
    """How a table names a configuration: ``contextual+fused`` is "contextual + rerank, fused order"."""
    chunking, _, order = config.partition("+")
    return f"{chunking} + rerank, {order} order" if order else chunking


def relevant(records: Sequence[dict]) -> str:
    """How many of the candidates the reranker graded it called relevant: "73% (497 of 680)"."""
    grades = sum((Counter(r["grades"]) for r in records), Counter())
    graded = sum(grades.values())
    return f"{100.0 * grades['relevant'] / graded:.0f}% ({grades['relevant']} of {graded})"


def directive(folder: Path, args: Sequence[str], loaded: tuple[dict, dict[str, list[dict]]] | None = None) -> str:
    """The text of ``documents FOLDER PART ...``: ``table`` and ``versus`` (the tables), ``rule`` (how ``versus``
    calls a difference real), ``score CONFIG NAME`` (one of ``scores``), ``diff CONFIG SCORE`` (its difference
    against the first configuration, as ``versus`` shows it), ``relevant CONFIG`` (its grades), ``cost SETUP`` (the
    LM calls and seconds that writing a collection's contexts took); ``loaded``: the folder's manifest and records if
    already read (``runs.load``). Raises ValueError naming what is not there."""
    from ragscale.published.runs import load

    if loaded is None:
        if not (folder / "manifest.json").is_file():
            raise ValueError(f"no published folder {folder.name!r} under {folder.parent}")
        loaded = load(folder)
    manifest, records = loaded
    part, *rest = args or [""]
    k = manifest["settings"]["k"]
    arity = {"table": 0, "versus": 0, "rule": 0, "score": 2, "diff": 2, "relevant": 1, "cost": 1}
    if part not in arity or len(rest) != arity[part]:
        raise ValueError(f"documents {folder.name}: {list(args)}; parts: table, versus, rule, score CONFIG NAME, "
                         "diff CONFIG SCORE, relevant CONFIG, cost SETUP")  # fmt: skip
    if rest and part != "cost" and rest[0] not in records:
        raise ValueError(f"{folder.name}: no configuration {rest[0]!r}; it has {', '.join(records)}")
    if part in ("table", "versus"):
        return "\n\n" + (table if part == "table" else versus)(records, k) + "\n\n"
    if part == "rule":
        return RULE
    if part == "relevant":
        return relevant(records[rest[0]])
    if part == "cost":
        setup = manifest["setup"].get(rest[0])
        if setup is None:
            raise ValueError(f"{folder.name}: no setup {rest[0]!r}; it has {', '.join(manifest['setup'])}")
        paid = setup.get("contexts_paid") or setup  # the ingestion that wrote the contexts, if an earlier one did
        return f"{paid['lm_calls']} LM calls ({paid['ingest_s']:.0f} s)"
    config, score = rest
    if part == "diff":
        if config == next(iter(records)):
            raise ValueError(f"documents diff: {config!r} is the configuration the others are compared with")
        if score not in COMPARED:
            raise ValueError(f"documents diff: no score {score!r}; valid: {', '.join(COMPARED)}")
        return format_ci(differences(records)[config][score])
    found = scores(records[config])
    if score not in found:
        raise ValueError(f"documents score: no score {score!r}; valid: {', '.join(found)}")
    return f"{found[score]:.2f}" if score == "calls" else f"{found[score]:.1f}"
