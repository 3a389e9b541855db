"""What ragscale runs on: multi-hop QA loaders and corpus building. Cheap to import (no torch, no datasets)."""

from ragscale.data.corpus import build_corpus, chunk_text, corpus_from_folder, passage_id
from ragscale.data.datasets import (
    DATASETS,
    SPLITS,
    DatasetError,
    dataset_path,
    default_data_dir,
    load_hub,
    load_jsonl,
    load_split,
    validate_jsonl,
)

__all__ = [
    "DATASETS",
    "SPLITS",
    "DatasetError",
    "build_corpus",
    "chunk_text",
    "corpus_from_folder",
    "dataset_path",
    "default_data_dir",
    "load_hub",
    "load_jsonl",
    "load_split",
    "passage_id",
    "validate_jsonl",
]
