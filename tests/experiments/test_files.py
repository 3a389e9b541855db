"""Files an experiment writes: whole or not at all, and names safe for a file system."""

import json

from ragscale.experiments.files import slug, write_json, write_jsonl


def test_a_json_file_is_replaced_whole_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "deep" / "ledger.json"
    write_json(path, {"a": 1})
    write_json(path, {"b": "é"})
    assert json.loads(path.read_text(encoding="utf-8")) == {"b": "é"}
    assert [p.name for p in path.parent.iterdir()] == ["ledger.json"]


def test_a_jsonl_file_holds_one_value_per_line(tmp_path):
    write_jsonl(tmp_path / "chunks.jsonl", [{"id": 1}, {"id": 2}])
    assert [json.loads(line) for line in (tmp_path / "chunks.jsonl").read_text().splitlines()] == [{"id": 1}, {"id": 2}]


def test_a_slug_keeps_the_last_path_component_in_safe_characters():
    assert slug("openai/Qwen/Qwen2.5-7B Instruct") == "Qwen2.5-7B-Instruct"
    assert slug("/models/my model/") == "my-model"
    assert len(slug("x" * 100)) == 48
