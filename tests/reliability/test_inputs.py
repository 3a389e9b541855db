"""Every bad input is refused before a model loads: exit code 2 and a message naming the flag, file, line, field or
value at fault.

Each test runs the real command line (``main([...])``) with ``--lm smollm2-135m``, the fastest real model, and
asserts that no model was loaded (the engines loaded in this process are the same before and after): a check that
came only after loading would load it and fail that assertion.
"""

import ctypes
import json
import os
from contextlib import contextmanager
from pathlib import Path

import pytest
from doubles import FixedRetriever, record, refused

from ragscale.optimizers.context import ContextWindowError, check_fits_context
from ragscale.programs import RAG, IterDRAG
from ragscale.programs.lm.models import resolve


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


@pytest.fixture
def data(tmp_path) -> Path:
    """A data folder with hotpotqa/train.jsonl (q0-q3) and hotpotqa/dev.jsonl (q4-q6): 14 passages."""
    folder = tmp_path / "data" / "hotpotqa"
    folder.mkdir(parents=True)
    write_jsonl(folder / "train.jsonl", [record(i) for i in range(4)])
    write_jsonl(folder / "dev.jsonl", [record(i) for i in range(4, 7)])
    return tmp_path / "data"


@pytest.fixture
def run(data, tmp_path):
    """``ragscale run`` of RAG on the fixture data with SmolLM2, plus the flags given."""

    def argv(*flags: str) -> list[str]:
        common = ["--method", "rag", "--dataset", "hotpotqa", "--lm", "smollm2-135m", "--no-progress"]
        defaults = {"--data-dir": str(data), "--runs-dir": str(tmp_path / "runs")}
        given = {flag for flag in flags if flag.startswith("--")}
        extra = [x for flag, value in defaults.items() if flag not in given for x in (flag, value)]
        return ["run", *common, *extra, *flags]

    return argv


@pytest.fixture
def blocked(tmp_path) -> Path:
    """A path no folder can be made at: its parent is a regular file (unwritable even for root)."""
    parent = tmp_path / "a-file"
    parent.write_text("not a folder\n")
    return parent / "below"


# --eval-file


def test_a_missing_eval_file_is_refused_naming_it(run, tmp_path, capsys):
    path = tmp_path / "nowhere.jsonl"
    err = refused(run("--eval-file", str(path)), capsys)
    assert "--eval-file" in err and str(path) in err and "no such file" in err


def test_an_empty_eval_file_is_refused_naming_it(run, tmp_path, capsys):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    err = refused(run("--eval-file", str(path)), capsys)
    assert str(path) in err and "no records" in err


def test_an_eval_file_that_is_a_directory_is_refused_saying_so(run, tmp_path, capsys):
    err = refused(run("--eval-file", str(tmp_path)), capsys)
    assert str(tmp_path) in err and "is a directory" in err


def test_a_broken_json_line_is_refused_naming_the_file_and_the_line(run, tmp_path, capsys):
    path = write_jsonl(tmp_path / "broken.jsonl", [record(4), '{"id": "q5", "question": '])
    err = refused(run("--eval-file", str(path)), capsys)
    assert f"{path}, line 2" in err and "invalid JSON" in err


def test_a_record_missing_a_field_is_refused_naming_the_file_the_line_and_the_field(run, tmp_path, capsys):
    incomplete = record(5)
    del incomplete["answers"]
    path = write_jsonl(tmp_path / "incomplete.jsonl", [record(4), incomplete])
    err = refused(run("--eval-file", str(path)), capsys)
    assert f"{path}, line 2" in err and "'answers'" in err and "missing field" in err


@pytest.mark.parametrize("flag", ["--eval-file", "--corpus"])
def test_a_binary_file_is_refused_naming_it_and_its_line(run, tmp_path, capsys, flag):
    path = tmp_path / "weights.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary")
    err = refused(run(flag, str(path)), capsys)
    assert flag in err and f"{path}, line 1" in err and "not UTF-8" in err


def test_duplicate_question_ids_are_refused_listing_the_ids_and_their_lines(run, tmp_path, capsys):
    path = write_jsonl(tmp_path / "twice.jsonl", [record(4), record(5), record(4), record(6), record(5)])
    err = refused(run("--eval-file", str(path)), capsys)
    assert str(path) in err
    assert "'q4' on lines 1, 3" in err and "'q5' on lines 2, 5" in err and "q6" not in err


# --data-dir


def test_a_data_dir_without_the_dataset_is_refused_naming_the_folder_and_what_it_holds(run, tmp_path, capsys):
    other = tmp_path / "other"
    (other / "musique").mkdir(parents=True)
    err = refused(run("--data-dir", str(other)), capsys)
    assert str(other) in err and "hotpotqa/train.jsonl" in err and "musique" in err


def test_a_data_dir_that_does_not_exist_is_refused_naming_it(run, tmp_path, capsys):
    err = refused(run("--data-dir", str(tmp_path / "nowhere")), capsys)
    assert str(tmp_path / "nowhere") in err and "does not exist" in err


