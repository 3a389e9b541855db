"""A folder of a methods benchmark's cells read back (``benchmarks/cells.py``: one JSON a cell, its run's summary and
each question's EM, F1 and Acc, no answers): each cell's scores made again from its per-question scores, which
``benchmarks/publish.py --cells`` publishes, and the paired differences between cells, adjusted as one family, from
which ``pages.py`` writes a table of compiled runs against uncompiled ones."""

from __future__ import annotations

import json
from pathlib import Path


def load(folder: Path) -> dict[str, dict]:
    """The cells by name (``<row>-<optimizer>``), in their table's order (each method as registered, uncompiled
    first, then the oracle rows), each cell's EM, F1, Acc and n made again from its per-question scores."""
    from ragscale.programs import PROGRAMS

    cells = {}
    for path in sorted(folder.glob("*.json")):
        cell = json.loads(path.read_text(encoding="utf-8"))
        name, scores = f"{cell['row']}-{cell['optimizer']}", list(cell["scores"].values())
        if name in cells:
            raise ValueError(f"{folder.name}: two cells named {name!r}; a folder of cells holds one dataset's table")
        means = {k: round(100 * sum(s[k] for s in scores) / len(scores), 2) for k in ("em", "f1", "acc")}
        cells[name] = {**cell, **means, "n": len(scores)}
    if not cells:
        raise ValueError(f"{folder.name}: no cells (*.json)")
    order = list(PROGRAMS)

    def place(name: str) -> tuple:
        row = cells[name]["row"]
        return row not in order, order.index(row) if row in order else 0, cells[name]["optimizer"] != "none", name

    return {name: cells[name] for name in sorted(cells, key=place)}


def differences(cells: dict[str, dict], pairs: tuple[tuple[str, str], ...], score: str = "em") -> list:
    """``score`` of each pair of cells ``(a, b)``, a - b in points paired over their questions
    (``compare.paired_bootstrap``), adjusted as one family (``family.adjust``)."""
    from ragscale.experiments import family
    from ragscale.experiments.compare import paired_bootstrap

    def points(name: str) -> dict[str, float]:
        return {i: 100 * s[score] for i, s in cells[name]["scores"].items()}

    return family.adjust([paired_bootstrap(points(a), points(b)) for a, b in pairs])


def compiled_table(cells: dict[str, dict]) -> str:
    """Each method's compiled cells against its uncompiled one: EM, whose differences are one family, and F1, shown
    beside it."""
    from ragscale.experiments.compare import format_ci

    pairs = tuple(
        (name, f"{cell['row']}-none")
        for name, cell in cells.items()
        if cell["optimizer"] != "none" and f"{cell['row']}-none" in cells
    )
    lines = ["| method | optimizer | dEM [95% CI] | dF1 [95% CI] |", "|---|---|---|---|"]
    for (name, _), em, f1 in zip(pairs, differences(cells, pairs), differences(cells, pairs, "f1"), strict=True):
        cell = cells[name]
        lines.append(f"| {cell['row']} | {cell['optimizer']} | {format_ci(em)} | {format_ci(f1, mark=False)} |")
    return "\n".join(lines)
