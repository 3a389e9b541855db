"""What ragscale runs on: multi-hop QA loaders, corpus building and documents read into chunks (``documents/``).
Cheap to import (no torch, no datasets)."""

from ragscale.data.corpus import build_corpus, passage_id
from ragscale.data.datasets import (
    DATASETS,
    SPLITS,
    DatasetError,
    dataset_path,
    default_data_dir,
    load_hub,
    load_jsonl,
    load_split,
    read_jsonl,
    validate_jsonl,
)

__all__ = [
    "DATASETS",
    "SPLITS",
    "DatasetError",
    "build_corpus",
    "dataset_path",
    "default_data_dir",
    "load_hub",
    "load_jsonl",
    "load_split",
    "passage_id",
    "read_jsonl",
    "validate_jsonl",
]
