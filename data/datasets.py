"""Multi-hop QA loaders: JSONL in the shared schema -> ``dspy.Example`` through Hugging Face ``datasets``.

Schema (``../shared/datasets/README.md``): one JSON object per line with ``id`` (str), ``question`` (str),
``answers`` (list[str], gold first, then aliases), ``paragraphs`` (list of ``{title, text, is_supporting}``),
``supporting_titles`` (list[str]), ``type`` (str) and optionally ``decomposition`` (list or null); question ids are
unique within a file. Every line is validated with ``json`` first (``read_jsonl``), so a malformed file fails with a
``DatasetError`` naming the file, the line and the field; only then is the file read with
``datasets.load_dataset("json", ...)``.

``datasets`` is imported after ``ragscale.process.go_offline()``, which sets ``HF_DATASETS_OFFLINE=1`` and
``HF_HUB_OFFLINE=1`` unless they are set: without them ``load_dataset`` of a local file still makes one request.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ragscale.process import go_offline

DATASETS = ("hotpotqa", "musique", "2wikimultihopqa", "nq", "bamboogle")
SPLITS = ("train", "dev")


class DatasetError(ValueError):
    """A dataset file or record that does not follow the schema; the message names file, line and field."""

    def __init__(
        self, message: str, *, path: str | Path | None = None, line: int | None = None, field: str | None = None
    ) -> None:
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f", line {line}"
            where += ": "
        super().__init__(where + message)
        self.path = path
        self.line = line
        self.field = field


def default_data_dir() -> Path:
    """``$RAGSCALE_DATA_DIR``, else ``<repo>/../shared/datasets``."""
    env = os.environ.get("RAGSCALE_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "datasets"


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def type_found(value: Any) -> str:
    """The JSON type of ``value`` as a message names it: ``list``, ``int``, ``null``; a list with items that are not
    strings also names theirs (``list of int, null``)."""
    if value is None:
        return "null"
    if isinstance(value, list):
        items = sorted({type_found(item) for item in value if not isinstance(item, str)})
        return f"list of {', '.join(items)}" if items else "list"
    return type(value).__name__


SPECIAL_FILES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def special_file(path: Path) -> str | None:
    """What ``path`` is when it exists but is neither a regular file nor a folder (``"a FIFO"``, ``"a socket"``,
    ...), else None. A data file must be a regular file: a FIFO gives its bytes once, to one reader, and a file is
    read more than once (checked before the model loads, then read)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    return next((kind for test, kind in SPECIAL_FILES if test(mode)), None)


