"""Pages whose every result is written from committed files: the directives of a markdown page, rendered.

A page cites a result through a directive, an HTML comment (invisible where the page is read) that says where the
result comes from, followed by the text it writes and a closing comment::

    <!--= table methods-hotpotqa-qwen2.5-coder-0.5b rag-none -->

    | method | optimizer | EM | ...

    <!--/-->

or inline: ``RAG answers <!--= em methods-hotpotqa-qwen2.5-coder-0.5b rag-none -->23.0<!--/--> EM``. Each
directive names a published folder under ``benchmarks/results/`` (``published.py``) and reads only its files, every
score re-derived from the per-question records:

- ``table FOLDER BASELINE``: the folder's comparison table (``published.table``);
- ``em``, ``f1``, ``acc``, ``recall``, ``context``, ``calls``, ``n`` ``FOLDER RUN``: one run's score;
- ``diff FOLDER RUN BASELINE``: its EM minus the baseline's with the paired 95% CI, adjusted with the folder's other
  differences against that baseline as in the table (``published.compared``);
- ``behaviour FOLDER``: each run's defining behaviour (``Method.behaviour``, the means of its records' values), a
  table beside the folder's ``table``;
- ``share`` and ``mean`` ``FOLDER RUN NAME``: the mean of one of its behaviour values (``Method.behaviour``) as a
  percentage of questions, or as a number;
- ``qpm FOLDER RUN``, ``metric FOLDER RUN METRIC``: its questions per minute, or a timing or count the manifest
  holds (``wall_s``, ``compile_s``, ``compile_lm_calls``, ...);
- ``sweep FOLDER PART``: a published sweep's budget table, grid, claims or allocation model, made again from its
  records (``sweep.published.report``; ``PART`` one of ``table``, ``grid``, ``claims``, ``fit``, ``estimates``);
- ``graders FOLDER``: a grader benchmark's table, made again from every passage's committed grade
  (``graded.table``); ``grader FOLDER ROW SCORE`` one of its scores (``graded.scores``: ``accuracy``, ``auc``, ...);
- ``documents FOLDER PART ...``: a documents benchmark's tables and numbers, made again from every question's
  committed answer (``grounded.directive``);
- ``claims LABEL=FOLDER ...``: the papers' core claims checked on those tables as one family (``core_claims``);
- ``rule``: the rule by which a family's differences are called real (``family.RULE``);
- ``plan FILE``: the summary line of a sweep's plan (``ragscale sweep --plan-only``) kept as ``FILE``: its
  configurations and estimated minutes of LM time;
- ``paper DATASET METHOD``: the accuracy Yue et al. 2024 report for a method's best configuration on a dataset
  (their Figure 1, kept in ``PAPER`` with its source), for scale;
- ``made FOLDER``: the date and machine (CPU model and code-path flags) the folder's runs were made on, each with
  its runs where they were made on several;
- ``command FOLDER``: the command that made them, as code;
- ``compiled FOLDER``: each method's compiled runs against its uncompiled one, EM and F1, the EM differences one
  family; ``against FOLDER OPTIMIZER``: the same against each method's run under ``OPTIMIZER``.

``render`` rewrites the text of every directive of a page; ``python benchmarks/pages.py`` rewrites ``PAGES`` in
place, and ``tests/test_pages.py`` checks that each page is what ``render`` gives and that no result-shaped number
(``typed_numbers``: a decimal, a percentage, a CI) stands outside a directive on the pages written this way
(``WRITTEN``). A number changed by hand, or a committed file changed without its page, fails there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
PAPER = RESULTS / "paper-yue2024.json"
"""The numbers Yue et al. 2024 report, with where they were read from."""
PAGES = ("README.md", "docs/results.md", "docs/methods.md", "docs/scaling.md", "docs/documents.md")
"""The pages whose directives ``benchmarks/pages.py`` renders and ``tests/test_pages.py`` checks."""
WRITTEN = ("README.md", "docs/results.md", "docs/methods.md", "docs/scaling.md", "docs/documents.md")
"""The pages on which every result-shaped number is a directive's."""

DIRECTIVE = re.compile(r"<!--= (?P<expr>[^>]*?) -->(?P<text>.*?)<!--/-->", re.S)
RESULT_SHAPED = re.compile(r"(?<![\w.\-/=§])[+-]?\d+\.\d+(?![\w.])|(?<![\w.])\d+(?:\.\d+)?%")
NOT_RESULTS = re.compile(r"95% CI|95% confidence|Python \d+\.\d+|Gemini\s+1\.5")
"""Result-shaped text that states no result: the confidence level of every CI, a Python version, a model's name."""
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
SCORES = {
    "em": ("em", "{:.1f}"),
    "f1": ("f1", "{:.1f}"),
    "acc": ("acc", "{:.1f}"),
    "recall": ("retrieval_recall", "{:.1f}"),
    "context": ("effective_context_tokens_per_question", "{:,.0f}"),
    "calls": ("lm_calls_per_question", "{:.2f}"),
    "n": ("n", "{:d}"),
}


