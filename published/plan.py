"""The comparisons planned on a published folder: one family, so that each comparison has one verdict everywhere.

A published folder of runs (``runs.py``) holds ``plan.json``: the paired comparisons of its runs that any page may
test, each ``[a, b]`` (a - b, per-question EM), kept with the runs so that no page grows or shrinks the family, and,
for runs planned before they were made, ``settings``: the commands that make them, every setting on their line. They
are one family: their exact p-values (``paired.sign_flip_p``) are adjusted together by Holm's rule
(``family.adjust``) once, and every table, claim and sentence that shows one of them (``runs.table``,
``runs.compiled_table``, ``core_claims``, ``diff``) reads it from here. A comparison thus sits in exactly one
family, and its verdict is the same on every page that cites it. One a page asks for that the plan does not name
is an error: a family grown by what a page happens to show would make its verdicts depend on the page.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from ragscale.experiments import family
from ragscale.experiments.paired import paired_bootstrap

PLAN = "plan.json"


def write(folder: Path, pairs: list[tuple[str, str]]) -> None:
    """Write ``pairs`` as ``folder``'s plan, one comparison a line, keeping what else the plan fixes (``settings``:
    the commands its runs are made by, written before they run)."""
    path = folder / PLAN
    kept = (
        {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if k != "comparisons"}
        if path.is_file()
        else {}
    )
    body = ",\n".join("  " + json.dumps(list(pair)) for pair in pairs)
    extra = "".join(f",\n{json.dumps(key)}: {json.dumps(value, indent=2)}" for key, value in kept.items())
    path.write_text('{"comparisons": [\n' + body + "\n]" + extra + "}\n", encoding="utf-8")
    adjusted.cache_clear()


def planned(folder: Path) -> list[tuple[str, str]]:
    """The comparisons ``(a, b)`` of ``folder``'s plan, in its order; an error names a missing or malformed plan, a
    comparison of a run the folder lacks, and one named twice (either way round)."""
    from ragscale.experiments.sweep.adopt import MANIFEST  # the records' module loads DSPy

    path = folder / PLAN
    if not path.is_file():
        raise ValueError(f"{folder.name}: no {PLAN}: a published folder names the comparisons its pages test")
    pairs = [tuple(pair) for pair in json.loads(path.read_text(encoding="utf-8"))["comparisons"]]
    runs = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["runs"]
    seen: set[frozenset] = set()
    for pair in pairs:
        if len(pair) != 2 or pair[0] == pair[1]:
            raise ValueError(f"{path}: {list(pair)} is not a comparison of two runs")
        missing = [name for name in pair if name not in runs]
        if missing:
            raise ValueError(f"{path}: {list(pair)} names {', '.join(missing)}; its runs: {', '.join(runs)}")
        if frozenset(pair) in seen:
            raise ValueError(f"{path}: {list(pair)} is named twice")
        seen.add(frozenset(pair))
    return pairs


@cache
def adjusted(folder: Path) -> dict[tuple[str, str], Any]:
    """Each planned comparison of ``folder``: its ``paired.BootstrapCI`` on per-question EM, adjusted with the plan's
    others (the family), by ``(a, b)``."""
    from ragscale.experiments.sweep.adopt import read_records

    pairs = planned(folder)
    em = {
        name: {r["id"]: 100.0 * r["em"] for r in read_records(folder / f"{name}.jsonl.gz")}
        for name in {*sum(pairs, ())}
    }
    cis = family.adjust([paired_bootstrap(em[a], em[b]) for a, b in pairs])
    return dict(zip(pairs, cis, strict=True))


def compared(folder: Path, a: str, b: str) -> Any:
    """The planned comparison a - b of ``folder`` (``adjusted``; the plan's b - a turned round), None where the runs
    share no question; an error where the plan does not name it."""
    family_of = adjusted(folder)
    if (a, b) in family_of:
        return family_of[(a, b)]
    if (b, a) in family_of:
        ci = family_of[(b, a)]
        return None if ci is None else replace(ci, diff=0.0 - ci.diff, low=0.0 - ci.high, high=0.0 - ci.low)  # no -0.0
    raise ValueError(
        f"{folder.name}: {a} - {b} is not in its {PLAN}, so it has no family; its comparisons: "
        + ", ".join(f"{x} - {y}" for x, y in family_of)
    )


def caption(folder: Path) -> str:
    """How a table names the family its stars come from."""
    return f"{family.RULE}; the family: the {len(planned(folder))} comparisons planned on `{folder.name}` ({PLAN})"
