"""The corpus a run retrieves from, named by ``--corpus``, with the digest that names its index.

A run retrieves from one of:

- a dataset name (``hotpotqa``, ...): every paragraph of every split of that dataset under the data folder,
  deduplicated by title + text; the same passages whatever ``--limit`` or ``--train-limit`` a run uses, so two runs
  of a dataset meet the same distractors. This is the default: the run's own dataset;
- ``all``: every dataset under the data folder, pooled and deduplicated;
- ``questions``: the paragraphs of the run's own questions only (the distractor setting: every gold paragraph is
  there, and the pool changes with the questions a run takes);
- a JSONL file, read as a stream, one passage a line, in FlashRAG's format (``{"id", "contents"}``, the title on
  the first line of ``contents``, in double quotes as FlashRAG's Wikipedia has it, the text after it) or in
  ragscale's (``{"id", "title", "text"}``).

Passages of a dataset corpus get ``passage_id(title, text)`` as id; a file's passages keep the file's ids.
Paragraphs of an evaluation file are added to any corpus (``with_paragraphs``), skipped where the corpus already
holds the same title and text.

``sha256`` is the SHA-256 over every passage's id, title and text in corpus order: the name of the corpus in a run's
summary, its MLflow params and its key, and (its first 16 hex digits) of the indexes built over it. A broken file
raises ``CorpusError`` naming the file and the line before anything is built.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragscale.data.corpus import build_corpus, passage_id
from ragscale.data.datasets import DATASETS, SPLITS, DatasetError, read_jsonl, special_file, type_found

POOLED = "all"
QUESTIONS = "questions"
CORPORA = (*DATASETS, POOLED, QUESTIONS)
"""The corpus names ``--corpus`` takes besides a JSONL file's path."""


class CorpusError(DatasetError):
    """A corpus that cannot be read or is empty; the message names the file and the line."""


@dataclass(frozen=True)
class CorpusIdentity:
    """Which corpus a run searched: its name (a dataset's, ``all``, ``questions`` or a file's absolute path), its
    passages and its sha256. The run's key, params, tags and summary name their corpus by it."""

    name: str
    passages: int
    sha256: str


@dataclass
class Corpus:
    """Passages ``{"id", "title", "text"}`` in corpus order, with the name they were asked by and their digest."""

    name: str
    passages: list[dict]
    _digest: Any = field(default_factory=hashlib.sha256, repr=False)
    _contents: set[str] = field(default_factory=set, repr=False)

    def add(self, pid: str, title: str, text: str) -> bool:
        """Append a passage unless one with the same title and text is there; True when it was added."""
        if passage_id(title, text) in self._contents:
            return False
        self.append(pid, title, text)
        return True

    def append(self, pid: str, title: str, text: str) -> None:
        """Append a passage as it is (a corpus file's passages are kept even when two share a text)."""
        self._contents.add(passage_id(title, text))
        self.passages.append({"id": pid, "title": title, "text": text})
        for part in (pid, title, text):
            self._digest.update(part.encode("utf-8") + b"\0")

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()

    @property
    def key(self) -> str:
        """The short digest that names the indexes built over this corpus."""
        return self.sha256[:16]

    @property
    def identity(self) -> CorpusIdentity:
        """Which corpus this is, as a run names it (``CorpusIdentity``)."""
        return CorpusIdentity(self.name, len(self.passages), self.sha256)

    def with_paragraphs(self, examples: Iterable[Any]) -> Corpus:
        """This corpus plus the paragraphs of ``examples`` it does not hold yet (an evaluation file's own)."""
        grown = Corpus(self.name, list(self.passages), self._digest.copy(), set(self._contents))
        added = sum(grown.add(p["id"], p["title"], p["text"]) for p in build_corpus(examples))
        if added:
            grown.name = f"{self.name}+{added}"
        return grown

    def __len__(self) -> int:
        return len(self.passages)


def from_examples(name: str, examples: Iterable[Any]) -> Corpus:
    """The deduplicated union of ``examples``' paragraphs (``build_corpus``), in first-seen order."""
    corpus = Corpus(name, [])
    for passage in build_corpus(examples):
        corpus.append(passage["id"], passage["title"], passage["text"])
    return corpus


def is_corpus_file(name: str) -> bool:
    """Whether ``--corpus name`` names a file rather than one of ``CORPORA``."""
    return name not in CORPORA


def corpus_name(name: str) -> str:
    """``--corpus name`` as runs record it: one of ``CORPORA`` as it is, a file as its absolute path."""
    return str(Path(name).expanduser().resolve()) if is_corpus_file(name) else name


def load_corpus(name: str, data_dir: Path, *, questions: Iterable[Any] = ()) -> Corpus:
    """The corpus ``name`` (one of ``CORPORA`` or a JSONL path; see the module docstring).

    ``questions`` are the run's own questions, read only for ``questions``. Dataset files are read with
    ``read_jsonl`` (every line checked); a dataset folder without a split file contributes the splits it has.
    Each call reads the files: a caller that needs the corpus again hands on the one it loaded.
    """
    if name == QUESTIONS:
        corpus = from_examples(QUESTIONS, questions)
        if not corpus.passages:
            raise CorpusError("--corpus questions: the corpus is empty (the run's questions have no paragraphs)")
        return corpus
    files = [Path(name)] if is_corpus_file(name) else _split_files(name, Path(data_dir))
    return _read(name, files, Path(data_dir))


