"""Taking up a stopped run: its folder's lock, the questions it finished, what compiling cost, and the run found
again by its key (tests/reliability/test_resume.py resumes whole runs)."""

import json
import time

import pytest

from ragscale.experiments import tracking
from ragscale.experiments.config import ConfigError
from ragscale.experiments.resume import (
    LOCK,
    RUN_KEY_TAG,
    claim,
    find_resumable,
    finished_records,
    load_compile,
    save_compile,
)


def test_a_run_folder_is_held_by_one_claim_at_a_time(tmp_path):
    work = tmp_path / "work" / "run-1"
    first = claim(work)
    assert first is not None and (work / LOCK).is_file()
    assert claim(work) is None  # held
    first.close()
    again = claim(work)
    assert again is not None
    again.close()


def test_finished_records_keep_each_questions_last_record_without_an_error_and_skip_a_torn_last_line(tmp_path):
    path = tmp_path / "predictions.jsonl"
    rows = [{"id": "q1", "answer": "a"}, {"id": "q2", "error": "timeout"}, {"id": "q1", "answer": "b"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + '{"id": "q3", "ans')
    assert finished_records(path) == [{"id": "q1", "answer": "b"}]
    assert finished_records(tmp_path / "missing.jsonl") == []


def test_a_broken_line_before_the_last_fails_naming_the_file_and_the_line(tmp_path):
    path = tmp_path / "predictions.jsonl"
    path.write_text('{"id": "q1"}\nnot json\n{"id": "q2"}\n')
    with pytest.raises(ConfigError, match=rf"{path}, line 2: not a JSON record"):
        finished_records(path)


def test_what_compiling_cost_is_read_back_and_is_none_before_compiling_finished(tmp_path):
    assert load_compile(tmp_path) is None
    save_compile(tmp_path, {"compile_s": 1.5, "calls": 3})
    assert load_compile(tmp_path) == {"compile_s": 1.5, "calls": 3}


def stopped_run(runs_dir, key: str, status: str = "KILLED") -> str:
    run_id = tracking.start_run(runs_dir, run_name="stopped", params={}, tags={RUN_KEY_TAG: key})
    tracking.end_run(runs_dir, run_id, status=status)
    (runs_dir / "work" / run_id).mkdir(parents=True)
    return run_id


def test_a_stopped_run_of_the_key_is_found_and_held_until_its_lock_is_let_go(tmp_path):
    runs_dir = tmp_path / "runs"
    run_id = stopped_run(runs_dir, "key-a")
    found = find_resumable(runs_dir, "key-a")
    assert found is not None and found[0] == run_id
    assert find_resumable(runs_dir, "key-a") is None  # this process holds it now
    found[1].close()
    assert find_resumable(runs_dir, "key-b") is None
    time.sleep(0.01)  # a later start time
    stopped_run(runs_dir, "key-a", status="FINISHED")
    assert find_resumable(runs_dir, "key-a") is None  # a finished run of the key replaced it
