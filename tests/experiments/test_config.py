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
