"""Small faults of the command line, each refused as a user expects: a budget that is no positive token count, a
FIFO given as a file, a text field holding a list. Each runs the real command line (``main([...])``), which exits 2
before any model loads."""

import json
import os
from pathlib import Path

import pytest
from doubles import record, refused
from servers import free_port


def run_argv(data_dir: Path, tmp_path: Path, *flags: str) -> list[str]:
    return ["run", "--method", "rag", "--dataset", "hotpotqa", "--lm", "smollm2-135m", "--no-progress",
            "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs"), *flags]  # fmt: skip


# --budgets


@pytest.mark.parametrize("budgets", ["0", "2k,0", "0.1", "-1", "many"])
def test_a_sweep_budget_that_is_no_positive_token_count_exits_2_naming_it(budgets, data_dir, tmp_path, capsys):
    dead = f"http://127.0.0.1:{free_port()}/v1"  # were the budgets accepted, this would be refused instead
    argv = ["sweep", "--dataset", "hotpotqa", "--lm", "openai/x", "--api-base", dead, "--budgets", budgets,
            "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs")]  # fmt: skip
    err = refused(argv, capsys)
    bad = next(b for b in budgets.split(",") if b != "2k")
    assert f"--budgets {bad!r} is not a" in err and "token count" in err
    assert dead not in err


# a FIFO given as a file


@pytest.mark.parametrize("flag", ["--corpus", "--eval-file"])
def test_a_fifo_given_as_a_file_is_named_a_fifo_not_a_missing_file(flag, data_dir, tmp_path, capsys):
    fifo = tmp_path / "passages.jsonl"
    os.mkfifo(fifo)
    err = refused(run_argv(data_dir, tmp_path, flag, str(fifo)), capsys)
    assert "is a FIFO, not a regular file" in err and str(fifo) in err and flag in err
    assert "no such file" not in err
    if flag == "--corpus":
        assert f"--corpus {fifo} is a FIFO, not a regular file" in err


# a text field that holds a list


@pytest.mark.parametrize(
    ("line", "field", "found"),
    [
        ({"id": "a", "contents": ["Paris", "is the capital"]}, "contents", "list"),
        ({"id": "a", "contents": 7}, "contents", "int"),
        ({"id": "a", "title": "T", "text": ["one", "two"]}, "text", "list"),
        ({"id": ["a"], "text": "one"}, "id", "list"),
    ],
)
def test_a_corpus_field_that_is_no_string_names_the_file_the_line_the_field_and_its_type(
    line, field, found, data_dir, tmp_path, capsys
):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "z", "text": "fine"}) + "\n" + json.dumps(line) + "\n")
    err = refused(run_argv(data_dir, tmp_path, "--corpus", str(corpus)), capsys)
    assert f"{corpus}, line 2: field {field!r}" in err and f"got {found}" in err
    assert "is empty" not in err


@pytest.mark.parametrize(
    ("field", "value", "found"),
    [("question", ["Who?", "Where?"], "list"), ("answers", "Paris", "str"), ("answers", ["Paris", 3], "list of int")],
)
def test_a_dataset_field_of_the_wrong_type_names_the_file_the_line_the_field_and_its_type(
    field, value, found, data_dir, tmp_path, capsys
):
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps(record(4)) + "\n" + json.dumps({**record(5), field: value}) + "\n")
    err = refused(run_argv(data_dir, tmp_path, "--eval-file", str(path)), capsys)
    assert f"{path}, line 2: field {field!r}" in err and f"got {found}" in err
