"""What each directive of a page writes: its kind and arguments, read as a text made from a published folder's files.

A directive (``pages.py``: the comment on a page that cites a result) names a published folder under
``benchmarks/results/`` (``runs.py``) and reads only its files, every score re-derived from the per-question
records. ``value`` writes the text of one; the kinds:

- ``table FOLDER BASELINE``: the folder's comparison table (``runs.table``);
- ``em``, ``f1``, ``acc``, ``recall``, ``context``, ``calls``, ``n`` ``FOLDER RUN``: one run's score;
- ``diff FOLDER RUN BASELINE``: its EM minus the baseline's with the paired 95% CI, from the folder's planned
  family as in the table (``plan.py``, ``runs.compared``);
- ``behaviour FOLDER``: each run's defining behaviour (``Method.behaviour``, the means of its records' values), a
  table beside the folder's ``table``;
- ``share`` and ``mean`` ``FOLDER RUN NAME``: the mean of one of its behaviour values (``Method.behaviour``) as a
  percentage of questions, or as a number;
- ``held FOLDER RUN NAME``: the mean of a behaviour its method has a floor for, measured when it was compiled on the
  training questions held back from compiling (the run's ``held_back.NAME`` param: ``optimizers/floors.py``), as
  a percentage;
- ``qpm FOLDER RUN``, ``metric FOLDER RUN METRIC``: its questions per minute, or a timing or count the manifest
  holds (``wall_s``, ``compile_s``, ``compile_lm_calls``, ...);
- ``sweep FOLDER PART``: a published sweep's budget table, grid, claims or allocation model, made again from its
  records (``sweeps.report``; ``PART`` one of ``sweeps.PARTS``: ``table``, ``grid``, ``claims``, ``verdicts``, ``fit``,
  ``estimates``, ``floors``);
- ``graders FOLDER``: a grader benchmark's table, made again from every passage's committed grade
  (``graders.table``); ``grader FOLDER ROW SCORE`` one of its scores (``graders.scores``: ``accuracy``, ``auc``, ...);
- ``documents FOLDER PART ...``: a documents benchmark's tables and numbers, made again from every question's
  committed answer (``documents.directive``);
- ``claims LABEL=FOLDER ...``: the papers' core claims checked on those tables, each in its folder's planned family
  (``core_claims``);
- ``rule``: the rule by which a family's differences are called real (``family.RULE``);
- ``floors``: each method's floors (``Method.floors``), the behaviour a compiled program must keep on held-back
  training questions (``optimizers/floors.py``), as a table;
- ``engine FILE PART``: the engine's table against llama.cpp kept as ``FILE`` (``benchmarks/engine_table.py``),
  or the date and machine it was made on (``PART`` ``table`` or ``made``; ``engine.directive``);
- ``plan FILE``: the summary line of a sweep's plan (``ragscale sweep --plan-only``) kept as ``FILE``: its
  configurations and estimated minutes of LM time;
- ``paper DATASET METHOD``: the accuracy Yue et al. 2024 report for a method's best configuration on a dataset
  (their Figure 1, kept in ``PAPER`` with its source), for scale;
- ``made FOLDER``: the date and machine (CPU model and code-path flags) the folder's runs were made on, each with
  its runs where they were made on several;
- ``command FOLDER``: the command that made them, as code;
- ``compiled FOLDER``: each method's compiled runs against its uncompiled one, EM and F1, the EM differences from
  the folder's planned family; ``against FOLDER OPTIMIZER``: the same against each method's run under ``OPTIMIZER``.

A directive that names no published folder, or checks its folders itself, is in ``ANYWHERE``; the others, whose
first argument is a published folder checked before they run, in ``ON_FOLDER``. A folder's records are read once
a process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

from ragscale.experiments import family
from ragscale.experiments.paired import format_ci
from ragscale.published import core_claims, plan
from ragscale.published.documents import directive
from ragscale.published.engine import directive as engine_directive

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
"""The published folders, one per benchmark's results."""
PAPER = RESULTS / "paper-yue2024.json"
"""The numbers Yue et al. 2024 report, with where they were read from."""
SCORES = {
    "em": ("em", "{:.1f}"),
    "f1": ("f1", "{:.1f}"),
    "acc": ("acc", "{:.1f}"),
    "recall": ("retrieval_recall", "{:.1f}"),
    "context": ("effective_context_tokens_per_question", "{:,.0f}"),
    "calls": ("lm_calls_per_question", "{:.2f}"),
    "n": ("n", "{:d}"),
}
"""The directives of one run's score: kind -> (the score's name in ``evaluate.record_scores``, its format)."""


class DirectiveError(ValueError):
    """A directive that names no known kind, folder or run; the message says which and where."""