# --config


@pytest.mark.parametrize(
    ("line", "field", "shown"),
    [
        ("runs_dir = 7", "runs_dir", "7"),
        ('method = ["rag"]', "method", "['rag']"),
        ('docs = "5"', "docs", "'5'"),
        ("cache = 1", "cache", "1"),
        ("eval_file = false", "eval_file", "False"),
        ("teacher = 3", "teacher", "3"),
        ("limit = 2.5", "limit", "2.5"),
    ],
)
def test_a_config_value_of_the_wrong_type_is_refused_naming_the_file_the_field_and_the_value(
    line, field, shown, tmp_path, capsys
):
    path = tmp_path / "run.toml"
    path.write_text(
        f'dataset = "hotpotqa"\nlm = "smollm2-135m"\n{line}\n' + ("" if field == "method" else 'method = "rag"\n')
    )
    err = refused(["run", "--config", str(path)], capsys)
    assert str(path) in err and f"{field} must be" in err and shown in err


def test_a_config_that_is_a_directory_is_refused_saying_so(tmp_path, capsys):
    err = refused(["run", "--config", str(tmp_path)], capsys)
    assert str(tmp_path) in err and "is a directory" in err


def test_a_binary_config_file_is_refused_naming_it(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_bytes(b"\x00\xff\xfe\x89 not toml")
    err = refused(["run", "--config", str(path)], capsys)
    assert str(path) in err and "not a TOML file" in err


# --lm


def test_a_truncated_gguf_is_refused_naming_the_file(run, tmp_path, capsys):
    path = tmp_path / "cut.gguf"
    with resolve("smollm2-135m").open("rb") as whole:
        path.write_bytes(whole.read(4 << 20))  # the header and the first tensors, not the rest
    err = refused(run("--lm", str(path)), capsys)
    assert str(path) in err and "truncated" in err


def test_a_gguf_cut_inside_its_header_is_refused_naming_the_file(run, tmp_path, capsys):
    path = tmp_path / "cut.gguf"
    with resolve("smollm2-135m").open("rb") as whole:
        path.write_bytes(whole.read(1000))
    err = refused(run("--lm", str(path)), capsys)
    assert str(path) in err and "truncated" in err


def test_a_file_that_is_not_gguf_is_refused_naming_it(run, tmp_path, capsys):
    path = tmp_path / "model.gguf"
    path.write_text("<html>404 Not Found</html>\n")
    err = refused(run("--lm", str(path)), capsys)
    assert str(path) in err and "not a GGUF file" in err


# output paths


def test_a_runs_dir_that_is_a_file_is_refused(run, tmp_path, capsys):
    path = tmp_path / "runs.txt"
    path.write_text("")
    err = refused(run("--runs-dir", str(path)), capsys)
    assert "--runs-dir" in err and str(path) in err and "not a directory" in err


def test_a_runs_dir_that_cannot_be_made_is_refused(run, blocked, capsys):
    err = refused(run("--runs-dir", str(blocked)), capsys)
    assert "--runs-dir" in err and str(blocked) in err and "cannot write" in err


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32))