def validate_record(record: Any) -> tuple[str, str] | None:
    """``None`` when ``record`` follows the schema, else ``(field, problem)`` for the first bad field."""
    if not isinstance(record, Mapping):
        return "<record>", f"expected a JSON object, got {type(record).__name__}"
    for field in ("id", "question", "type"):
        if field not in record:
            return field, "missing field"
        if not isinstance(record[field], str):
            return field, f"expected a string, got {type_found(record[field])}"
    if not record["question"].strip():
        return "question", "empty question"
    for field in ("answers", "supporting_titles"):
        if field not in record:
            return field, "missing field"
        if not _is_str_list(record[field]):
            return field, f"expected a list of strings, got {type_found(record[field])}"
    if not record["answers"]:
        return "answers", "expected at least one answer"
    if "paragraphs" not in record:
        return "paragraphs", "missing field"
    if not isinstance(record["paragraphs"], list):
        return "paragraphs", f"expected a list, got {type(record['paragraphs']).__name__}"
    for index, paragraph in enumerate(record["paragraphs"]):
        name = f"paragraphs[{index}]"
        if not isinstance(paragraph, Mapping):
            return name, f"expected an object, got {type(paragraph).__name__}"
        for key, kind in (("title", str), ("text", str), ("is_supporting", bool)):
            if key not in paragraph:
                return f"{name}.{key}", "missing field"
            if not isinstance(paragraph[key], kind):
                return f"{name}.{key}", f"expected {kind.__name__}, got {type_found(paragraph[key])}"
    decomposition = record.get("decomposition")
    if decomposition is not None and not isinstance(decomposition, list):
        return "decomposition", f"expected a list or null, got {type(decomposition).__name__}"
    return None


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a JSONL file in the shared schema, in file order, each checked with ``validate_record``.

    Raises ``DatasetError`` naming the file (and the 1-based line and the field where there is one) for a path that
    is missing or not a file, bytes that are not UTF-8 (a binary file), a line that is not JSON, a record that breaks
    the schema, a file without records, and question ids that occur more than once (all of them listed with their
    lines: a repeated question would be scored twice and its prediction files keyed twice). Blank lines are skipped.
    Lines are decoded one at a time, so the error names the line where the bytes go wrong.
    """
    path = Path(path)
    if path.is_dir():
        raise DatasetError("is a directory, not a JSONL file", path=path)
    special = special_file(path)
    if special is not None:
        raise DatasetError(f"is {special}, not a regular file", path=path)
    if not path.is_file():
        raise DatasetError("no such file", path=path)
    records: list[dict] = []
    lines_of: dict[str, list[int]] = {}
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as error:
                    raise DatasetError(
                        f"not UTF-8 text (byte {error.start} of the line): a JSONL file is UTF-8",
                        path=path,
                        line=number,
                    ) from error
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise DatasetError(
                        f"invalid JSON ({error.msg} at column {error.colno})", path=path, line=number
                    ) from error
                problem = validate_record(record)
                if problem is not None:
                    field, message = problem
                    raise DatasetError(f"field {field!r}: {message}", path=path, line=number, field=field)
                lines_of.setdefault(record["id"], []).append(number)
                records.append(record)
    except OSError as error:
        raise DatasetError(f"cannot be read: {error.strerror or error}", path=path) from error
    if not records:
        raise DatasetError("no records", path=path)
    repeated = {qid: lines for qid, lines in lines_of.items() if len(lines) > 1}
    if repeated:
        shown = "; ".join(
            f"{qid!r} on lines {', '.join(map(str, lines))}" for qid, lines in list(repeated.items())[:10]
        )
        more = f"; and {len(repeated) - 10} more" if len(repeated) > 10 else ""
        raise DatasetError(f"{len(repeated)} question id(s) occur more than once: {shown}{more}", path=path, field="id")
    return records


def validate_jsonl(path: str | Path) -> int:
    """Check a JSONL file as ``read_jsonl`` does; returns the number of records."""
    return len(read_jsonl(path))


def to_example(record: Mapping) -> Any:
    """A ``dspy.Example`` with the contract fields, ``question`` as its input."""
    import dspy

    return dspy.Example(
        id=record["id"],
        question=record["question"],
        answers=list(record["answers"]),
        supporting_titles=list(record["supporting_titles"]),
        paragraphs=[
            {"title": p["title"], "text": p["text"], "is_supporting": bool(p["is_supporting"])}
            for p in record["paragraphs"]
        ],
        type=record["type"],
        decomposition=record.get("decomposition"),
    ).with_inputs("question")


def _examples(rows: Iterable[Mapping], source: str) -> list[Any]:
    examples = []
    for number, row in enumerate(rows, start=1):
        problem = validate_record(row)
        if problem is not None:
            field, message = problem
            raise DatasetError(f"field {field!r}: {message}", path=source, line=number, field=field)
        examples.append(to_example(row))
    return examples


def load_jsonl(path: str | Path, *, cache_dir: str | Path | None = None) -> list[Any]:
    """Load a JSONL file in the shared schema as ``dspy.Example``s, in file order.

    The file is validated line by line (``DatasetError`` on the first bad line), then read with
    ``datasets.load_dataset("json", data_files=path, split="train")``; ``cache_dir`` is passed to it.
    """
    validate_jsonl(path)
    go_offline()
    from datasets import load_dataset

    rows = load_dataset(
        "json",
        data_files=str(Path(path).resolve()),
        split="train",
        cache_dir=str(cache_dir) if cache_dir is not None else None,
    )
    return _examples(rows, str(path))


def load_hub(name: str, split: str, **kwargs: Any) -> list[Any]:
    """Load a Hugging Face hub dataset whose rows follow the shared schema: it needs a reachable hub, and
    ``HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0`` in the environment before ragscale first uses ``datasets``
    (``ragscale.process.go_offline`` sets them to 1 otherwise).

    ``kwargs`` go to ``datasets.load_dataset``; rows are validated as records (line = row number, 1-based).
    """
    go_offline()
    from datasets import load_dataset

    rows = load_dataset(name, split=split, **kwargs)
    return _examples(rows, f"hf://{name}[{split}]")


def dataset_path(dataset: str, split: str, data_dir: Path | None = None) -> Path:
    """Where a bundled split lives: ``<data_dir>/<dataset>/<split>.jsonl``."""
    if dataset not in DATASETS:
        raise DatasetError(
            f"unknown dataset {dataset!r}; valid datasets: {', '.join(DATASETS)} "
            f"(or a JSONL path via load_jsonl, or a hub name 'owner/name')"
        )
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r} for {dataset}; valid splits: {', '.join(SPLITS)}")
    return Path(data_dir if data_dir is not None else default_data_dir()) / dataset / f"{split}.jsonl"


def load_split(
    dataset: str, split: str, data_dir: Path | None = None, *, cache_dir: str | Path | None = None
) -> list[Any]:
    """Load a bundled split (``DATASETS`` x ``SPLITS``) from ``data_dir`` (default ``default_data_dir()``).

    A name with a slash (``"owner/name"``) that is not a bundled dataset is loaded from the Hugging Face hub
    with ``load_hub`` (only when a hub is reachable and its rows follow the schema).
    """
    if dataset not in DATASETS and "/" in dataset:
        return load_hub(dataset, split, cache_dir=str(cache_dir) if cache_dir is not None else None)
    return load_jsonl(dataset_path(dataset, split, data_dir), cache_dir=cache_dir)
