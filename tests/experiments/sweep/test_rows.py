"""A sweep's row: its grid position and label, its effective context measured or else estimated, and its JSON."""

import pytest

from ragscale.experiments.config import ConfigError
from ragscale.experiments.sweep.grid import Point
from ragscale.experiments.sweep.rows import Row


def test_a_row_is_its_grid_point_and_labels_itself_as_the_paper_does():
    row = Row("iterdrag", 5, 2, 3, run_id="r1", acc=40.0, effective_context_tokens_per_question=3000.0)
    assert row.point == Point("iterdrag", 5, 2, 3) and row.label == "iterdrag k=5 m=2 n=3"
    assert Row("oracle-gold", 0, 0, 0).label == "oracle-gold"  # an oracle row is named, not placed


def test_its_effective_context_is_the_measured_one_once_it_ran_else_the_estimate():
    planned = Row("rag", 5, 0, 0, estimated_effective_context=800.0)
    ran = Row("rag", 5, 0, 0, estimated_effective_context=800.0, effective_context_tokens_per_question=760.0)
    assert (planned.effective_context(), ran.effective_context()) == (800.0, 760.0)
    assert not planned.measured and not ran.measured  # no run id, no accuracy: not a measured row
    assert Row("rag", 5, 0, 0, run_id="r", acc=30.0, effective_context_tokens_per_question=760.0).measured


def test_a_row_reads_back_from_its_json_and_a_field_no_row_has_is_named():
    row = Row("drag", 1, 2, 0, key="k1", run_id="r1", em=20.0, estimate_basis="counted")
    assert Row.from_json(row.to_json()) == row
    with pytest.raises(ConfigError, match=r"results\.json: unknown field.*estimated_tokens"):
        Row.from_json({**row.to_json(), "estimated_tokens": 300.0}, source="results.json")