def _published(folder: str) -> bool:
    from ragscale.experiments.sweep.adopt import MANIFEST

    return (RESULTS / folder / MANIFEST).is_file()


@cache
def _loaded(folder: str) -> tuple[dict, dict]:
    from ragscale.published.runs import load

    return load(RESULTS / folder)


@cache
def _swept(folder: str) -> dict[str, str]:
    from ragscale.published.sweeps import load, report

    return report(load(RESULTS / folder))


@cache
def _graded(folder: str) -> dict[str, dict]:
    from ragscale.published.graders import scores, shown

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
    """The text the directive ``expr`` writes (see the module docstring): a directive that names no published folder
    (``ANYWHERE``) when its arguments fit, else one that reads a published folder, its first argument
    (``ON_FOLDER``)."""
    kind, *args = expr.split()
    if kind in ANYWHERE and ANYWHERE[kind][0] in (None, len(args)):
        return ANYWHERE[kind][1](kind, args)
    if kind not in ON_FOLDER:
        raise DirectiveError(f"unknown directive {kind!r}; valid: {', '.join(sorted({*ON_FOLDER, *ANYWHERE}))}")
    arity, write = ON_FOLDER[kind]
    if len(args) != arity:
        raise DirectiveError(f"{kind} takes {arity} argument(s), got {args}")
    if not (RESULTS / args[0]).is_dir():
        raise DirectiveError(f"no folder {args[0]!r} under {RESULTS}")
    if not _published(args[0]):
        raise DirectiveError(f"{args[0]} is not a published folder: it has no manifest")
    return write(kind, args)


def _block(text: str) -> str:
    """A table, or any text of several lines, as a block directive writes it: a paragraph of its own."""
    return "\n\n" + text + "\n\n"


def _rule(kind: str, args: list[str]) -> str:
    return family.RULE


def _floors(kind: str, args: list[str]) -> str:
    from ragscale.programs import PROGRAMS  # loads DSPy

    lines = ["| method | floor: the least mean on held-back training questions |", "|---|---|"]
    for name, method in PROGRAMS.items():
        if method.floors:
            floors = ", ".join(f"`{behaviour}` {least:g}" for behaviour, least in method.floors)
            lines.append(f"| {name} | {floors}{' (multi-hop questions)' if method.floors_multi_hop else ''} |")
    return _block("\n".join(lines))


def _plan(kind: str, args: list[str]) -> str:
    path = RESULTS / args[0]
    if not path.is_file():
        raise DirectiveError(f"no plan {args[0]!r} under {RESULTS}")
    found = [line for line in path.read_text(encoding="utf-8").splitlines() if " to run, " in line]
    if len(found) != 1:
        raise DirectiveError(f"{path}: no one summary line (' to run, ') in it")
    return found[0]


def _engine(kind: str, args: list[str]) -> str:
    path = RESULTS / args[0]
    if not path.is_file():
        raise DirectiveError(f"no engine table {args[0]!r} under {RESULTS}")
    try:
        text = engine_directive(path, args[1])
    except ValueError as exc:
        raise DirectiveError(str(exc)) from None
    return _block(text) if args[1] == "table" else text


def _paper(kind: str, args: list[str]) -> str:
    reported = json.loads(PAPER.read_text(encoding="utf-8"))["acc"]
    if args[0] not in reported or args[1] not in reported[args[0]]:
        raise DirectiveError(f"{PAPER.name} has no {args[1]!r} on {args[0]!r}; it has {reported}")
    return f"{reported[args[0]][args[1]]:.1f}"


def _claims(kind: str, args: list[str]) -> str:
    labelled = [arg.partition("=") for arg in args]
    missing = [folder for _, _, folder in labelled if not (RESULTS / folder).is_dir()]
    if not args or missing or any(not label for label, _, _ in labelled):
        raise DirectiveError(f"claims takes LABEL=FOLDER arguments of folders under {RESULTS}; got {args}")
    folders = [RESULTS / folder for _, _, folder in labelled]
    return _block(core_claims.table(folders, [label for label, _, _ in labelled]))


def _documents(kind: str, args: list[str]) -> str:
    try:
        folder = (args or [""])[0]
        ready = _loaded(folder) if _published(folder) else None
        return directive(RESULTS / folder, args[1:], ready)
    except ValueError as exc:
        raise DirectiveError(str(exc)) from exc


ANYWHERE: dict[str, tuple[int | None, Callable[[str, list[str]], str]]] = {
    "rule": (0, _rule),
    "floors": (0, _floors),
    "plan": (1, _plan),
    "paper": (2, _paper),
    "claims": (None, _claims),
    "documents": (None, _documents),
    "engine": (2, _engine),
}
"""The directives that name no published folder, or check it themselves: kind -> (their number of arguments, None
for any, and what writes their text)."""