class DirectiveError(ValueError):
    """A directive that names no known kind, folder or run; the message says which and where."""


@cache
def _compared(folder: str, baseline: str) -> dict:
    """Each run by name, in the table's order, with its EM against the baseline's (``ci``), as its table pairs it."""
    from ragscale.experiments.published import compared

    return compared(RESULTS / folder, baseline)


def _published(folder: str) -> bool:
    from ragscale.experiments.published import MANIFEST

    return (RESULTS / folder / MANIFEST).is_file()


@cache
def _loaded(folder: str) -> tuple[dict, dict]:
    from ragscale.experiments.published import load

    return load(RESULTS / folder)


@cache
def _swept(folder: str) -> dict[str, str]:
    from ragscale.experiments.sweep.published import load, report

    return report(load(RESULTS / folder))


@cache
def _graded(folder: str) -> dict[str, dict]:
    from ragscale.experiments.graded import scores, shown

    return {name: shown(scores(grades)) for name, grades in _loaded(folder)[1].items()}


@cache
def _scores(folder: str, run: str) -> dict:
    """One run's scores, re-derived from its records (``evaluate.record_scores``)."""
    from ragscale.experiments.evaluate import record_scores

    runs = _loaded(folder)[1]
    if run not in runs:
        raise DirectiveError(f"{folder}: no run named {run!r}; its runs: {', '.join(runs)}")
    return record_scores(runs[run])


def value(expr: str) -> str:
    """The text the directive ``expr`` writes (see the module docstring)."""
    from ragscale.experiments.paired import format_ci
    from ragscale.experiments.published import compiled_table, table

    kind, *args = expr.split()
    if kind == "rule" and not args:
        from ragscale.experiments import family

        return family.RULE
    if kind == "plan" and len(args) == 1:
        path = RESULTS / args[0]
        if not path.is_file():
            raise DirectiveError(f"no plan {args[0]!r} under {RESULTS}")
        found = [line for line in path.read_text(encoding="utf-8").splitlines() if " to run, " in line]
        if len(found) != 1:
            raise DirectiveError(f"{path}: no one summary line (' to run, ') in it")
        return found[0]
    if kind == "paper" and len(args) == 2:
        reported = json.loads(PAPER.read_text(encoding="utf-8"))["acc"]
        if args[0] not in reported or args[1] not in reported[args[0]]:
            raise DirectiveError(f"{PAPER.name} has no {args[1]!r} on {args[0]!r}; it has {reported}")
        return f"{reported[args[0]][args[1]]:.1f}"
    if kind == "claims":
        from ragscale.experiments import core_claims

        labelled = [arg.partition("=") for arg in args]
        missing = [folder for _, _, folder in labelled if not (RESULTS / folder).is_dir()]
        if not args or missing or any(not label for label, _, _ in labelled):
            raise DirectiveError(f"claims takes LABEL=FOLDER arguments of folders under {RESULTS}; got {args}")
        folders = [RESULTS / folder for _, _, folder in labelled]
        return "\n\n" + core_claims.table(folders, [label for label, _, _ in labelled]) + "\n\n"
    if kind == "documents":
        from ragscale.experiments.grounded import directive

        try:
            folder = (args or [""])[0]
            ready = _loaded(folder) if _published(folder) else None
            return directive(RESULTS / folder, args[1:], ready)
        except ValueError as exc:
            raise DirectiveError(str(exc)) from exc
    arity = {
        "table": 2, "behaviour": 1, "sweep": 2, "graders": 1, "grader": 3, "diff": 3, "qpm": 2, "metric": 3,
        "share": 3, "mean": 3, "made": 1, "command": 1, "compiled": 1, "against": 2,
        **{k: 2 for k in SCORES},
    }  # fmt: skip
    if kind not in arity:
        valid = ", ".join(sorted([*arity, "claims", "documents", "paper", "plan", "rule"]))
        raise DirectiveError(f"unknown directive {kind!r}; valid: {valid}")
    if len(args) != arity[kind]:
        raise DirectiveError(f"{kind} takes {arity[kind]} argument(s), got {args}")
    if not (RESULTS / args[0]).is_dir():
        raise DirectiveError(f"no folder {args[0]!r} under {RESULTS}")
    if not _published(args[0]):
        raise DirectiveError(f"{args[0]} is not a published folder: it has no manifest")
    if kind in ("compiled", "against"):
        return "\n\n" + compiled_table(RESULTS / args[0], *args[1:]) + "\n\n"
    if kind == "table":
        return "\n\n" + table(RESULTS / args[0], args[1]) + "\n\n"
    if kind == "behaviour":
        from ragscale.experiments.compare import format_behaviour
        from ragscale.experiments.published import ordered, row_of

        runs, lines = _loaded(args[0])[0]["runs"], ["| method | optimizer | behaviour |", "|---|---|---|"]
        for name in ordered(runs):
            shown = format_behaviour(_scores(args[0], name)["behaviour"])
            lines.append(f"| {row_of(runs[name]['params'])} | {runs[name]['params']['optimizer']} | {shown} |")
        return "\n\n" + "\n".join(lines) + "\n\n"
    if kind == "graders":
        from ragscale.experiments.graded import table as graders_table

        return "\n\n" + graders_table(RESULTS / args[0]) + "\n\n"
    if kind == "grader":
        found = _graded(args[0]).get(args[1])
        if found is None or args[2] not in found:
            raise DirectiveError(f"{args[0]}: no grader row {args[1]!r} with a score {args[2]!r}")
        return found[args[2]]
    if kind == "sweep":
        from ragscale.experiments.sweep.published import PARTS

        if args[1] not in PARTS:
            raise DirectiveError(f"sweep has no part {args[1]!r}; valid: {', '.join(PARTS)}")
        made = _swept(args[0])[args[1]]
        return f"\n\n```\n{made}\n```\n\n" if args[1] == "fit" else f"\n\n{made}\n\n"  # the fit: lines as lines
    if kind == "diff":
        return format_ci(_compared(args[0], args[2])[args[1]]["ci"])
    if kind in ("share", "mean"):
        found = _scores(args[0], args[1])["behaviour"][args[2]]
        return f"{100 * found:.0f}%" if kind == "share" else f"{found:.2f}"
    if kind in ("made", "command"):
        from ragscale.experiments.published import load_manifest

        manifest = load_manifest(RESULTS / args[0])  # a method table's or a sweep's
        return f"`{manifest['command']}`" if kind == "command" else _made(manifest)
    if kind in ("qpm", "metric"):
        runs = _loaded(args[0])[0]["runs"]
        if args[1] not in runs:
            raise DirectiveError(f"{args[0]}: no run named {args[1]!r}; its runs: {', '.join(runs)}")
        metrics = runs[args[1]]["metrics"]
        if kind == "qpm":
            return f"{metrics['questions_per_minute']:.1f}"
        if args[2] not in metrics:
            raise DirectiveError(f"{args[0]} {args[1]}: no metric {args[2]!r}; it has {', '.join(metrics)}")
        return f"{metrics[args[2]]:,.0f}"
    key, fmt = SCORES[kind]
    return fmt.format(_scores(*args)[key])


