"""ragscale ingest and ragscale ask from the command line: exit codes, printed answers and sources."""

import json

import pytest
from dspy.utils import DummyLM

from ragscale.experiments.cli import main
from ragscale.experiments.collection import ingest


def test_the_ingest_command_names_a_failed_file_and_exits_1(tmp_path, capsys):
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\n% truncated in transit")
    code = main(["ingest", str(broken), "--collection", "c", "--runs-dir", str(tmp_path / "runs")])
    assert code == 1
    assert "broken.pdf: not a readable PDF" in capsys.readouterr().err


@pytest.mark.slow
def test_the_ask_command_prints_the_answer_and_its_sources_with_the_real_model(documents, tmp_path, capsys):
    runs = str(tmp_path / "runs")
    assert main(["ingest", str(documents), "--collection", "c", "--runs-dir", runs, "--no-ocr"]) == 0
    capsys.readouterr()
    answer_json = tmp_path / "answer.json"
    question = "How many steps does the keeper climb to the lamp room?"
    fast = ["--lm", "smollm2-135m", "--docs", "3", "--json", str(answer_json)]
    code = main(["ask", question, "--collection", "c", "--runs-dir", runs, *fast])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("answer: ") and "\nsources:\n" in out
    result = json.loads(answer_json.read_text())
    assert len(result["sources"]) == 3 and result["answer"]
    for number, source in enumerate(result["sources"], start=1):
        assert f"  [{number}] {source['document']}, page {source['page']}, {source['kind']}" in out
    assert any(s["document"] == "notes.txt" for s in result["sources"])  # the keeper's notes were retrieved


def test_ask_names_the_path_of_a_source_whose_file_name_two_documents_share(documents, tmp_path, capsys, monkeypatch):
    import ragscale.experiments.cli.documents as documents_cli

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("Keeper notes\n\nThe keeper climbs 117 steps twice a night.\n", encoding="utf-8")
    runs = tmp_path / "runs"
    ingest([documents, other], collection="c", runs_dir=runs, ocr=False)
    monkeypatch.setattr(documents_cli, "load_named_lm", lambda *args, **kwargs: DummyLM([{"answer": "117"}]))
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