def _split_files(name: str, data_dir: Path) -> list[Path]:
    datasets = DATASETS if name == POOLED else (name,)
    return [data_dir / d / f"{s}.jsonl" for d in datasets for s in SPLITS]


def _read(name: str, files: list[Path], data_dir: Path) -> Corpus:
    """A dataset corpus from its split ``files``, or a corpus file."""
    if name in CORPORA:
        present = [path for path in files if path.is_file()]
        if not present:
            raise CorpusError(f"--corpus {name}: no split file ({', '.join(map(str, files))}) under {data_dir}")
        corpus = from_examples(name, (record for path in present for record in read_jsonl(path)))
    else:
        corpus = read_corpus_file(name)
    if not corpus.passages:
        raise CorpusError(
            f"--corpus {name}: the corpus is empty (its questions carry no paragraphs); a method that retrieves needs "
            f"passages: give another --corpus, or use the closed-book method"
        )
    return corpus


def read_corpus_file(path: str | Path) -> Corpus:
    """A JSONL corpus file, line by line (FlashRAG's ``{"id", "contents"}`` or ``{"id", "title", "text"}``).

    Raises ``CorpusError`` naming the file and line for a missing file, a FIFO or device (``special_file``), bytes
    that are not UTF-8, a line that is not a JSON object, a field missing, empty or not a string (naming the type
    found), an id seen on an earlier line, and a file with no passage.
    """
    path = Path(path)
    if path.is_dir():
        raise CorpusError("is a directory, not a JSONL corpus", path=path)
    special = special_file(path)
    if special is not None:
        raise CorpusError(f"--corpus {path} is {special}, not a regular file")
    if not path.is_file():
        raise CorpusError(f"no such file (--corpus takes a JSONL file or one of {', '.join(CORPORA)})", path=path)
    corpus = Corpus(str(path), [])
    first_line: dict[str, int] = {}
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                pid, title, text = _passage_of(raw, path, number)
                if pid in first_line:
                    raise CorpusError(
                        f"id {pid!r} is repeated (first on line {first_line[pid]})", path=path, line=number, field="id"
                    )
                first_line[pid] = number
                corpus.append(pid, title, text)
    except OSError as error:
        raise CorpusError(f"cannot be read: {error.strerror or error}", path=path) from error
    if not corpus.passages:
        raise CorpusError("no passage in the file", path=path)
    return corpus


def _passage_of(raw: bytes, path: Path, number: int) -> tuple[str, str, str]:
    """(id, title, text) of one line of a corpus file, or ``CorpusError`` naming what is wrong with it."""
    try:
        line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as error:
        raise CorpusError(f"not UTF-8 text (byte {error.start} of the line)", path=path, line=number) from error
    if "\0" in line:
        raise CorpusError("binary content (a NUL byte): a corpus is UTF-8 JSONL", path=path, line=number)
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise CorpusError(f"invalid JSON ({error.msg} at column {error.colno})", path=path, line=number) from error
    if not isinstance(record, dict):
        raise CorpusError(f"expected a JSON object, got {type(record).__name__}", path=path, line=number)
    pid = record.get("id")
    if isinstance(pid, int) and not isinstance(pid, bool):
        pid = str(pid)
    if not isinstance(pid, str) or not pid:
        found = repr(pid) if isinstance(pid, str) else type_found(pid)
        raise CorpusError(f"field 'id': expected a non-empty string, got {found}", path=path, line=number, field="id")
    if "contents" in record:
        contents = record["contents"]
        if not isinstance(contents, str):
            raise CorpusError(
                f"field 'contents': expected a string, got {type_found(contents)}", path=path, line=number,
                field="contents",
            )  # fmt: skip
        if not contents.strip():
            raise CorpusError("field 'contents' is empty", path=path, line=number, field="contents")
        title, _, text = contents.partition("\n")
        title = title.strip()
        if len(title) >= 2 and title[0] == title[-1] == '"':
            title = title[1:-1]
        if not text.strip():  # one line only: no title line, all of it is text
            title, text = "", contents
    elif "text" in record:
        title, text = record.get("title", ""), record["text"]
        for key, value in (("title", title), ("text", text)):
            if not isinstance(value, str):
                raise CorpusError(
                    f"field {key!r}: expected a string, got {type_found(value)}", path=path, line=number, field=key
                )
        if not text.strip():
            raise CorpusError("field 'text' is empty", path=path, line=number, field="text")
    else:
        raise CorpusError(
            "no 'contents' (FlashRAG's format) and no 'text' (ragscale's {id, title, text})", path=path, line=number
        )
    return pid, title.strip(), text.strip()
