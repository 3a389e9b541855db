"""Files an experiment writes: whole or not at all, and names safe for a file system.

A JSON or JSONL file (plain or gzip-compressed) is written to a temporary file beside it (named with the process id, so
two processes never share one) and moved over the target in one rename: a reader, or a run that crashed half-way, sees
the old file or the new one, never a part; a write that fails (a full disk) removes its temporary file and raises the
``OSError`` naming the target. ``disk_error`` finds, in any error, the full disk, quota or read-only file system that
caused it, which the command line reports in one line. ``slug`` turns an LM name or path into a short file-name-safe
label. ``exclusive`` holds a lock file while processes that share a runs directory must take turns (creating the MLflow
store, building an index).
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import io
import json
import os
import re
import sqlite3
import textwrap
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
"""What a file system refuses a write with when it, not the program, is at fault: full, over quota, read-only."""

SQLITE_DISK_ERRORS = {sqlite3.SQLITE_FULL: errno.ENOSPC, sqlite3.SQLITE_READONLY: errno.EROFS}
"""SQLite's result codes for a full disk (SQLITE_FULL) and a read-only database (SQLITE_READONLY), as errnos."""


def disk_error(exc: BaseException | None) -> OSError | None:
    """The first error of a full disk, a quota or a read-only file system (``DISK_ERRNOS``) that ``exc`` is or was
    caused by (its ``__cause__`` and ``__context__`` followed), else None. SQLite's own full and read-only errors
    count: MLflow's store raises them, wrapped, naming no file."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
            return exc
        code = getattr(exc, "sqlite_errorcode", None) if isinstance(exc, sqlite3.Error) else None
        number = SQLITE_DISK_ERRORS.get(code & 0xFF) if code is not None else None  # an extended code's primary one
        if number is not None:
            return OSError(number, os.strerror(number))
        exc = exc.__cause__ or exc.__context__
    return None


def unnamed_disk_error(exc: BaseException, where: Path | str | None) -> OSError | None:
    """``exc``'s ``disk_error`` when it names no file, as an OSError naming ``where`` (where the failed write went:
    a store, a run's folder); None when ``exc`` is no disk error or its error names its file."""
    found = disk_error(exc)
    return None if found is None or found.filename else OSError(found.errno, found.strerror, str(where))


def one_line(exc: BaseException) -> str:
    """``exc`` in one line: a full disk, a quota or a read-only file system as its reason and the path it names
    (``disk_error``), else the first line of the error's message (MLflow's add the SQL on the lines after)."""
    found = disk_error(exc)
    if found is not None:
        return f"{found.strerror}: {found.filename}" if found.filename else str(found.strerror)
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def in_one_line(text: str, width: int = 300) -> str:
    """``text`` on one line of at most ``width`` characters: a server's error may carry its whole HTML page, which a
    question's record keeps and a log line or a run's one-line failure does not."""
    return textwrap.shorten(" ".join(text.split()), width, placeholder=" ...")


def _replace(path: Path, data: str | bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with writing(path):
            partial.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        partial.replace(path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


@contextmanager
def writing(path: Path | None) -> Iterator[None]:
    """A block that writes ``path``: a full or read-only disk it meets that names no file (a write cut short names
    none, and a library may wrap it in an error of its own) is raised as the OSError naming ``path``."""
    try:
        yield
    except Exception as exc:
        named = unnamed_disk_error(exc, path)
        if named is None:
            raise
        raise named from exc


def write_text(path: Path, text: str) -> None:
    """``text`` (UTF-8), written atomically."""
    _replace(path, text)


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