@contextmanager
def as_folder_owner():
    """Root writes into a read-only folder only through the CAP_DAC_OVERRIDE capability: for the block, this thread
    (capabilities are per thread on Linux) runs without it, so root meets file modes as any owner does; the capability
    comes back after. A process that is not root has no such capability and runs the block as it is."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3, this thread
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    had = data[0].effective
    data[0].effective = had & ~(1 << 1)  # CAP_DAC_OVERRIDE
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    try:
        yield
    finally:
        data[0].effective = had
        libc.capset(ctypes.byref(header), data)


def test_a_read_only_runs_dir_is_refused(run, tmp_path, capsys):
    runs = tmp_path / "read-only"
    runs.mkdir(mode=0o500)
    with as_folder_owner():
        with pytest.raises(PermissionError):  # the folder is read-only for this process, root included
            (runs / "probe").touch()
        err = refused(run("--runs-dir", str(runs)), capsys)
    assert "--runs-dir" in err and str(runs) in err and "cannot write" in err


def test_an_unwritable_json_path_is_refused_before_the_run_starts(run, blocked, tmp_path, capsys):
    target = blocked / "summary.json"
    err = refused(run("--json", str(target)), capsys)
    assert "--json" in err and str(target) in err
    assert not (tmp_path / "runs" / "mlflow.db").exists()  # no run was opened


def test_a_json_path_that_is_a_directory_is_refused(run, tmp_path, capsys):
    err = refused(run("--json", str(tmp_path)), capsys)
    assert "--json" in err and "is a directory" in err


def test_compare_refuses_an_unwritable_json_path(blocked, tmp_path, capsys):
    target = blocked / "rows.json"
    err = refused(["compare", "--runs-dir", str(tmp_path / "runs"), "--json", str(target)], capsys)
    assert "--json" in err and str(target) in err


def test_ingest_refuses_an_unwritable_runs_dir(blocked, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("The Zorblat River flows into the Mirren Sea.\n")
    err = refused(["ingest", str(notes), "--collection", "c", "--runs-dir", str(blocked)], capsys)
    assert "--runs-dir" in err and str(blocked) in err


# the corpus


@pytest.mark.parametrize(
    ("lines", "where"),
    [
        (['{"id": "a", "text": "one"}', '{"id": "b", "text": "tw'], "line 2: invalid JSON"),
        (['{"id": "a", "contents": ""}'], "line 1: field 'contents' is empty"),
        (['{"id": "a", "text": "x"}', '{"id": "a", "text": "y"}'], "line 2: id 'a' is repeated"),
        (["", ""], "no passage"),
    ],
)
def test_a_broken_corpus_file_is_refused_naming_the_file_and_line(run, tmp_path, capsys, lines, where):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", lines)
    err = refused(run("--corpus", str(corpus)), capsys)
    assert "--corpus" in err and str(corpus) in err and where in err


def test_a_missing_corpus_file_is_refused_listing_the_corpus_names(run, tmp_path, capsys):
    err = refused(run("--corpus", str(tmp_path / "wiki.jsonl")), capsys)
    assert "wiki.jsonl: no such file" in err and "all, questions" in err


def test_a_sweep_refuses_a_broken_corpus_before_the_model_loads(data, tmp_path, capsys):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", ['{"id": "a"}'])
    argv = ["sweep", "--dataset", "hotpotqa", "--lm", "smollm2-135m", "--plan-only", "--corpus", str(corpus)]
    err = refused([*argv, "--data-dir", str(data), "--runs-dir", str(tmp_path / "runs")], capsys)
    assert f"{corpus}, line 1" in err


# k and the context window


def test_docs_beyond_the_corpus_are_refused_at_once(shared_datasets, tmp_path, capsys):
    argv = ["run", "--method", "rag", "--dataset", "hotpotqa", "--lm", "smollm2-135m", "--limit", "2"]
    err = refused([*argv, "--docs", "1000000", "--runs-dir", str(tmp_path / "runs")], capsys)
    assert "--docs 1000000" in err and "passages" in err


def test_docs_beyond_the_questions_own_paragraphs_are_refused_with_that_corpus(shared_datasets, tmp_path, capsys):
    argv = ["run", "--method", "rag", "--dataset", "hotpotqa", "--lm", "smollm2-135m", "--limit", "2"]
    err = refused([*argv, "--corpus", "questions", "--docs", "1000", "--runs-dir", str(tmp_path / "runs")], capsys)
    assert "--docs 1000" in err and "--corpus questions" in err


def test_a_retrieving_method_over_a_dataset_without_passages_is_refused(shared_datasets, tmp_path, capsys):
    argv = ["run", "--method", "rag", "--dataset", "bamboogle", "--lm", "smollm2-135m", "--limit", "2"]
    err = refused([*argv, "--runs-dir", str(tmp_path / "runs")], capsys)
    assert "corpus is empty" in err and "closed-book" in err


@pytest.mark.parametrize(
    ("program", "demos"),
    [
        (RAG(FixedRetriever(), k=10**9), {}),
        (IterDRAG(FixedRetriever(), k=5, max_iterations=10**8), {}),
        (RAG(FixedRetriever(), k=5), {"shots": 10**9, "docs_per_demo": 10**9}),
    ],
)
def test_the_context_check_refuses_a_huge_prompt_without_building_it(program, demos):
    # Built, any of these prompts would take gigabytes; the estimate refuses them from prompts of one entry each.
    with pytest.raises(ContextWindowError, match=r"estimated at \d{9,} tokens"):
        check_fits_context(
            program,
            None,
            question="Where?",
            document="Title: " + "word " * 100,
            count_tokens=lambda text: len(text.split()),
            context_window=2000,
            **demos,
        )


# sweep


@pytest.mark.parametrize("methods", ["", ",", " , "])
def test_a_sweep_with_no_methods_is_refused(methods, tmp_path, capsys):
    argv = ["sweep", "--dataset", "hotpotqa", "--lm", "smollm2-135m", "--methods", methods, "--plan-only"]
    err = refused([*argv, "--runs-dir", str(tmp_path / "runs")], capsys)
    assert "--methods" in err and "rag,drag,iterdrag" in err


def test_a_sweep_teacher_that_would_teach_nothing_is_refused_and_an_unknown_one_is_named(tmp_path, capsys):
    argv = ["sweep", "--dataset", "hotpotqa", "--lm", "smollm2-135m", "--plan-only", "--runs-dir", str(tmp_path)]
    err = refused([*argv, "--methods", "rag,drag", "--teacher", "qwen2.5-coder-1.5b"], capsys)
    assert "--teacher qwen2.5-coder-1.5b" in err and "IterDRAG's chains" in err
    err = refused([*argv, "--methods", "iterdrag", "--teacher", "gpt-17-ultra"], capsys)
    assert "gpt-17-ultra" in err and "smollm2-135m" in err
