"""A grader benchmark's committed grades: the scores made from them, the folder written and read, the page directive."""

import gzip
import json
import math

import pytest

from ragscale.published import directives
from ragscale.published.graders import format_table, publish, record, scores, separation, table


def grades(*rows: tuple[str, str, float | None]) -> list[dict]:
    return [{"passage_id": f"q{i}/t", "label": label, "grade": grade, "margin": margin}
            for i, (label, grade, margin) in enumerate(rows)]  # fmt: skip


def test_the_scores_are_made_from_the_grades_alone():
    found = scores(
        grades(("relevant", "relevant", 2.0), ("relevant", "ambiguous", 0.5), ("irrelevant", "relevant", 1.0),
               ("irrelevant", "irrelevant", -1.0))
    )  # fmt: skip
    assert found["accuracy"] == 50.0 and found["relevant_recall"] == 50.0 and found["irrelevant_recall"] == 50.0
    assert found["ambiguous"] == 25.0
    # relevant margins 2.0, 0.5 against irrelevant 1.0, -1.0: 3 of 4 pairs ordered; a threshold at 2.0, or at 0.5,
    # puts 3 of 4 on their side
    assert found["auc"] == 0.75 and found["best_threshold_accuracy"] == 75.0


def test_without_option_scores_there_is_no_separation_and_a_margin_is_log_p_relevant_over_irrelevant():
    assert separation(grades(("relevant", "relevant", None))) == {"auc": None, "best_threshold_accuracy": None}
    kept = record("q1/Paris", "relevant", "relevant", {"relevant": 0.8, "irrelevant": 0.2})
    assert kept["margin"] == pytest.approx(math.log(4.0)) and kept["passage_id"] == "q1/Paris"
    assert record("q1/Paris", "relevant", "relevant", None)["margin"] is None


@pytest.mark.usefixtures("clean_checkout")
def test_a_published_folder_makes_the_same_table_and_a_changed_grade_changes_it(tmp_path, monkeypatch):
    rows = {
        "labeled": {"params": {"optimizer": "labeled", "demo_grades": {"relevant": 2, "irrelevant": 2}},
                    "metrics": {"compile_lm_calls": 0, "compile_s": 1.0, "grade_s": 2.0}},
        "labeled-calibrated": {"params": {"optimizer": "labeled", "demo_grades": {"relevant": 2, "irrelevant": 2}},
                                  "metrics": {"compile_lm_calls": 3, "compile_s": 1.5, "grade_s": 2.0}},
    }  # fmt: skip
    given = {
        "labeled": grades(("relevant", "relevant", 1.0), ("irrelevant", "irrelevant", -1.0)),
        "labeled-calibrated": grades(("relevant", "relevant", 1.0), ("irrelevant", "relevant", 0.5)),
    }
    folder = publish(tmp_path / "graders", rows, given, command="python benchmarks/graders.py --publish graders")
    assert sorted(p.name for p in folder.iterdir()) == [
        "labeled-calibrated.jsonl.gz", "labeled.jsonl.gz", "manifest.json"
    ]  # fmt: skip
    made = format_table(rows, given)
    assert table(folder) == made
    assert "| labeled-calibrated | 2 / 2 | 50.0 | 100.0 | 0.0 | 0.0 | 1.000 | 100.0 | 3 |" in made
    monkeypatch.setattr(directives, "RESULTS", tmp_path)
    assert directives.value("graders graders").strip() == made
    assert directives.value("command graders") == "`python benchmarks/graders.py --publish graders`"
    assert " on " in directives.value("made graders")  # the date and machine it was made on
    assert directives.value("grader graders labeled-calibrated irrelevant_recall") == "0.0"
    assert directives.value("grader graders labeled auc") == "1.000"

    changed = given["labeled"][1] | {"grade": "relevant"}
    with gzip.open(folder / "labeled.jsonl.gz", "wt") as out:
        out.write("".join(json.dumps(g) + "\n" for g in [given["labeled"][0], changed]))
    assert table(folder) != made
