"""What ragscale runs on: multi-hop QA loaders, the corpora a run searches and documents read into chunks
(``documents/``). Cheap to import (no torch, no datasets)."""

from ragscale.data.corpora import CORPORA, Corpus, CorpusError, load_corpus, read_corpus_file
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
    "CORPORA",
    "DATASETS",
    "SPLITS",
    "Corpus",
    "CorpusError",
    "DatasetError",
    "build_corpus",
    "dataset_path",
    "default_data_dir",
    "load_corpus",
    "load_hub",
    "load_jsonl",
    "load_split",
    "passage_id",
    "read_corpus_file",
    "read_jsonl",
    "validate_jsonl",
]
