"""A published compiled run below a floor of its method is judged so from its records: its table marks it and a claim
resting on it is not tested."""

import gzip
import json
import shutil

from ragscale.data.datasets import dataset_path, read_jsonl
from ragscale.experiments.floors import shortfalls
from ragscale.experiments.sweep.claims import format_floors
from ragscale.published import plan
from ragscale.published.core_claims import check
from ragscale.published.directives import RESULTS
from ragscale.published.runs import table

ITERDRAG = {"method": "iterdrag", "optimizer": "bootstrap", "dataset": "hotpotqa"}


def asked(ids, share):
    """Records of ``ids``, the first ``share`` of them asking a follow-up."""
    cut = int(len(ids) * share)
    return [
        {"id": i, "behaviour": {"questions_with_follow_up": float(n < cut)}, "error": None} for n, i in enumerate(ids)
    ]


def test_a_compiled_run_below_its_floor_is_found_over_the_questions_the_floor_is_measured_on():
    ids = [row["id"] for row in read_jsonl(dataset_path("hotpotqa", "dev"))][:20]
    assert shortfalls(ITERDRAG, asked(ids, 0.4)) == [("questions_with_follow_up", 0.4, 0.5)]
    assert shortfalls(ITERDRAG, asked(ids, 0.5)) == []  # at the floor is above it
    assert shortfalls({**ITERDRAG, "optimizer": "none"}, asked(ids, 0.0)) == []  # not compiled: no floor to keep
    assert shortfalls({**ITERDRAG, "method": "drag"}, asked(ids, 0.0)) == []  # a method without floors
    failed = [{"id": i, "behaviour": {}, "error": "timed out"} for i in ids[10:]]
    assert shortfalls(ITERDRAG, asked(ids[:10], 0.5) + failed) == []  # failed questions are left out
    single = [row["id"] for row in read_jsonl(dataset_path("nq", "dev"))][:10]
    assert shortfalls({**ITERDRAG, "dataset": "nq"}, asked(single, 0.0)) == []  # IterDRAG's floor is multi-hop only
    crag = {"method": "crag", "optimizer": "bootstrap", "dataset": "nq"}
    graded = [{"id": i, "behaviour": {"graded_irrelevant": 0.0}, "error": None} for i in single]
    assert shortfalls(crag, graded) == [("graded_irrelevant", 0.0, 0.05)]  # CRAG's floor is on every question


def test_a_table_marks_the_run_below_its_floor_and_a_claim_on_it_is_not_tested(tmp_path):
    demo = tmp_path / "demo-qwen2.5-coder-0.5b"
    shutil.copytree(RESULTS / demo.name, demo)
    plan.write(demo, [("rag-none", "closed-book-none"), ("drag-bootstrap", "closed-book-none"),
                      ("iterdrag-bootstrap", "closed-book-none"), ("iterdrag-bootstrap", "drag-bootstrap"),
                      ("drag-bootstrap", "rag-none")])  # fmt: skip
    assert "†" not in table(demo, "closed-book-none")
    path = demo / "iterdrag-bootstrap.jsonl.gz"
    records = [json.loads(line) for line in gzip.open(path, "rt")]
    for record in records:
        record["behaviour"] = {**record["behaviour"], "questions_with_follow_up": 0.0, "follow_ups": 0}
    with gzip.open(path, "wt") as out:
        out.writelines(json.dumps(record) + "\n" for record in records)
    written = table(demo, "closed-book-none")
    assert "| iterdrag | bootstrap † |" in written and "| drag | bootstrap |" in written
    assert "`†`: compiled below a floor of its method" in written
    assert "iterdrag-bootstrap: questions_with_follow_up 0.00 < floor 0.5" in written
    try:
        found = {c["claim"]: c["found"][demo.name] for c in check([demo])}
    finally:
        plan.adjusted.cache_clear()  # the family of a folder that goes with tmp_path
    assert found["IterDRAG beats DRAG on multi-hop questions"]["verdict"] == (
        "not tested (iterdrag-bootstrap below its floor)"
    )
    assert found["retrieval beats closed-book"]["verdict"] == "held"  # the claims on other runs stand


def test_a_sweep_lists_its_configurations_below_their_floor_or_says_none_is():
    assert format_floors({}).startswith("No configuration with learned demonstrations falls below")
    listed = format_floors({"iterdrag k=5 m=2 n=1": [("questions_with_follow_up", 0.05, 0.5)]})
    assert "| iterdrag k=5 m=2 n=1 | questions_with_follow_up 0.05 < floor 0.5 |" in listed
