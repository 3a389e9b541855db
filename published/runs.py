"""Results anyone can check again: finished runs' per-question records, committed beside the numbers cited from them.

``publish`` copies runs from an MLflow store into a folder (``benchmarks/results/<name>/``): each run's per-question
records (``predictions.jsonl`` cut to ``KEPT``: id, prediction, gold answers, EM/F1/Acc, retrieval recall, the passages
retrieved, LM calls and tokens, behaviour, error) as ``<row>-<optimizer>.jsonl.gz`` (the row: its method, or the oracle
its retriever names), a compiled run's program (its demonstrations and instructions, DSPy's JSON) as
``<row>-<optimizer>.program.json``, and a ``manifest.json`` with the command, the date, the machine (CPU model and
code-path flags), the git commit and each run's params and metrics. ``load`` reads a folder back, and ``table``
writes the comparison table a page cites from the files alone: every score re-derived from the records
(``evaluate.record_scores``), each difference paired against the baseline over question ids
(``paired.paired_bootstrap``) and marked as one family (``family``); only questions per minute, a timing, comes from
the manifest. The folder's format as the runtime reads it (the manifest's name, ``read_records``) is
``experiments.sweep.adopt``'s: a sweep on a fresh machine takes up a published sweep from it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ragscale.experiments import family, floors, tracking
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT, record_scores
from ragscale.experiments.files import write_json, write_jsonl_gz
from ragscale.experiments.paired import format_ci, paired_bootstrap
from ragscale.experiments.provenance import PREFIX, git_state, machine
from ragscale.experiments.runner import PROGRAM
from ragscale.experiments.sweep.adopt import MANIFEST, read_records
from ragscale.experiments.sweep.ledger import run_records
from ragscale.programs import PROGRAMS
from ragscale.published import plan

KEPT = (
    "id", "prediction", "answers", "em", "f1", "acc", "retrieval_recall", "passage_ids", "lm_calls", "input_tokens",
    "output_tokens", "sub_questions", "intermediate_answers", "behaviour", "error",
)  # fmt: skip
"""The fields of a per-question record that are committed: what re-derives a run's scores and says what it saw and
asked (the follow-ups of a method that decomposes, with their answers, which also calibrate a sweep's estimates)."""
SUPERSEDED = "superseded"
"""A manifest's list of the entries later ones replaced, each whole, in the order they went: manifests are
append-only, so a correction or a re-run is a new entry and the one before stays readable."""
FLOOR_NOTE = "compiled below a floor of its method (docs/methods.md), so it does not do what its method is named for"
"""What ``†`` says of a run in a table: the floors are ``Method.floors``, judged on its records (``floors.py``)."""
MADE = ("cpu", "cpu_flags", "gpu", "git_commit", "git_dirty")
"""What a run recorded of where it was made (``provenance.py``): the machine and the commit."""


def publish(runs_dir: Path, run_ids: Sequence[str], folder: Path, *, command: str) -> Path:
    """Copy the finished runs ``run_ids`` of the store in ``runs_dir`` to ``folder`` (see the module docstring),
    beside the runs the folder already holds: a run of the same row and optimizer replaces its row, the others
    stay, so a table measured over several sittings, or machines, gathers in one folder (each run keeps the
    machine, commit and date it was made on). A run made from a checkout with uncommitted changes is refused
    (``refuse_dirty``), before anything is written."""
    client = tracking.client(runs_dir)
    found = [client.get_run(run_id) for run_id in run_ids]
    for run in found:  # every run checked before anything is written
        refuse_dirty(made(run), f"run {run.info.run_id} ({row_of(run.data.params)}-{run.data.params['optimizer']})")
    folder.mkdir(parents=True, exist_ok=True)
    earlier = load_manifest(folder) if (folder / MANIFEST).exists() else {"runs": {}}
    runs, superseded = dict(earlier["runs"]), list(earlier.get(SUPERSEDED, []))
    for run in found:
        run_id, params = run.info.run_id, run.data.params
        name = f"{row_of(params)}-{params['optimizer']}"
        made_by = made(run)
        if runs.get(name, {}).get("run_id") == run_id:
            continue  # published already: its entry stands as it was
        before = predictions(folder / f"{name}.jsonl.gz")
        write_records(folder / f"{name}.jsonl.gz", runs_dir, run_id, name)
        if params["optimizer"] != "none":  # what compiling learned: its demonstrations and instructions
            shutil.copyfile(tracking.artifact_path(runs_dir, run_id, PROGRAM), folder / f"{name}.program.json")
        entry = {"run_id": run_id, "params": dict(params), "metrics": dict(run.data.metrics), "made": made_by,
                 "command": command}  # fmt: skip
        runs[name] = supersede(runs.get(name), entry, superseded, name, before, folder / f"{name}.jsonl.gz")
    # the folder's first command, date, machine and commit stand: entries that record none of their own read them
    first = {k: v for k, v in earlier.items() if k not in ("runs", SUPERSEDED)} or provenance(made_by, command)
    write_json(folder / MANIFEST, {**first, "runs": runs, SUPERSEDED: superseded}, indent=2)
    return folder


def supersede(
    earlier: dict | None, entry: dict, superseded: list[dict], name: str, before: dict | None, records: Path
) -> dict:  # fmt: skip
    """``entry``, published as ``name`` in place of ``earlier`` (None: a new row): a manifest is append-only, so
    the entry replaced goes, whole, to the end of ``superseded``, and the new one says which run it replaces and
    whether its predictions (``records``, now written) are those of the one before (``before``)."""
    if earlier is None or earlier == entry:
        return entry
    superseded.append({"name": name, **earlier})
    same = before is not None and before == predictions(records)
    return {**entry, "replaces": {"run_id": earlier.get("run_id"), "same_predictions": same}}


def predictions(path: Path) -> list | None:
    """Each record's id and prediction (the record itself where it has none: a grade, a kept chunk) in the published
    records at ``path``, in an order that does not depend on which question finished first; None where there are
    none."""
    if not path.is_file():
        return None
    return sorted(json.dumps([r.get("id"), r.get("prediction", r)], sort_keys=True) for r in read_records(path))


def write_records(path: Path, runs_dir: Path, run_id: str, name: str) -> None:
    """A finished run's per-question records cut to ``KEPT``, gzip-compressed to ``path`` so that the same records
    give the same bytes; a run whose records cannot be read fails naming it (``name``)."""
    records = run_records(runs_dir, run_id)
    if records is None:
        raise FileNotFoundError(f"run {run_id} ({name}) has no per-question records to publish")
    write_jsonl_gz(path, ({k: r.get(k) for k in KEPT} for r in records))


def refuse_dirty(made_by: dict, what: str) -> None:
    """Refuse to publish ``what``, made as ``made_by`` says (``made``, ``made_here``), when its checkout had
    uncommitted changes: a published result names the commit whose code made it, and a dirty tree's code is no
    commit's."""
    if made_by.get("git_dirty") == "true":
        raise ValueError(
            f"{what} was made from a checkout with uncommitted changes (on commit {made_by.get('git_commit')}); "
            "commit them and run it again: a published result names the code that made it"
        )


def provenance(made_by: dict[str, str | None], command: str) -> dict[str, Any]:
    """What a manifest says of where its runs come from: the command, today's date, and the machine and git commit
    of ``made_by`` (``made``: the last run published)."""
    return {
        "command": command,
        "date": datetime.now(UTC).date().isoformat(),
        "machine": {k: made_by[k] for k in ("cpu", "cpu_flags", "gpu")},
        "git_commit": made_by["git_commit"],
        "git_dirty": made_by["git_dirty"],
    }


def made_here() -> dict[str, str | None]:
    """This machine, the git commit checked out and today's date, as a run records where it was made: what a
    benchmark takes when it starts, so that a commit made while it runs is not named as its code."""
    made_by = {"git_commit": None, "git_dirty": None, **machine(), **git_state()}
    return {**made_by, "date": datetime.now(UTC).date().isoformat()}


def publish_rows(
    folder: Path, rows: dict[str, dict], records: dict[str, Sequence[dict]], kept: Sequence[str], *, command: str,
    made_by: dict | None = None, about: dict | None = None,
) -> Path:  # fmt: skip
    """A benchmark's rows, published as a method table's are: each row's ``records`` cut to the fields ``kept``, as
    ``<name>.jsonl.gz``, and a manifest of the ``command``, the machine and commit (``made_by``, by default
    ``made_here()``), each row's settings (``rows``: ``params``, ``metrics``, ...) and what else the benchmark says
    of itself (``about``: its settings, its set-up's costs), so that ``load`` and the page directives ``made`` and
    ``command`` read it. A row the folder held before and ``records`` lacks is removed. Rows made from a checkout
    with uncommitted changes are refused (``refuse_dirty``)."""
    made_by = made_by or made_here()
    refuse_dirty(made_by, f"{folder.name}'s rows")
    folder.mkdir(parents=True, exist_ok=True)
    earlier = load_manifest(folder) if (folder / MANIFEST).exists() else {"runs": {}}
    superseded = list(earlier.get(SUPERSEDED, []))
    superseded += [{"name": name, **entry} for name, entry in earlier["runs"].items() if name not in rows]
    for stale in set(folder.glob("*.jsonl.gz")) - {folder / f"{name}.jsonl.gz" for name in records}:
        stale.unlink()
    before = {name: predictions(folder / f"{name}.jsonl.gz") for name in records}
    for name, kept_rows in records.items():
        write_jsonl_gz(folder / f"{name}.jsonl.gz", ({k: r.get(k) for k in kept} for r in kept_rows))
    runs = {}
    for name, row in rows.items():
        entry, path = {**row, "made": made_by, "command": command}, folder / f"{name}.jsonl.gz"
        runs[name] = supersede(earlier["runs"].get(name), entry, superseded, name, before.get(name), path)
    manifest = {**provenance(made_by, command), **(about or {}), "runs": runs, SUPERSEDED: superseded}
    write_json(folder / MANIFEST, manifest, indent=2)
    return folder


def made(run: Any) -> dict[str, str | None]:
    """Where and when an MLflow run was made: the ``MADE`` tags it recorded (``provenance.py``) and the date it
    started."""
    date = datetime.fromtimestamp(run.info.start_time / 1000, UTC).date().isoformat()
    return {**{k: run.data.tags.get(PREFIX + k) for k in MADE}, "date": date}


def made_on(manifest: dict) -> str:
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


def made_by_command(manifest: dict) -> str:
    """The command that made a published folder's runs, as code: each entry's own where it records one (a later
    sitting's), the folder's first command for the others; each command with its runs where there are several."""
    if "rows" in manifest:
        return f"`{manifest['command']}`"
    commands: dict[str, list[str]] = {}
    for name, run in manifest["runs"].items():
        commands.setdefault(run.get("command", manifest["command"]), []).append(name)
    if len(commands) == 1:
        return f"`{next(iter(commands))}`"
    return "; ".join(f"{', '.join(names)}: `{command}`" for command, names in commands.items())


def row_of(params: dict[str, str]) -> str:
    """What a run is called in a table: its method, or the oracle row its retriever names."""
    return params.get("retriever_identity") or params["method"]


def table_order(rows: dict[str, tuple[str, str]]) -> list[str]:
    """The names of ``rows`` (name -> row, optimizer) in a table's order: each method as registered, uncompiled
    first, then the rows no method names (the oracles) by name."""
    order = list(PROGRAMS)

    def place(name: str) -> tuple:
        row, optimizer = rows[name]
        return row not in order, order.index(row) if row in order else 0, optimizer != "none", name

    return sorted(rows, key=place)


def ordered(runs: dict[str, dict]) -> list[str]:
    """The names of a manifest's ``runs`` in a table's order (``table_order``)."""
    return table_order({name: (row_of(run["params"]), run["params"]["optimizer"]) for name, run in runs.items()})


def load_manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))


