"""A documents benchmark's answers, committed and scored again (``published/documents.py``)."""

import gzip
import json
import re

import pytest

from ragscale.experiments import family
from ragscale.experiments.paired import paired_bootstrap
from ragscale.published import directives, documents, pages
from ragscale.published.runs import load, publish_rows


def answered(qid: str, rank: int | None, em: bool, *, grades=None) -> dict:
    return {"id": qid, "kind": "text", "answers": ["x"], "passages": ["c1", "c2"], "rank": rank,
            "answer_in_passages": rank is not None, "answer": "x" if em else "y", "acc": em, "em": em,
            "lm_calls": 1 if grades is None else 21, "seconds": 1.0, "grades": grades or {}}  # fmt: skip


RECORDS = {
    "plain": [answered("q1", 1, True), answered("q2", 2, False), answered("q3", None, False), answered("q4", 1, True)],
    "contextual": [answered(f"q{i}", 1, True) for i in range(1, 5)],
    "plain+fused": [answered(f"q{i}", 3, False, grades={"relevant": 3, "irrelevant": 1}) for i in range(1, 5)],
}
ABOUT = {"settings": {"k": 5}, "setup": {"contextual": {"lm_calls": 0, "ingest_s": 1.0,
         "contexts_paid": {"lm_calls": 79, "ingest_s": 66.2}}}}  # fmt: skip


@pytest.fixture
def folder(tmp_path, monkeypatch):
    rows = {name: {"params": {"config": name}} for name in RECORDS}
    made = {"cpu": "Test CPU", "cpu_flags": "avx2", "gpu": "none", "git_commit": "abc", "git_dirty": "false",
            "date": "2026-11-28"}  # fmt: skip
    published = publish_rows(tmp_path / "documents-test", rows, RECORDS, documents.KEPT, command="python x.py",
                             made_by=made, about=ABOUT)  # fmt: skip
    monkeypatch.setattr(directives, "RESULTS", tmp_path)
    return published


def test_a_configurations_scores_come_from_its_records():
    found = documents.scores(RECORDS["plain"])
    assert (found["R@1"], found["R@k"], found["Ans@k"], found["Acc"], found["EM"]) == (50.0, 75.0, 75.0, 50.0, 50.0)
    assert (found["calls"], found["s"]) == (1.0, 1.0)
    assert documents.relevant(RECORDS["plain+fused"]) == "75% (12 of 16)"


def test_each_scores_differences_against_the_first_configuration_are_one_holm_family():
    found = documents.differences(RECORDS)
    assert list(found) == ["contextual", "plain+fused"] and set(found["contextual"]) == set(documents.COMPARED)
    em = {r["id"]: 100.0 * r["em"] for r in RECORDS["plain"]}
    raw = [paired_bootstrap({r["id"]: 100.0 * r["em"] for r in RECORDS[n]}, em) for n in ("contextual", "plain+fused")]
    assert [found[n]["EM"].p_adjusted for n in found] == family.holm([ci.p for ci in raw])
    assert found["contextual"]["EM"].diff == 50.0 and found["plain+fused"]["R@1"].diff == -50.0


def test_a_page_cites_the_published_answers_and_a_changed_answer_changes_it(folder):
    manifest, records = load(folder)
    assert manifest["settings"] == {"k": 5} and records["plain"][1]["passages"] == ["c1", "c2"]
    page = (
        "<!--= documents documents-test table -->x<!--/-->\n"
        "EM <!--= documents documents-test score contextual EM -->x<!--/-->, "
        "<!--= documents documents-test diff contextual EM -->x<!--/-->; "
        "<!--= documents documents-test relevant plain+fused -->x<!--/-->; "
        "<!--= documents documents-test cost contextual -->x<!--/-->; "
        "<!--= made documents-test -->x<!--/-->; <!--= documents documents-test rule -->x<!--/-->"
    )
    shown = pages.render(page)
    assert "| plain + rerank, fused order | 0.0 | 100.0 | 100.0 | 0.0 | 0.0 | 21.00 | 1.0 |" in shown
    assert "EM <!--= documents documents-test score contextual EM -->100.0<!--/-->" in shown
    assert "75% (12 of 16)" in shown and "79 LM calls (66 s)" in shown and "2026-11-28 on Test CPU" in shown
    assert "+50.0 [" in shown and documents.RULE in shown

    path = folder / "contextual.jsonl.gz"
    with gzip.open(path, "rt") as lines:
        rows = [json.loads(line) for line in lines]
    rows[0]["em"] = False
    with gzip.open(path, "wt") as out:
        out.writelines(json.dumps(r) + "\n" for r in rows)
    directives._loaded.cache_clear()
    assert pages.render(page) != shown


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("documents documents-test score other EM", "no configuration 'other'; it has plain, contextual, plain+fused"),
        ("documents documents-test score plain F1", "no score 'F1'; valid: R@1"),
        ("documents documents-test diff plain EM", "'plain' is the configuration the others are compared with"),
        ("documents documents-test cost plain", "no setup 'plain'; it has contextual"),
        ("documents documents-test chart", "parts: table, versus"),
        ("documents nowhere table", "no published folder 'nowhere' under"),
    ],
)
def test_a_bad_documents_directive_says_what_is_there(folder, expr, message):
    with pytest.raises(directives.DirectiveError, match=re.escape(message)):
        pages.render(f"<!--= {expr} -->x<!--/-->")