def _made(manifest: dict) -> str:
    """When and on what a published folder's runs were made: a method table's, each machine and date with its runs
    where they were made on several; a sweep's, made over sittings, each machine with the dates of its rows."""
    if "rows" in manifest:
        machines: dict[str, set[str]] = {}
        for row in [*manifest["rows"].values(), *manifest["oracle"].values()]:
            machines.setdefault(f"{row['made']['cpu']} with {row['made']['cpu_flags']}", set()).add(row["made"]["date"])
        spans = {where: (min(dates), max(dates)) for where, dates in machines.items()}
        return "; ".join(f"{' to '.join(sorted({*span}))} on {where}" for where, span in spans.items())
    machine, rows = manifest["machine"], {}
    for name, run in manifest["runs"].items():  # a run published before runs kept their machine: the folder's
        made = run.get("made") or {**machine, "date": manifest["date"]}
        rows.setdefault(f"{made['date']} on {made['cpu']} with {made['cpu_flags']}", []).append(name)
    if len(rows) == 1:
        return next(iter(rows))
    return "; ".join(f"{', '.join(names)}: {where}" for where, names in rows.items())


def render(text: str, where: str = "page", value: Callable[[str], str] = value) -> str:
    """``text`` with every directive's text written anew by ``value``; a bad directive raises naming the line."""

    def written(match: re.Match) -> str:
        try:
            return f"<!--= {match['expr']} -->{value(match['expr'])}<!--/-->"
        except (DirectiveError, KeyError) as exc:
            line = text.count("\n", 0, match.start()) + 1
            raise DirectiveError(f"{where}:{line}: <!--= {match['expr']} -->: {exc}") from exc

    return DIRECTIVE.sub(written, text)


def typed_numbers(text: str) -> list[tuple[int, str]]:
    """The result-shaped numbers (decimals, percentages) of ``text`` outside its directives and code, with their
    line numbers: on a page in ``WRITTEN`` each one is a result typed by hand."""
    outside = DIRECTIVE.sub(lambda m: " " * len(m[0].replace("\n", "")) + "\n" * m[0].count("\n"), text)
    for hidden in (CODE, NOT_RESULTS):
        outside = hidden.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), outside)
    return [(outside.count("\n", 0, m.start()) + 1, m[0]) for m in RESULT_SHAPED.finditer(outside)]
