"""The run config: read from TOML with flags over it, round-tripped, and a bad value named with the valid ones."""

import pytest

from ragscale.experiments.config import ConfigError, RunConfig


def test_a_toml_config_is_read_and_flags_override_it(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('method = "drag"\ndataset = "nq"\noptimizer = "bootstrap"\ndocs = 7\nruns_dir = "out"\n')
    config = RunConfig.from_toml(path, docs=3)
    assert (config.method, config.dataset, config.optimizer, config.docs) == ("drag", "nq", "bootstrap", 3)
    assert config.runs_dir.is_absolute() and config.runs_dir.name == "out"


def test_a_config_round_trips_through_its_toml(tmp_path):
    config = RunConfig(
        method="iterdrag",
        dataset="musique",
        optimizer="labeled",
        limit=5,
        eval_file=tmp_path / "e.jsonl",
        threads=2,
        cache=False,
        weights="int8",
        request_timeout=12.5,
    )
    path = tmp_path / "config.toml"
    path.write_text(config.to_toml())
    assert RunConfig.from_toml(path) == config


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("docs", 0, "docs must be >= 1"),
        ("threads", "4", "threads must be an integer"),
        ("adapter", "xml", "valid choices: chat, field, field-prefill, json"),
        ("retriever", "grep", "bm25, dense, hybrid"),
        ("weights", "int4", "weights 'int4'.*auto, bf16, dense, fp32, int4-bf16, int8, int8-bf16"),
        ("request_timeout", 0, "request_timeout must be a positive number of seconds, got 0"),
        ("request_timeout", float("inf"), "request_timeout must be a positive number of seconds"),
        ("request_timeout", "30", "request_timeout must be a number"),
        ("request_timeout", True, "request_timeout must be a number"),
    ],
)
def test_a_bad_config_value_fails_naming_the_field(field, value, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(method="rag", dataset="hotpotqa", **{field: value})


def test_the_shipped_configs_are_valid():
    from pathlib import Path

    configs = sorted((Path(__file__).resolve().parents[2] / "runs" / "configs").glob("*.toml"))
    assert configs
    for path in configs:
        RunConfig.from_toml(path)


def test_a_teacher_needs_an_optimizer_that_runs_a_teacher_program(tmp_path):
    with pytest.raises(ConfigError, match=r"teacher 'qwen2.5-coder-1.5b' needs an optimizer.*got optimizer 'none'"):
        RunConfig(method="rag", dataset="hotpotqa", teacher="qwen2.5-coder-1.5b")
    config = RunConfig(method="iterdrag", dataset="hotpotqa", optimizer="bootstrap", teacher="qwen2.5-coder-1.5b")
    (tmp_path / "run.toml").write_text(config.to_toml())
    assert RunConfig.from_toml(tmp_path / "run.toml") == config


def test_iterdrag_read_by_the_default_lm_gets_its_own_compile_settings_for_those_not_given(tmp_path):
    from ragscale.programs import PROGRAMS

    given = {"method": "iterdrag", "dataset": "hotpotqa", "optimizer": "bootstrap"}
    config = RunConfig.from_mapping(given, method_defaults=True)
    assert PROGRAMS["iterdrag"].compile_defaults == {"teacher": "qwen2.5-coder-1.5b", "shots": 2, "train_limit": 16}
    assert (config.teacher, config.shots, config.train_limit) == ("qwen2.5-coder-1.5b", 2, 16)
    own = RunConfig.from_mapping({**given, "teacher": "qwen2.5-coder-0.5b", "shots": 4}, method_defaults=True)
    assert (own.teacher, own.shots, own.train_limit) == ("qwen2.5-coder-0.5b", 4, 16)  # what is given wins
    (tmp_path / "run.toml").write_text('method = "iterdrag"\ndataset = "hotpotqa"\noptimizer = "mipro"\nshots = 3\n')
    from_file = RunConfig.from_toml(tmp_path / "run.toml", method_defaults=True)
    assert (from_file.teacher, from_file.shots, from_file.train_limit) == ("qwen2.5-coder-1.5b", 3, 16)
    unchanged = [
        given,  # without method_defaults: a config is what it says
        {**given, "optimizer": "none"},
        {**given, "optimizer": "labeled"},
        {**given, "optimizer": "gepa"},  # GEPA's teacher writes no demonstration
        {**given, "lm": "smollm2-135m"},
        {**given, "lm": "openai/qwen2.5-coder-0.5b", "api_base": "http://localhost:8000/v1"},
        {**given, "method": "drag"},
    ]
    for i, values in enumerate(unchanged):
        assert RunConfig.from_mapping(values, method_defaults=i > 0) == RunConfig.from_mapping(values)