def _table(kind: str, args: list[str]) -> str:
    from ragscale.published.runs import table

    return _block(table(RESULTS / args[0], args[1]))


def _compiled(kind: str, args: list[str]) -> str:
    from ragscale.published.runs import compiled_table

    return _block(compiled_table(RESULTS / args[0], *args[1:]))


def _behaviour(kind: str, args: list[str]) -> str:
    from ragscale.experiments.compare import format_behaviour
    from ragscale.published.runs import ordered, row_of

    runs, lines = _loaded(args[0])[0]["runs"], ["| method | optimizer | behaviour |", "|---|---|---|"]
    for name in ordered(runs):
        shown = format_behaviour(_scores(args[0], name)["behaviour"])
        lines.append(f"| {row_of(runs[name]['params'])} | {runs[name]['params']['optimizer']} | {shown} |")
    return _block("\n".join(lines))


def _graders(kind: str, args: list[str]) -> str:
    from ragscale.published.graders import table

    return _block(table(RESULTS / args[0]))


def _grader(kind: str, args: list[str]) -> str:
    found = _graded(args[0]).get(args[1])
    if found is None or args[2] not in found:
        raise DirectiveError(f"{args[0]}: no grader row {args[1]!r} with a score {args[2]!r}")
    return found[args[2]]


def _sweep(kind: str, args: list[str]) -> str:
    from ragscale.published.sweeps import PARTS

    if args[1] not in PARTS:
        raise DirectiveError(f"sweep has no part {args[1]!r}; valid: {', '.join(PARTS)}")
    made = _swept(args[0])[args[1]]
    return _block(f"```\n{made}\n```" if args[1] == "fit" else made)  # the fit: lines as lines


def _diff(kind: str, args: list[str]) -> str:
    return format_ci(plan.compared(RESULTS / args[0], args[1], args[2]))


def _behaviour_value(kind: str, args: list[str]) -> str:
    found = _scores(args[0], args[1])["behaviour"][args[2]]
    return f"{100 * found:.0f}%" if kind == "share" else f"{found:.2f}"


def _run(folder: str, name: str) -> dict:
    """The manifest entry of the run ``name`` in the published ``folder``; an error lists its runs."""
    runs = _loaded(folder)[0]["runs"]
    if name not in runs:
        raise DirectiveError(f"{folder}: no run named {name!r}; its runs: {', '.join(runs)}")
    return runs[name]


def _held(kind: str, args: list[str]) -> str:
    params = _run(args[0], args[1])["params"]
    if f"held_back.{args[2]}" not in params:
        measured = [key.removeprefix("held_back.") for key in params if key.startswith("held_back.")]
        raise DirectiveError(f"{args[0]} {args[1]}: no floor of {args[2]!r} was measured on held-back questions; "
                             f"measured: {', '.join(measured) or 'none'}")  # fmt: skip
    return f"{100 * float(params[f'held_back.{args[2]}']):.0f}%"


def _provenance(kind: str, args: list[str]) -> str:
    from ragscale.published.runs import load_manifest, made_by_command, made_on

    manifest = load_manifest(RESULTS / args[0])  # a method table's or a sweep's
    return made_by_command(manifest) if kind == "command" else made_on(manifest)


def _metric(kind: str, args: list[str]) -> str:
    metrics = _run(args[0], args[1])["metrics"]
    if kind == "qpm":
        return f"{metrics['questions_per_minute']:.1f}"
    if args[2] not in metrics:
        raise DirectiveError(f"{args[0]} {args[1]}: no metric {args[2]!r}; it has {', '.join(metrics)}")
    return f"{metrics[args[2]]:,.0f}"


def _score(kind: str, args: list[str]) -> str:
    key, fmt = SCORES[kind]
    return fmt.format(_scores(*args)[key])


ON_FOLDER: dict[str, tuple[int, Callable[[str, list[str]], str]]] = {
    "table": (2, _table),
    "compiled": (1, _compiled),
    "against": (2, _compiled),
    "behaviour": (1, _behaviour),
    "graders": (1, _graders),
    "grader": (3, _grader),
    "sweep": (2, _sweep),
    "diff": (3, _diff),
    "share": (3, _behaviour_value),
    "mean": (3, _behaviour_value),
    "held": (3, _held),
    "made": (1, _provenance),
    "command": (1, _provenance),
    "qpm": (2, _metric),
    "metric": (3, _metric),
    **{kind: (2, _score) for kind in SCORES},
}
"""The directives that read the published folder their first argument names, checked before they run: kind -> (their
number of arguments, and what writes their text)."""
