import json
import shutil
from pathlib import Path

import pytest

from ragscale.data import DATASETS, DatasetError, load_jsonl, load_split, validate_jsonl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HOTPOT = FIXTURES / "hotpotqa_mini.jsonl"
MUSIQUE = FIXTURES / "musique_mini.jsonl"


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_jsonl_file_loads_as_examples_with_the_contract_fields_and_question_as_input(tmp_path):
    examples = load_jsonl(HOTPOT, cache_dir=tmp_path)
    source = records(HOTPOT)
    assert [e.id for e in examples] == [r["id"] for r in source]
    first = examples[0]
    assert first.question == source[0]["question"]
    assert first.answers == ["Narcissa"]
    assert first.supporting_titles == ["Tryphosa Bates-Batcheller", "Florence Foster Jenkins"]
    assert first.paragraphs[0] == {k: source[0]["paragraphs"][0][k] for k in ("title", "text", "is_supporting")}
    assert first.type == "bridge"
    assert first.decomposition is None
    assert set(first.inputs().keys()) == {"question"}


def test_a_musique_record_keeps_its_decomposition(tmp_path):
    (example,) = load_jsonl(MUSIQUE, cache_dir=tmp_path)
    assert [step["question"] for step in example.decomposition] == ["Empress Wang >> spouse", "#1 >> father"]
    assert example.decomposition[0]["paragraph_support_idx"] == 18


def test_load_split_reads_dataset_and_split_from_the_data_dir(tmp_path):
    data_dir = tmp_path / "datasets"
    (data_dir / "hotpotqa").mkdir(parents=True)
    shutil.copy(HOTPOT, data_dir / "hotpotqa" / "dev.jsonl")
    examples = load_split("hotpotqa", "dev", data_dir, cache_dir=tmp_path / "cache")
    assert len(examples) == 3


def test_every_bundled_dev_split_loads(shared_datasets, tmp_path):
    for dataset in DATASETS:
        examples = load_split(dataset, "dev", shared_datasets, cache_dir=tmp_path)
        assert examples, dataset
        assert all(e.answers for e in examples), dataset


def test_an_unknown_dataset_name_lists_the_valid_ones():
    with pytest.raises(DatasetError, match="hotpotqa, musique, 2wikimultihopqa, nq, bamboogle"):
        load_split("hotpot", "dev")


def test_an_unknown_split_lists_the_valid_ones():
    with pytest.raises(DatasetError, match="valid splits: train, dev"):
        load_split("hotpotqa", "test")


def test_invalid_json_is_reported_with_file_and_line(tmp_path):
    good = HOTPOT.read_text(encoding="utf-8").splitlines()[0]
    path = write_jsonl(tmp_path / "bad.jsonl", [good, '{"id": "x", "question": '])
    with pytest.raises(DatasetError) as error:
        load_jsonl(path)
    assert str(path) in str(error.value)
    assert "line 2" in str(error.value)
    assert "invalid JSON" in str(error.value)
    assert error.value.line == 2


def test_a_missing_field_is_reported_with_file_line_and_field(tmp_path):
    lines = HOTPOT.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[2])
    del record["answers"]
    path = write_jsonl(tmp_path / "missing.jsonl", [*lines[:2], json.dumps(record)])
    with pytest.raises(DatasetError, match=r"missing\.jsonl, line 3: field 'answers': missing field"):
        load_jsonl(path)


def test_a_field_of_the_wrong_type_is_reported_with_its_path(tmp_path):
    record = records(HOTPOT)[0]
    record["paragraphs"][4]["is_supporting"] = "yes"
    path = write_jsonl(tmp_path / "wrong.jsonl", [json.dumps(record)])
    with pytest.raises(DatasetError) as error:
        validate_jsonl(path)
    assert error.value.field == "paragraphs[4].is_supporting"
    assert "line 1" in str(error.value)
    assert "expected bool, got str" in str(error.value)


def test_answers_that_are_not_a_list_of_strings_are_rejected(tmp_path):
    record = records(HOTPOT)[1]
    record["answers"] = "Finnmark"
    path = write_jsonl(tmp_path / "answers.jsonl", [json.dumps(record)])
    with pytest.raises(DatasetError, match="field 'answers': expected a list of strings"):
        load_jsonl(path)


def test_a_missing_file_is_named_in_the_error(tmp_path):
    with pytest.raises(DatasetError, match=r"nowhere\.jsonl: no such file"):
        load_jsonl(tmp_path / "nowhere.jsonl")