def load(folder: Path) -> tuple[dict[str, Any], dict[str, list[dict]]]:
    """A published folder's manifest and each run's records by name (``<row>-<optimizer>``)."""
    manifest = load_manifest(folder)
    return manifest, {name: read_records(folder / f"{name}.jsonl.gz") for name in manifest["runs"]}


def points_by_run(records: dict[str, list[dict]], score: str = "em") -> dict[str, dict[str, float]]:
    """Each run's per-question ``score`` in percent, by question id: what its comparisons are paired on."""
    return {name: {r["id"]: 100.0 * r[score] for r in rows} for name, rows in records.items()}


def compared(folder: Path, baseline: str) -> dict[str, dict[str, Any]]:
    """Each run in ``folder`` by name: its params, its scores re-derived from its records
    (``evaluate.record_scores``), its questions per minute (the manifest's, a timing), its EM against the run
    named ``baseline``, paired over question ids, from the folder's planned family (``ci``: ``plan.compared``;
    None for the baseline), and the floors of its method its records fall below (``floors.shortfalls``)."""
    manifest, records = load(folder)
    if baseline not in records:
        raise KeyError(f"{folder}: no run named {baseline!r}; its runs: {', '.join(records)}")
    return {
        name: {
            "params": manifest["runs"][name]["params"],
            "scores": record_scores(records[name]),
            "questions_per_minute": manifest["runs"][name]["metrics"]["questions_per_minute"],
            "ci": None if name == baseline else plan.compared(folder, name, baseline),
            "shortfalls": floors.shortfalls(manifest["runs"][name]["params"], records[name]),
        }
        for name in ordered(manifest["runs"])
    }


