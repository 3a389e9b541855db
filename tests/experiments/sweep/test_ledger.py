"""The sweep's ledger: one row per finished configuration, by the names of the run's summary; an old one named."""

import json

import pytest

from ragscale.experiments.config import ConfigError
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.sweep.ledger import LEDGER, ROW_FIELDS, ledger_row, load_ledger, save_ledger


def test_a_row_keeps_the_summary_values_under_their_own_names_and_the_estimate():
    summary = {name: 1.5 for name in ROW_FIELDS} | {"n": 20.0, "failed": 0.0, "method": "rag"}
    row = ledger_row("run-1", "smollm2-135m", summary, {"estimated_effective_context": 300.0})
    assert row[EFFECTIVE_CONTEXT] == 1.5 and row["n"] == 20 and row["failed"] == 0
    assert row["run_id"] == "run-1" and row["estimated_effective_context"] == 300.0 and "method" not in row


def test_a_saved_ledger_reads_back(tmp_path):
    ledger = {"key": ledger_row("run-1", "lm", dict.fromkeys(ROW_FIELDS, 1.0), {})}
    save_ledger(tmp_path, ledger)
    assert load_ledger(tmp_path) == ledger


def test_a_ledger_of_an_older_version_fails_naming_the_file_and_the_fix(tmp_path):
    (tmp_path / LEDGER).write_text(json.dumps({"key": {"run_id": "r", "effective_tokens": 300}}))
    with pytest.raises(ConfigError, match=r"ledger\.json: rows key lack .* delete it, the MLflow runs rebuild it"):
        load_ledger(tmp_path)
