"""What a sweep reads of a published folder before it adopts one: a sweep's manifest, else an error naming the file
(the adoption itself runs in ``test_sweep.py``, on a published sweep)."""

import json

import pytest

from ragscale.experiments.config import ConfigError
from ragscale.experiments.sweep.adopt import MANIFEST, manifest_of, read_records


def test_a_folder_without_a_manifest_or_with_a_method_tables_is_refused_naming_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"manifest\.json: not found; publish a sweep there"):
        manifest_of(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({"command": "make demo", "runs": {}}))
    with pytest.raises(ConfigError, match="not a published sweep's manifest"):
        manifest_of(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({"grid": {"budgets": [1000]}, "rows": {}, "oracle": {}}))
    assert manifest_of(tmp_path)["grid"] == {"budgets": [1000]}


def test_a_rows_records_are_read_back_as_written(tmp_path):
    from ragscale.experiments.files import write_jsonl_gz

    records = [{"id": "q1", "em": 1.0}, {"id": "q2", "em": 0.0}]
    write_jsonl_gz(tmp_path / "rag-k1-m0.jsonl.gz", records)
    assert read_records(tmp_path / "rag-k1-m0.jsonl.gz") == records