def table(folder: Path, baseline: str) -> str:
    """The markdown table of the runs in ``folder`` against the run named ``baseline``, every number but questions
    per minute re-derived from the records (``compared``), and under it the family its stars come from; a compiled
    run below a floor of its method is marked ``†`` and its shortfall said under the table."""
    lines = [
        "| method | optimizer | EM | dEM [95% CI] | F1 | Acc | retrieval recall | LM calls / q | effective context / q "
        "| q / min |",
        "|---|---|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    below = []
    for name, run in compared(folder, baseline).items():
        scores, params = run["scores"], run["params"]
        recall = "" if scores["retrieval_recall"] is None else f"{scores['retrieval_recall']:.1f}"
        if run["shortfalls"]:
            below.append(f"{name}: {floors.describe(run['shortfalls'])}")
        optimizer = params["optimizer"] + (" †" if run["shortfalls"] else "")
        cells = [row_of(params), optimizer, f"{scores['em']:.1f}", format_ci(run["ci"], name == baseline),
                 f"{scores['f1']:.1f}", f"{scores['acc']:.1f}", recall, f"{scores['lm_calls_per_question']:.2f}",
                 f"{scores[EFFECTIVE_CONTEXT]:,.0f}", f"{run['questions_per_minute']:.1f}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n`*`: {plan.caption(folder)}." + _floor_note(below)


def _floor_note(below: list[str]) -> str:
    """The note under a table on its runs marked ``†`` (``below``: each with its shortfall), if any."""
    return f"\n\n`†`: {FLOOR_NOTE} ({'; '.join(below)})." if below else ""


def plan_table(folder: Path, baseline: str) -> list[tuple[str, str]]:
    """Add to ``folder``'s plan (``plan.py``; made where it has none) each of its runs against ``baseline`` that it
    lacks, the comparisons of the folder's table, and write it; the comparisons added. Publishing a table does this,
    so that a sitting's new rows enter the family with the table they join."""
    pairs = plan.planned(folder) if (folder / plan.PLAN).is_file() else []
    named = {frozenset(pair) for pair in pairs}
    added = [(name, baseline) for name in ordered(load_manifest(folder)["runs"]) if name != baseline]
    added = [pair for pair in added if frozenset(pair) not in named]
    plan.write(folder, [*pairs, *added])
    return added


def compiled_table(folder: Path, against: str = "none") -> str:
    """Each method's runs in ``folder`` against its run under the optimizer ``against`` (by default its uncompiled
    run), paired over question ids: EM from the folder's planned family (``plan.compared``), and F1 beside it,
    adjusted as its own and never marked; a run below a floor of its method is marked ``†`` as in ``table``."""
    manifest, records = load(folder)
    params = {name: run["params"] for name, run in manifest["runs"].items()}
    pairs = [
        (name, f"{row_of(params[name])}-{against}")
        for name in ordered(manifest["runs"])
        if params[name]["optimizer"] != against and f"{row_of(params[name])}-{against}" in records
    ]
    f1 = points_by_run(records, "f1")
    f1_cis = family.adjust([paired_bootstrap(f1[a], f1[b]) for a, b in pairs])
    lines = ["| method | optimizer | dEM [95% CI] | dF1 [95% CI] |", "|---|---|---|---|"]
    below = []
    for (name, base), f1_ci in zip(pairs, f1_cis, strict=True):
        if found := floors.shortfalls(params[name], records[name]):
            below.append(f"{name}: {floors.describe(found)}")
        optimizer = params[name]["optimizer"] + (" †" if found else "")
        lines.append(f"| {row_of(params[name])} | {optimizer} | "
                     f"{format_ci(plan.compared(folder, name, base))} | {format_ci(f1_ci, mark=False)} |")  # fmt: skip
    return "\n".join(lines) + f"\n\n`*`: {plan.caption(folder)}." + _floor_note(below)
