"""An index's manifest: what an index folder held when it was last whole, so that a broken index is found on open.

``manifest.json`` in the index's folder records the index's format, its passage count and, per file, its size and
a SHA-256 of its content (streamed, so a file of gigabytes is hashed in seconds: a small part of what building it
took). It is written last, to a temporary file renamed over it, so a folder without a manifest is an index whose
writing never finished. ``check`` compares a folder with its manifest and raises ``BrokenIndexError`` saying what
differs; the retrievers then rebuild the index with one warning.

A file whose bytes its library rewrites when it only reads the index is recorded by what stays fixed instead:
``measure`` is the retriever's own (chromadb's store, in ``dense.py``, is such a case).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"

Measure = Callable[[Path], dict[str, Any]]
"""What is recorded of one file: ``{"size": bytes or None, "sha256": hex digest or None}``."""


class BrokenIndexError(Exception):
    """An index folder that differs from its manifest, or has none; the message says what is wrong."""


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in chunks."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def whole_file(path: Path) -> dict[str, Any]:
    """A file recorded by its size and the SHA-256 of its bytes."""
    return {"size": path.stat().st_size, "sha256": sha256_of(path)}


@contextmanager
def cleaned_up(partial: Path, target: Path) -> Iterator[None]:
    """Remove ``partial`` (a file or folder being written for ``target``) when the block fails; an ``OSError``
    without a file name (a full disk, say) is raised again naming ``target``."""
    try:
        yield
    except BaseException as error:
        remove(partial)
        if isinstance(error, OSError) and error.filename is None:
            raise OSError(error.errno, error.strerror or str(error), str(target)) from error
        raise


def remove(path: Path) -> None:
    """Delete a file or a folder tree, if there is one."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def write(folder: Path, *, format: str, passages: int, files: Iterable[str], measure: Measure = whole_file) -> None:
    """Record ``files`` (names relative to ``folder``) in ``folder/manifest.json``, written whole or not at all."""
    record = {"format": format, "passages": passages, "files": {name: measure(folder / name) for name in files}}
    target = folder / MANIFEST
    partial = folder / f"{MANIFEST}.{os.getpid()}.tmp"
    with cleaned_up(partial, target):
        partial.write_text(json.dumps(record, indent=1), encoding="utf-8")
        partial.replace(target)


def check(folder: Path, *, format: str, passages: int | None = None, measure: Measure = whole_file) -> dict[str, Any]:
    """``folder``'s manifest when every file it records is there as recorded (and it records ``passages``, when
    given); else ``BrokenIndexError``."""
    path = folder / MANIFEST
    if not path.is_file():
        raise BrokenIndexError(f"it has no {MANIFEST} (its writing did not finish, or an older ragscale wrote it)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        recorded, count = manifest["files"], manifest["passages"]
    except (ValueError, KeyError, TypeError) as error:
        raise BrokenIndexError(f"its {MANIFEST} cannot be read ({error})") from None
    if manifest.get("format") != format or not isinstance(count, int) or not isinstance(recorded, dict):
        raise BrokenIndexError(f"its {MANIFEST} is not one of format {format}")
    if passages is not None and count != passages:
        raise BrokenIndexError(f"it holds {count} passages, the corpus {passages}")
    for name, expected in recorded.items():
        if not isinstance(expected, dict):
            raise BrokenIndexError(f"its {MANIFEST} records {name} as {expected!r}")
        if not (folder / name).is_file():
            raise BrokenIndexError(f"{name} is missing")
        found = measure(folder / name)
        if found["size"] != expected.get("size"):
            raise BrokenIndexError(f"{name} holds {found['size']} bytes, the manifest says {expected.get('size')}")
        if found["sha256"] != expected.get("sha256"):
            raise BrokenIndexError(f"{name} differs from its checksum in the manifest")
    return manifest
