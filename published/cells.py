"""A folder of a methods benchmark's cells read back (``benchmarks/cells.py``: one JSON a cell, its run's summary and
each question's EM, F1 and Acc, no answers), in their table's order: what ``benchmarks/publish.py --cells``
publishes."""

from __future__ import annotations

import json
from pathlib import Path


def load(folder: Path) -> dict[str, dict]:
    """The cells by name (``<row>-<optimizer>``), in their table's order (each method as registered, uncompiled
    first, then the oracle rows), each cell's EM, F1, Acc and n made again from its per-question scores."""
    from ragscale.published.runs import table_order

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
    return {name: cells[name] for name in table_order({n: (c["row"], c["optimizer"]) for n, c in cells.items()})}
