"""Multi-hop QA loaders: JSONL in the shared schema -> ``dspy.Example`` through Hugging Face ``datasets``.

Schema (``../shared/datasets/README.md``): one JSON object per line with ``id`` (str), ``question`` (str),
``answers`` (list[str], gold first, then aliases), ``paragraphs`` (list of ``{title, text, is_supporting}``),
``supporting_titles`` (list[str]), ``type`` (str) and optionally ``decomposition`` (list or null). Every line
is validated with ``json`` first, so a malformed file fails with a ``DatasetError`` naming the file, the line and
the field; only then is the file read with ``datasets.load_dataset("json", ...)``.

The caller owns the environment: set ``HF_DATASETS_OFFLINE=1`` (and ``HF_HUB_OFFLINE=1``) for offline runs, or
``load_dataset`` of a local file still makes one request.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

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


def validate_record(record: Any) -> tuple[str, str] | None:
    """``None`` when ``record`` follows the schema, else ``(field, problem)`` for the first bad field."""
    if not isinstance(record, Mapping):
        return "<record>", f"expected a JSON object, got {type(record).__name__}"
    for field in ("id", "question", "type"):
        if field not in record:
            return field, "missing field"
        if not isinstance(record[field], str):
            return field, f"expected a string, got {type(record[field]).__name__}"
    if not record["question"].strip():
        return "question", "empty question"
    for field in ("answers", "supporting_titles"):
        if field not in record:
            return field, "missing field"
        if not _is_str_list(record[field]):
            return field, f"expected a list of strings, got {json.dumps(record[field])[:80]}"
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
                return f"{name}.{key}", f"expected {kind.__name__}, got {type(paragraph[key]).__name__}"
    decomposition = record.get("decomposition")
    if decomposition is not None and not isinstance(decomposition, list):
        return "decomposition", f"expected a list or null, got {type(decomposition).__name__}"
    return None


def validate_jsonl(path: str | Path) -> int:
    """Check every line of a JSONL file against the schema; returns the number of records.

    Raises ``DatasetError`` naming the file, the 1-based line and the field. Blank lines are skipped.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError("no such file", path=path)
    count = 0
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
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
            count += 1
    if count == 0:
        raise DatasetError("no records", path=path)
    return count


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
    from datasets import load_dataset

    rows = load_dataset(
        "json",
        data_files=str(Path(path).resolve()),
        split="train",
        cache_dir=str(cache_dir) if cache_dir is not None else None,
    )
    return _examples(rows, str(path))


def load_hub(name: str, split: str, **kwargs: Any) -> list[Any]:
    """Load a Hugging Face hub dataset whose rows follow the shared schema (needs a reachable hub).

    ``kwargs`` go to ``datasets.load_dataset``; rows are validated as records (line = row number, 1-based).
    """
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
