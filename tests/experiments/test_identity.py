"""A run's key: the settings that decide its result and the questions it answers, and nothing else."""

import dspy
from doubles import FixedRetriever, examples

from ragscale.data.corpora import CorpusIdentity
from ragscale.experiments.config import RunConfig
from ragscale.experiments.identity import config_key, data_fingerprint
from ragscale.programs import RAG

BASE = {"method": "rag", "dataset": "hotpotqa"}


def key(data: str = "data", **settings) -> str:
    return config_key(RunConfig(**{**BASE, **settings}), data)


def test_settings_that_change_only_speed_or_place_leave_the_key_as_it_was(tmp_path):
    assert key(threads=1, cache=False, run_name="again", runs_dir=tmp_path, trace=True, request_timeout=5.0) == key()


def test_every_setting_that_decides_the_result_changes_the_key():
    changed = [key(method="drag"), key(docs=7), key(shots=2), key(seed=1), key(lm="qwen2.5-0.5b"), key("other data")]
    assert len({key(), *changed}) == 1 + len(changed)
    searched = config_key(RunConfig(**BASE), "data", corpus=CorpusIdentity("hotpotqa", 11, "a" * 64))
    assert searched != key()
    assert searched != config_key(RunConfig(**BASE), "data", corpus=CorpusIdentity("hotpotqa", 11, "b" * 64))


def test_gepas_settings_enter_the_key_only_when_set():
    assert key(optimizer="gepa", budget="40") != key(optimizer="gepa")
    assert key(optimizer="gepa", reflection_lm="qwen2.5-1.5b") != key(optimizer="gepa")


def test_a_compiled_program_given_to_the_run_keys_it_by_its_demonstrations():
    bare, compiled = RAG(FixedRetriever(), k=5), RAG(FixedRetriever(), k=5)
    compiled.answer.demos = [dspy.Example(question="Where is landmark 1?", answer="City 1")]
    config = RunConfig(**BASE)
    keys = {config_key(config, "data"), config_key(config, "data", bare), config_key(config, "data", compiled)}
    assert len(keys) == 3


def test_the_data_fingerprint_follows_the_questions_their_answers_and_their_split():
    train, evalset = examples(3), examples(5)[3:]
    fingerprint = data_fingerprint(train, evalset)
    assert data_fingerprint(examples(3), examples(5)[3:]) == fingerprint
    other_answer = [*train[:2], train[2].copy(answers=["Elsewhere"])]
    assert data_fingerprint(other_answer, evalset) != fingerprint
    assert data_fingerprint(train[::-1], evalset) != fingerprint
    assert data_fingerprint(train[:2], [train[2], *evalset]) != fingerprint
