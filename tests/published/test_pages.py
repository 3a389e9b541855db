"""The pages cite only what the committed results give: each page is what its directives render from
``benchmarks/results/``, a changed number or a changed file fails, and the written pages type no result by hand."""

import pytest

from ragscale.published.directives import REPO, DirectiveError
from ragscale.published.pages import PAGES, WRITTEN, render, typed_numbers


@pytest.mark.parametrize("page", PAGES)
def test_every_result_a_page_cites_is_what_the_committed_files_give(page):
    text = (REPO / page).read_text(encoding="utf-8")
    assert render(text, page) == text, f"{page} differs from its files: run python benchmarks/pages.py"


@pytest.mark.parametrize("page", WRITTEN)
def test_a_written_page_types_no_result_by_hand(page):
    assert typed_numbers((REPO / page).read_text(encoding="utf-8")) == []


def test_a_changed_number_fails_and_a_bad_directive_names_its_line():
    demo = "demo-qwen2.5-coder-0.5b"
    page = f"RAG: <!--= em {demo} rag-none -->26.0<!--/--> EM\n<!--= diff {demo} rag-none closed-book-none -->x<!--/-->"
    written = render(page)
    assert written.startswith("RAG: <!--= em") and "-->26.0<!--/--> EM" in written
    assert "-->+18.0 [+10.0, +26.0] *<!--/-->" in written  # the table's CI, adjusted with its family
    assert render(written.replace("26.0", "28.0", 1)) != written.replace("26.0", "28.0", 1)
    with pytest.raises(DirectiveError, match=r"page:2: .*no run named 'rag-bootstrap'"):
        render(f"line one\n<!--= em {demo} rag-bootstrap -->x<!--/-->")
    with pytest.raises(DirectiveError, match=r"unknown directive 'median'; valid: .*table"):
        render(f"<!--= median {demo} rag-none -->x<!--/-->")
    assert render("<!--= paper hotpotqa iterdrag -->x<!--/-->") == "<!--= paper hotpotqa iterdrag -->56.4<!--/-->"
    with pytest.raises(DirectiveError, match="no 'self-rag' on 'hotpotqa'"):
        render("<!--= paper hotpotqa self-rag -->x<!--/-->")
    plan = render("<!--= plan sweep-plan-hotpotqa-qwen2.5-coder-0.5b.md -->x<!--/-->")
    assert " to run, " in plan and "min of LM time" in plan
    behaviour = render(f"<!--= behaviour {demo} -->x<!--/-->")
    assert "| rag | none | none |" in behaviour and "| iterdrag | bootstrap | follow_ups " in behaviour
    assert render(f"<!--= command {demo} -->x<!--/-->") == f"<!--= command {demo} -->`make demo`<!--/-->"
    assert render(f"<!--= metric {demo} iterdrag-bootstrap compile_lm_calls -->x<!--/-->").endswith("-->55<!--/-->")
    with pytest.raises(DirectiveError, match=r"no metric 'compile_calls'; it has .*compile_lm_calls"):
        render(f"<!--= metric {demo} iterdrag-bootstrap compile_calls -->x<!--/-->")
    core = "core-hotpotqa-qwen2.5-coder-0.5b"
    held = render(f"<!--= held {core} iterdrag-bootstrap questions_with_follow_up -->x<!--/-->")
    assert held.endswith("-->100%<!--/-->")
    with pytest.raises(DirectiveError, match=r"no floor of 'follow_ups' was measured .*: questions_with_follow_up"):
        render(f"<!--= held {core} iterdrag-bootstrap follow_ups -->x<!--/-->")
    with pytest.raises(DirectiveError, match="no run named 'hyde-none'"):
        render(f"<!--= qpm {demo} hyde-none -->x<!--/-->")
    with pytest.raises(DirectiveError, match="no folder 'nowhere'"):
        render("<!--= em nowhere rag-none -->x<!--/-->")
    with pytest.raises(DirectiveError, match="retrieval is not a published folder: it has no manifest"):
        render("<!--= em retrieval rag-none -->x<!--/-->")  # a folder of JSON files, not of published runs


def test_result_shaped_numbers_outside_directives_and_code_are_found_with_their_lines():
    text = "EM 27.0 here\n<!--= em f r -->31.5<!--/--> and `--temperature 0.7` and a 95% CI\n```\n1.25\n```\n92% asked"
    assert typed_numbers(text) == [(1, "27.0"), (6, "92%")]


