"""A published sweep taken up by a sweep on a fresh machine (``ragscale sweep --adopt FOLDER``): its rows count as
finished there, with the programs they were compiled with, so only what is not published yet runs.

A published folder (``benchmarks/results/<name>/``, written by ``ragscale.published``) holds a ``manifest.json`` and
each row's per-question records as ``<name>.jsonl.gz``; a sweep's manifest names its grid and its rows (``rows``,
``oracle``), each with its ledger key and run. This module is what the runtime reads of that format (``MANIFEST``,
``read_records``, ``manifest_of``), and ``adopt``: each row's records written where the sweep reads a run's, its row
in the ledger. Writing a folder, and making its tables again, is ``ragscale.published``'s, which reads the format from
here.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

from ragscale.experiments.config import ConfigError
from ragscale.experiments.evaluate import PREDICTIONS
from ragscale.experiments.files import write_jsonl
from ragscale.experiments.sweep.ledger import COMPILED, load_ledger, save_ledger

MANIFEST = "manifest.json"
"""A published folder's manifest: the command, the machine and commit, and each row or run as it ran."""
PUBLISHED_FIELDS = ("made", "command", "replaces")
"""What publishing adds to a row: where and by which command it was made, and the row it replaced, if any."""
POINT_FIELDS = ("method", "docs", "shots", "iterations", "key", "status", *PUBLISHED_FIELDS)
"""A published row's fields that are not the ledger's: where it sits in the grid, and how it was published."""


def read_records(path: Path) -> list[dict]:
    """A published row's per-question records (``<name>.jsonl.gz``: one JSON object a line, gzip-compressed)."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def manifest_of(folder: Path) -> dict[str, Any]:
    """A published sweep's manifest; a folder without one, or with another benchmark's, fails naming it."""
    path = folder / MANIFEST
    if not path.exists():
        raise ConfigError(f"{path}: not found; publish a sweep there with benchmarks/publish.py --sweep")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if "grid" not in manifest or "rows" not in manifest:
        raise ConfigError(f"{path}: not a published sweep's manifest (it has no grid and rows)")
    return manifest


def adopt(folder: Path, sweep_dir: Path, runs_dir: Path) -> int:
    """Give the sweep whose folder is ``sweep_dir`` the published rows of ``folder`` its ledger lacks: each row's
    records where the sweep reads a run's (``<runs_dir>/work/<run id>``) and its row in the ledger, under its key, so
    the sweep counts it as finished, calibrates its estimates on it and reports it. Returns how many it adopted."""
    manifest, ledger, adopted = manifest_of(folder), load_ledger(sweep_dir), 0
    for part in ("rows", "oracle"):
        for name, values in manifest[part].items():
            if values["key"] in ledger:
                continue
            work = Path(runs_dir) / "work" / values["run_id"]
            work.mkdir(parents=True, exist_ok=True)
            write_jsonl(work / PREDICTIONS, read_records(folder / f"{name}.jsonl.gz"))
            ledger[values["key"]] = {k: v for k, v in values.items() if k not in POINT_FIELDS}
            adopted += 1
    if adopted:
        Path(sweep_dir).mkdir(parents=True, exist_ok=True)
        save_ledger(sweep_dir, ledger)
    copy_compiled(folder, Path(sweep_dir))
    return adopted


def copy_compiled(source: Path, target: Path) -> None:
    """The programs the sweep compiled (``ledger.COMPILED``: JSON, each named by its settings' key) that ``target``
    lacks, copied from ``source``: the demonstrations every row of a method and shot count was run with."""
    for program in sorted((source / COMPILED).glob("*.json")):
        if not (target / COMPILED / program.name).exists():
            (target / COMPILED).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(program, target / COMPILED / program.name)
