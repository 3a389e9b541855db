"""`ragscale ingest` and `ragscale ask`: collections, re-ingestion, the contexts cache and grounded answers."""

import json
import shutil
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from ragscale.experiments.cli import main
from ragscale.experiments.documents import Collection, ask, contextualize_chunks, ingest

SHARED_DOCUMENTS = Path(__file__).resolve().parents[2].parent / "shared" / "documents"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "documents"


@pytest.fixture
def documents(tmp_path) -> Path:
    """A folder with the fixture text files and the MIT table PDF (copies, so a test may change them)."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("report.md", "page.html", "notes.txt", "harbour_faq.md"):
        shutil.copy(FIXTURES / name, folder / name)
    shutil.copy(SHARED_DOCUMENTS / "simple_table.pdf", folder / "simple_table.pdf")
    return folder


def test_ingest_reports_a_corrupt_pdf_and_still_ingests_the_other_files(documents, tmp_path):
    broken = documents / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\n% truncated in transit")
    runs = tmp_path / "runs"
    names = ("simple_table.pdf", "broken.pdf", "report.md", "page.html", "notes.txt")
    report = ingest([documents / n for n in names], collection="c", runs_dir=runs, ocr=False, build_index=False)
    assert list(report.failed) == [str(broken)]
    assert "broken.pdf" in report.failed[str(broken)] and "not a readable PDF" in report.failed[str(broken)]
    store = Collection("c", runs)
    names = {entry["name"] for entry in store.manifest["documents"].values()}
    assert names == {"simple_table.pdf", "report.md", "page.html", "notes.txt"}
    kinds = {(c["document"], c["kind"]) for c in store.chunks}
    assert ("simple_table.pdf", "table") in kinds and ("page.html", "picture") in kinds
    assert all(c["page"] == 1 and c["id"] and c["method"] for c in store.chunks)


def test_the_ingest_command_names_a_failed_file_and_exits_1(tmp_path, capsys):
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\n% truncated in transit")
    code = main(["ingest", str(broken), "--collection", "c", "--runs-dir", str(tmp_path / "runs")])
    assert code == 1
    assert "broken.pdf: not a readable PDF" in capsys.readouterr().err


def test_reingesting_an_unchanged_file_does_nothing(documents, tmp_path):
    runs = tmp_path / "runs"
    first = ingest([documents / "report.md", documents / "notes.txt"], collection="c", runs_dir=runs, build_index=False)
    chunks_file = runs / "collections" / "c" / "chunks.jsonl"
    before = chunks_file.stat().st_mtime_ns
    second = ingest(
        [documents / "report.md", documents / "notes.txt"], collection="c", runs_dir=runs, build_index=False
    )
    assert len(first.added) == 2
    assert second.unchanged == [str(documents / "report.md"), str(documents / "notes.txt")]
    assert not second.changed and not second.added and not second.replaced
    assert chunks_file.stat().st_mtime_ns == before


def test_a_changed_file_replaces_its_chunks(documents, tmp_path):
    runs = tmp_path / "runs"
    ingest([documents / "report.md", documents / "notes.txt"], collection="c", runs_dir=runs)
    old = {c["id"] for c in Collection("c", runs).chunks if c["document"] == "report.md"}
    path = documents / "report.md"
    path.write_text(path.read_text().replace("412 ships", "415 ships"), encoding="utf-8")
    report = ingest([path], collection="c", runs_dir=runs)
    store = Collection("c", runs)
    new = {c["id"] for c in store.chunks if c["document"] == "report.md"}
    assert report.replaced == [str(path)]
    assert new != old
    assert any("415 ships" in c["text"] for c in store.chunks)
    assert not any("412 ships" in c["text"] for c in store.chunks)
    assert {c["document"] for c in store.chunks} == {"report.md", "notes.txt"}
    found = store.retriever()("How many ships did the harbour count?", 3)
    assert any("415 ships" in p.text for p in found)


def test_two_files_of_one_name_in_different_folders_are_two_documents(documents, tmp_path):
    runs = tmp_path / "runs"
    other = tmp_path / "other"
    other.mkdir()
    (other / "report.md").write_text("# Lighthouse\n\nThe lighthouse keeper logged 12 storms.\n", encoding="utf-8")
    report = ingest([documents / "report.md", other / "report.md"], collection="c", runs_dir=runs, build_index=False)
    assert report.added == [str(documents / "report.md"), str(other / "report.md")]
    store = Collection("c", runs)
    assert set(store.manifest["documents"]) == {
        str((documents / "report.md").resolve()),
        str((other / "report.md").resolve()),
    }
    by_source = {c["source"] for c in store.chunks}
    assert by_source == set(store.manifest["documents"])
    assert {c["document"] for c in store.chunks} == {"report.md"}  # the name answers cite
    assert len({c["id"] for c in store.chunks}) == len(store.chunks)
    # changing one of them replaces its chunks only
    (other / "report.md").write_text("# Lighthouse\n\nThe keeper logged 15 storms.\n", encoding="utf-8")
    again = ingest([documents / "report.md", other / "report.md"], collection="c", runs_dir=runs, build_index=False)
    assert again.unchanged == [str(documents / "report.md")] and again.replaced == [str(other / "report.md")]
    texts = " ".join(c["text"] for c in Collection("c", runs).chunks)
    assert "15 storms" in texts and "12 storms" not in texts and "Container traffic rose" in texts


def test_reingesting_one_changed_file_embeds_and_contextualises_only_its_chunks(documents, tmp_path):
    runs = tmp_path / "runs"
    paths = [documents / n for n in ("report.md", "notes.txt", "page.html", "harbour_faq.md")]
    lm = DummyLM([{"context": f"Context {i}."} for i in range(200)])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        first = ingest(paths, collection="c", runs_dir=runs, contextual=True, model="dummy", threads=1, max_tokens=25)
        calls_first = len(lm.history)
        notes = documents / "notes.txt"
        notes.write_text(notes.read_text(encoding="utf-8") + "\nA late addition: the ferry runs twice a day.\n")
        second = ingest(paths, collection="c", runs_dir=runs, contextual=True, model="dummy", threads=1, max_tokens=25)
    store = Collection("c", runs)
    changed = [c for c in store.chunks if c["document"] == "notes.txt"]
    assert first.embedded == first.chunks >= 10 and first.reused == 0
    assert second.replaced == [str(notes)] and len(second.unchanged) == 3
    assert len(lm.history) - calls_first == len(changed) == second.contexts_written  # no LM call for the others
    assert second.embedded == len(changed)  # the real MiniLM embedded only the changed file's chunks
    assert second.reused == len(store.chunks) - len(changed)
    found = store.retriever()("How often does the ferry run?", 3)
    assert store.embedded == 0 and any("ferry runs twice" in p.text for p in found)
    chroma = store.root / "index"
    from ragscale.programs.retrieval.dense import chroma_client

    assert len(chroma_client(chroma).list_collections()) == 1  # the previous index was dropped


def test_a_collection_keyed_by_file_name_is_rekeyed_by_path_without_reingesting(documents, tmp_path):
    runs = tmp_path / "runs"
    path = documents / "report.md"
    ingest([path], collection="c", runs_dir=runs, build_index=False)
    root = runs / "collections" / "c"
    (entry,) = json.loads((root / "manifest.json").read_text())["documents"].values()
    version_1 = {"documents": {entry.pop("name"): {**entry, "path": str(path.resolve())}}}
    (root / "manifest.json").write_text(json.dumps(version_1))
    chunks = [json.loads(line) for line in (root / "chunks.jsonl").read_text().splitlines()]
    unsourced = "".join(json.dumps({k: v for k, v in c.items() if k != "source"}) + "\n" for c in chunks)
    (root / "chunks.jsonl").write_text(unsourced)

    report = ingest([path], collection="c", runs_dir=runs)  # unchanged; the index is built and the manifest saved
    assert report.unchanged == [str(path)]
    store = Collection("c", runs)
    assert store.manifest["version"] == 2 and [c["id"] for c in store.chunks] == [c["id"] for c in chunks]
    assert {c["source"] for c in store.chunks} == {str(path.resolve())}  # saved with the re-keyed manifest
    path.write_text(path.read_text().replace("412 ships", "415 ships"), encoding="utf-8")
    report = ingest([path], collection="c", runs_dir=runs, build_index=False)
    store = Collection("c", runs)
    assert report.replaced == [str(path)]
    assert not any("412 ships" in c["text"] for c in store.chunks)  # the old chunks were replaced, not kept


def test_cached_contexts_cost_no_lm_call_on_reingestion(documents, tmp_path):
    runs = tmp_path / "runs"
    lm = DummyLM([{"context": f"From the harbour survey, part {i}."} for i in range(20)])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        first = ingest(
            [documents / "report.md"], collection="c", runs_dir=runs, contextual=True, model="dummy", threads=1
        )
        calls_first = len(lm.history)
        (runs / "collections" / "c" / "manifest.json").unlink()  # forget the file: it is ingested again
        second = ingest(
            [documents / "report.md"], collection="c", runs_dir=runs, contextual=True, model="dummy", threads=1
        )
    chunks = Collection("c", runs).chunks
    assert calls_first == first.contexts_written == len(chunks) > 0
    assert len(lm.history) == calls_first  # no new call
    assert second.contexts_cached == len(chunks) and second.contexts_written == 0
    assert all(c["context"].startswith("From the harbour survey") for c in chunks)
    corpus = Collection("c", runs).corpus()
    assert all(entry["text"].startswith("From the harbour survey") for entry in corpus)


def test_the_contexts_cache_key_covers_the_model(documents):
    chunks = [{"text": "The fleet shrank to 37 boats."}]
    cache: dict[str, str] = {}
    lm = DummyLM([{"context": "one"}, {"context": "two"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        assert contextualize_chunks(chunks, model="a", cache=cache, threads=1) == ["one"]
        assert contextualize_chunks(chunks, model="a", cache=cache, threads=1) == ["one"]
        assert contextualize_chunks(chunks, model="b", cache=cache, threads=1) == ["two"]
    assert len(lm.history) == 2


def test_ask_answers_with_the_sources_it_used(documents, tmp_path):
    runs = tmp_path / "runs"
    ingest(
        [documents / "simple_table.pdf", documents / "report.md", documents / "page.html", documents / "notes.txt"],
        collection="c",
        runs_dir=runs,
        ocr=False,
    )
    lm = DummyLM([{"answer": "Cell 2"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        result = ask("Which cell is under Header 2?", collection="c", runs_dir=runs, method="rag", k=3)
    assert result["answer"] == "Cell 2"
    assert len(result["sources"]) == 3
    assert {"document", "page", "kind", "id"} <= set(result["sources"][0])
    assert any(s["document"] == "simple_table.pdf" and s["kind"] == "table" for s in result["sources"])
    prompt = json.dumps(lm.history[-1]["messages"])
    assert "| Header 1 | Header 2 |" in prompt  # the table reached the answering prompt as markdown


def test_ingesting_a_folder_takes_its_supported_files_recursively(documents, tmp_path):
    (documents / "sub").mkdir()
    shutil.copy(FIXTURES / "notes.txt", documents / "sub" / "notes.txt")
    (documents / "sheet.xlsx").write_bytes(b"PK")
    (documents / ".hidden.md").write_text("# Draft\n\nnot for the index\n", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    report = ingest([documents, tmp_path / "empty"], collection="c", runs_dir=tmp_path / "runs", build_index=False)
    names = sorted(Path(p).relative_to(documents).as_posix() for p in report.added)
    assert names == ["harbour_faq.md", "notes.txt", "page.html", "report.md", "simple_table.pdf", "sub/notes.txt"]
    assert list(report.failed) == [str(tmp_path / "empty")] and "without .pdf" in report.failed[str(tmp_path / "empty")]


@pytest.mark.slow
def test_the_ask_command_prints_the_answer_and_its_sources_with_the_real_model(documents, tmp_path, capsys):
    runs = str(tmp_path / "runs")
    assert main(["ingest", str(documents), "--collection", "c", "--runs-dir", runs, "--no-ocr"]) == 0
    capsys.readouterr()
    answer_json = tmp_path / "answer.json"
    question = "How many steps does the keeper climb to the lamp room?"
    code = main(["ask", question, "--collection", "c", "--runs-dir", runs, "--k", "3", "--json", str(answer_json)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("answer: ") and "\nsources:\n" in out
    result = json.loads(answer_json.read_text())
    assert len(result["sources"]) == 3 and result["answer"]
    for number, source in enumerate(result["sources"], start=1):
        assert f"  [{number}] {source['document']}, page {source['page']}, {source['kind']}" in out
    assert any(s["document"] == "notes.txt" for s in result["sources"])  # the keeper's notes were retrieved


def test_ask_names_the_path_of_a_source_whose_file_name_two_documents_share(documents, tmp_path, capsys, monkeypatch):
    import ragscale.experiments.documents as documents_module

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("Keeper notes\n\nThe keeper climbs 117 steps twice a night.\n", encoding="utf-8")
    runs = tmp_path / "runs"
    ingest([documents, other], collection="c", runs_dir=runs, ocr=False)
    monkeypatch.setattr(documents_module, "_load_lm", lambda *args, **kwargs: DummyLM([{"answer": "117"}]))
    question = "How many steps does the keeper climb?"
    assert main(["ask", question, "--collection", "c", "--runs-dir", str(runs), "--adapter", "chat"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("answer: 117\nsources:\n")
    assert f"notes.txt ({(other / 'notes.txt').resolve().as_posix()}), page 1, text" in out
    assert f"notes.txt ({(documents / 'notes.txt').resolve().as_posix()}), page 1, text" in out
    for line in (line for line in out.splitlines() if line.startswith("  [")):  # a unique name is printed alone
        assert ("(" in line) == line.split("] ", 1)[1].startswith("notes.txt (")


def test_ask_on_a_missing_collection_fails_with_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["ask", "Where?", "--collection", "nowhere", "--runs-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "nowhere" in capsys.readouterr().err


def _fixed_retriever(passages):
    def retrieve(query, k):
        return passages[:k]

    return retrieve


def test_the_reranker_orders_candidates_by_grade_and_cuts_to_the_budget():
    from ragscale.programs.retrieval import Passage
    from ragscale.programs.retrieval.rerank import Reranker

    found = [Passage(id=str(i), title=f"doc, page {i}", text=f"text {i}") for i in range(1, 4)]
    grades = [{"grade": "irrelevant"}, {"grade": "relevant"}, {"grade": "ambiguous"}]
    with dspy.context(lm=DummyLM(grades), adapter=dspy.ChatAdapter()):
        ranked = Reranker(_fixed_retriever(found), depth=3, threads=1)("q", 3)
    assert [p.id for p in ranked] == ["2", "3", "1"]
    words = lambda text: len(text.split())  # noqa: E731
    with dspy.context(lm=DummyLM(grades), adapter=dspy.ChatAdapter()):
        cut = Reranker(_fixed_retriever(found), depth=3, budget=10, count_tokens=words, threads=1)("q", 3)
    assert [p.id for p in cut] == ["2", "3"]  # "doc, page 2: text 2" is 5 words; the third would pass 10


def test_a_passage_graded_relevant_climbs_from_below_the_cut_and_scores_its_grade():
    from ragscale.programs.retrieval import Passage
    from ragscale.programs.retrieval.rerank import Reranker

    found = [Passage(id=str(i), title=f"doc, page {i}", text=f"text {i}") for i in range(1, 5)]
    grades = [{"grade": g} for g in ("irrelevant", "ambiguous", "irrelevant", "relevant")]
    with dspy.context(lm=DummyLM(grades), adapter=dspy.ChatAdapter()):
        ranked = Reranker(_fixed_retriever(found), depth=4, threads=1)("q", 2)
    assert [(p.id, p.score) for p in ranked] == [("4", 1.0), ("2", 0.5)]


def test_a_program_compiles_the_rerankers_grader_and_shares_its_retriever():
    import copy

    from ragscale.programs.rag import RAG
    from ragscale.programs.retrieval.rerank import Reranker

    inner = _fixed_retriever([])
    program = RAG(retriever=Reranker(inner, depth=3), k=2)
    assert "retriever.grade" in [name for name, _ in program.named_predictors()]
    copied = copy.deepcopy(program)
    assert copied.retriever.grade is not program.retriever.grade
    assert copied.retriever.retriever is inner