def test_the_core_claims_are_decided_in_their_folders_planned_family_by_em_in_its_direction(tmp_path):
    import shutil

    from ragscale.published import plan
    from ragscale.published.core_claims import check
    from ragscale.published.directives import RESULTS

    demo = tmp_path / "demo-qwen2.5-coder-0.5b"
    shutil.copytree(RESULTS / demo.name, demo)
    plan.write(demo, [("rag-none", "closed-book-none")])
    with pytest.raises(ValueError, match=r"drag-bootstrap - rag-none is not in its plan.json"):
        check([demo])  # a claim its folder did not plan has no family
    plan.write(demo, [("closed-book-none", "rag-none"), ("drag-bootstrap", "rag-none"),
                      ("iterdrag-bootstrap", "drag-bootstrap")])  # fmt: skip
    found = {c["claim"]: c["found"][demo.name] for c in check([demo])}
    retrieval = found["retrieval beats closed-book"]  # planned the other way round: turned
    assert retrieval["verdict"] == "held" and retrieval["ci"].diff == 18.0 and retrieval["ci"].p_adjusted < 0.05
    drag = found["demonstrations with their documents beat RAG's (DRAG)"]
    assert drag["verdict"] == "not shown" and drag["ci"].diff == -1.0  # 25.0 against 26.0
    assert found["retrieval bounds the reader: the gold paragraphs beat RAG"] is None  # the demo has no oracle rows
    plan.write(demo, [("closed-book-none", "rag-none"), ("drag-bootstrap", "rag-none"),
                      ("iterdrag-bootstrap", "drag-bootstrap"), ("drag-bootstrap", "closed-book-none")])  # fmt: skip
    larger = {c["claim"]: c["found"][demo.name] for c in check([demo])}["retrieval beats closed-book"]
    assert larger["ci"].p_adjusted > retrieval["ci"].p_adjusted  # a larger family raises the bar
    plan.adjusted.cache_clear()


def test_a_folder_made_on_two_machines_says_which_rows_each_made(tmp_path, monkeypatch):
    import gzip
    import json

    from ragscale.published import directives

    folder = tmp_path / "two-machines"
    folder.mkdir()
    cpus = {"rag-none": "AMD EPYC", "drag-bootstrap": "Intel Xeon"}
    for name in cpus:
        with gzip.open(folder / f"{name}.jsonl.gz", "wt") as out:
            out.write("")
    runs = {name: {"made": {"date": "2026-11-27", "cpu": cpu, "cpu_flags": "avx2"}} for name, cpu in cpus.items()}
    manifest = {"date": "2026-11-28", "machine": {"cpu": "AMD EPYC", "cpu_flags": "avx2"}, "runs": runs}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(directives, "RESULTS", tmp_path)
    assert directives.value("made two-machines") == (
        "rag-none: 2026-11-27 on AMD EPYC with avx2; drag-bootstrap: 2026-11-27 on Intel Xeon with avx2"
    )


def test_a_sweep_made_over_sittings_says_each_machine_with_the_span_of_its_dates(tmp_path, monkeypatch):
    import json

    from ragscale.published import directives

    folder = tmp_path / "sweep"
    folder.mkdir()
    made = [("2026-11-27", "AMD EPYC"), ("2026-11-30", "AMD EPYC"), ("2026-11-28", "AMD EPYC"), ("2026-12-01", "Xeon")]
    rows = {f"rag-k{i}-m0": {"made": {"date": d, "cpu": cpu, "cpu_flags": "avx2"}} for i, (d, cpu) in enumerate(made)}
    oracle = {"oracle-gold": {"made": {"date": "2026-12-01", "cpu": "Xeon", "cpu_flags": "avx2"}}}
    manifest = {"command": "ragscale sweep --dataset hotpotqa", "rows": rows, "oracle": oracle}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(directives, "RESULTS", tmp_path)
    assert directives.value("made sweep") == (
        "2026-11-27 to 2026-11-30 on AMD EPYC with avx2; 2026-12-01 on Xeon with avx2"
    )
    assert directives.value("command sweep") == "`ragscale sweep --dataset hotpotqa`"


def test_a_published_folders_runs_are_paired_with_their_uncompiled_run_or_another_optimizers(tmp_path, monkeypatch):
    import json
    import shutil

    from ragscale.experiments.files import write_jsonl_gz
    from ragscale.experiments.sweep.adopt import MANIFEST, read_records
    from ragscale.published import directives, plan

    folder = tmp_path / "published"
    shutil.copytree(directives.RESULTS / "core-hotpotqa-qwen2.5-coder-0.5b", folder)
    records = read_records(folder / "rag-none.jsonl.gz")
    right = next(r for r in records if r["em"] == 1.0)
    right["em"], right["f1"] = 0.0, 0.0  # compiled RAG misses one question uncompiled RAG got: -0.2 EM of 500
    write_jsonl_gz(folder / "rag-bootstrap.jsonl.gz", records)
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    rag = manifest["runs"]["rag-none"]
    manifest["runs"]["rag-bootstrap"] = {**rag, "params": {**rag["params"], "optimizer": "bootstrap"}}
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    plan.write(folder, [*plan.planned(folder), ("rag-bootstrap", "rag-none")])
    monkeypatch.setattr(directives, "RESULTS", tmp_path)

    lines = render("<!--= compiled published -->x<!--/-->").splitlines()
    assert lines[3:5] == ["|---|---|---|---|", "| rag | bootstrap | -0.2 [-0.6, +0.0] | -0.2 [-0.6, +0.0] |"]
    assert len(lines) == 9  # DRAG and IterDRAG have no uncompiled run to pair with: no row
    assert lines[6].endswith("the 8 comparisons planned on `published` (plan.json).")
    lines = render("<!--= against published bootstrap -->x<!--/-->").splitlines()
    assert lines[4:6] == ["| rag | none | +0.2 [+0.0, +0.6] | +0.2 [+0.0, +0.6] |", ""]  # each against its bootstrap
