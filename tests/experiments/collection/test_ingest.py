"""Ingesting files into a collection: unchanged files skipped, changed ones replaced, unreadable ones reported."""

import shutil
from pathlib import Path

import dspy
from dspy.utils import DummyLM

from ragscale.experiments.collection import Collection, ingest


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
    assert len(list((store.root / "index" / "dense").iterdir())) == 1  # the previous index was dropped


def test_ingesting_a_folder_takes_its_supported_files_recursively(documents, tmp_path):
    (documents / "sub").mkdir()
    shutil.copy(documents / "notes.txt", documents / "sub" / "notes.txt")
    (documents / "sheet.xlsx").write_bytes(b"PK")
    (documents / ".hidden.md").write_text("# Draft\n\nnot for the index\n", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    report = ingest([documents, tmp_path / "empty"], collection="c", runs_dir=tmp_path / "runs", build_index=False)
    names = sorted(Path(p).relative_to(documents).as_posix() for p in report.added)
    assert names == ["harbour_faq.md", "notes.txt", "page.html", "report.md", "simple_table.pdf", "sub/notes.txt"]
    assert list(report.failed) == [str(tmp_path / "empty")] and "without .pdf" in report.failed[str(tmp_path / "empty")]
