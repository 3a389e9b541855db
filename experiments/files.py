"""Files an experiment writes: whole or not at all, and names safe for a file system.

A JSON or JSONL file (plain or gzip-compressed) is written to a temporary file beside it (named with the process
id, so two processes never share one) and moved over the target in one rename: a reader, or a run that crashed
half-way, sees the old file or the new one, never a part. ``slug`` turns an LM name or path into a short
file-name-safe label. ``exclusive`` holds a lock file while processes that share a runs directory must take turns
(creating the MLflow store, building an index).
"""

from __future__ import annotations

import fcntl
import gzip
import io
import json
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _replace(path: Path, data: str | bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    partial.replace(path)


def write_json(path: Path, value: Any, *, indent: int = 1) -> None:
    """``value`` as JSON (UTF-8, non-ASCII kept), written atomically."""
    _replace(path, json.dumps(value, indent=indent, ensure_ascii=False) + "\n")


def write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    """One JSON value per line, written atomically."""
    _replace(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def write_jsonl_gz(path: Path, rows: Iterable[Any]) -> None:
    """One JSON value per line, gzip-compressed with no timestamp (the same rows give the same bytes), written
    atomically: what a committed results folder holds."""
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    packed = io.BytesIO()
    with gzip.GzipFile(Path(path).name, "wb", fileobj=packed, mtime=0) as out:  # the header names the file
        out.write(text.encode("utf-8"))
    _replace(path, packed.getvalue())


def slug(text: str) -> str:
    """A file-name-safe short form of an LM name or path: its last path component, runs of other characters as
    one '-', at most 48 characters."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text.rstrip("/").rsplit("/", 1)[-1]).strip("-")[:48]


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if needed) for the block, waiting for another process (or
    thread) that holds it; released when the block ends or the process dies."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
