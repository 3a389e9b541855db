"""The corpus a run searches: a dataset's every paragraph, all datasets pooled, the run's questions, or a file."""

import json
from pathlib import Path

import pytest

from ragscale.data import build_corpus, passage_id, read_jsonl
from ragscale.data.corpora import CorpusError, CorpusIdentity, load_corpus, read_corpus_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def write_lines(path: Path, rows) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """hotpotqa (train: 1 question, dev: 2) and musique (train only: 1), one paragraph shared by both."""
    hotpot = read_jsonl(FIXTURES / "hotpotqa_mini.jsonl")
    musique = read_jsonl(FIXTURES / "musique_mini.jsonl")
    musique[0]["paragraphs"].append(dict(hotpot[0]["paragraphs"][0]))
    for name, rows in (("hotpotqa", hotpot), ("musique", musique)):
        (tmp_path / name).mkdir()
        write_lines(tmp_path / name / "train.jsonl", rows[:1])
        if rows[1:]:
            write_lines(tmp_path / name / "dev.jsonl", rows[1:])
    return tmp_path


def test_a_dataset_corpus_is_every_paragraph_of_its_splits_whatever_questions_a_run_takes(data_dir):
    records = [*read_jsonl(data_dir / "hotpotqa" / "train.jsonl"), *read_jsonl(data_dir / "hotpotqa" / "dev.jsonl")]
    few = load_corpus("hotpotqa", data_dir, questions=records[:1])
    many = load_corpus("hotpotqa", data_dir, questions=records)
    assert few.sha256 == many.sha256 and len(few.sha256) == 64
    assert few.passages == build_corpus(records)
    assert few.identity == CorpusIdentity("hotpotqa", len(build_corpus(records)), few.sha256)


def test_all_pools_every_dataset_and_keeps_a_shared_paragraph_once(data_dir):
    hotpot, musique = load_corpus("hotpotqa", data_dir), load_corpus("musique", data_dir)
    pooled = load_corpus("all", data_dir)
    assert len(pooled) == len(hotpot) + len(musique) - 1
    assert {p["id"] for p in pooled.passages} == {p["id"] for p in hotpot.passages + musique.passages}


def test_questions_is_the_pool_of_the_runs_own_questions(data_dir):
    records = read_jsonl(data_dir / "hotpotqa" / "dev.jsonl")[:2]
    corpus = load_corpus("questions", data_dir, questions=records)
    assert corpus.passages == build_corpus(records)
    assert corpus.sha256 != load_corpus("questions", data_dir, questions=records[:1]).sha256


def test_a_flashrag_file_and_a_ragscale_file_of_the_same_passages_read_alike(tmp_path):
    flashrag = write_lines(
        tmp_path / "wiki.jsonl",
        [{"id": "0", "contents": '"Aaron"\nAaron is a prophet.'}, {"id": 1, "contents": '"Abba"\nAbba is a band.'}],
    )
    ours = write_lines(
        tmp_path / "ours.jsonl",
        [
            {"id": "0", "title": "Aaron", "text": "Aaron is a prophet."},
            {"id": "1", "title": "Abba", "text": "Abba is a band."},
        ],
    )
    a, b = read_corpus_file(flashrag), read_corpus_file(ours)
    assert (
        a.passages
        == b.passages
        == [
            {"id": "0", "title": "Aaron", "text": "Aaron is a prophet."},
            {"id": "1", "title": "Abba", "text": "Abba is a band."},
        ]
    )
    assert a.sha256 == b.sha256


def test_an_eval_files_paragraphs_are_added_once_and_change_the_digest(tmp_path):
    corpus = read_corpus_file(write_lines(tmp_path / "c.jsonl", [{"id": "x", "title": "A", "text": "old"}]))
    grown = corpus.with_paragraphs([{"paragraphs": [{"title": "A", "text": "old"}, {"title": "B", "text": "new"}]}])
    assert [p["id"] for p in grown.passages] == ["x", passage_id("B", "new")]
    assert grown.sha256 != corpus.sha256 and len(corpus) == 1
    assert grown.name.endswith("+1")


@pytest.mark.parametrize(
    ("lines", "line", "says"),
    [
        (['{"id": "a", "text": "fine"}', '{"id": "b", "text": '], 2, "invalid JSON"),
        (['{"id": "a", "contents": "  "}'], 1, "'contents' is empty"),
        (['{"id": "a", "title": "T", "text": ""}'], 1, "'text' is empty"),
        (['{"id": "a", "text": "x"}', '{"id": "a", "text": "y"}'], 2, "id 'a' is repeated (first on line 1)"),
        (['{"id": "a", "body": "x"}'], 1, "no 'contents'"),
        (['{"text": "x"}'], 1, "field 'id'"),
        (['["id", "text"]'], 1, "expected a JSON object"),
    ],
)
def test_a_broken_corpus_line_is_refused_naming_the_file_and_the_line(tmp_path, lines, line, says):
    path = write_lines(tmp_path / "corpus.jsonl", lines)
    with pytest.raises(CorpusError, match=f"line {line}") as error:
        read_corpus_file(path)
    assert str(path) in str(error.value) and says in str(error.value)


def test_binary_content_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"id": "a", "text": "x"}\n\x89PNG\r\n\x1a\n\x00\x00\n')
    with pytest.raises(CorpusError, match=r"line 2: not UTF-8"):
        read_corpus_file(path)


def test_a_missing_file_an_empty_file_and_a_folder_are_refused_naming_them(tmp_path):
    with pytest.raises(CorpusError, match="no such file"):
        load_corpus(str(tmp_path / "absent.jsonl"), tmp_path)
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(CorpusError, match=r"empty\.jsonl: no passage"):
        load_corpus(str(tmp_path / "empty.jsonl"), tmp_path)
    with pytest.raises(CorpusError, match="is a directory"):
        read_corpus_file(tmp_path)


def test_a_dataset_without_paragraphs_is_an_empty_corpus(data_dir):
    (data_dir / "bamboogle").mkdir()
    record = read_jsonl(data_dir / "hotpotqa" / "dev.jsonl")[0]
    write_lines(data_dir / "bamboogle" / "dev.jsonl", [{**record, "paragraphs": [], "supporting_titles": []}])
    with pytest.raises(CorpusError, match="corpus is empty"):
        load_corpus("bamboogle", data_dir)
