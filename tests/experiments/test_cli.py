"""The `ragscale` command line and the run config: unknown names fail listing the valid ones, exit code 2."""

import json

import pytest

from ragscale.experiments.cli import main
from ragscale.experiments.config import ConfigError, RunConfig


def run_cli(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "valid"),
    [
        ("--method", "raggedy", ["closed-book", "drag", "iterdrag", "rag"]),
        ("--optimizer", "gradient-descent", ["bootstrap", "labeled", "mipro", "none", "random-search"]),
        ("--dataset", "squad", ["hotpotqa", "musique", "2wikimultihopqa", "nq", "bamboogle"]),
    ],
)
def test_an_unknown_name_exits_2_listing_the_valid_choices(flag, value, valid, capsys):
    argv = {"--method": "rag", "--dataset": "hotpotqa", flag: value}
    code, err = run_cli(["run", *[x for kv in argv.items() for x in kv]], capsys)
    assert code == 2
    assert value in err
    for choice in valid:
        assert choice in err


def test_an_unknown_lm_exits_2_listing_the_presets_before_anything_is_run(tmp_path, capsys):
    runs = tmp_path / "runs"
    code, err = run_cli(
        ["run", "--method", "closed-book", "--dataset", "hotpotqa", "--lm", "gpt-17-ultra", "--runs-dir", str(runs)],
        capsys,
    )
    assert code == 2
    assert "gpt-17-ultra" in err and "smollm2-135m" in err
    assert not (runs / "mlflow.db").exists()


def test_a_missing_method_exits_2_and_says_how_to_give_it(capsys):
    code, err = run_cli(["run", "--dataset", "hotpotqa"], capsys)
    assert code == 2 and "--method" in err


def test_a_toml_with_an_unknown_key_exits_2_naming_the_key_and_the_valid_keys(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text('method = "rag"\ndataset = "hotpotqa"\ntop_k = 5\n')
    code, err = run_cli(["run", "--config", str(path)], capsys)
    assert code == 2
    assert "top_k" in err and str(path) in err and "max_docs_per_demo" in err


def test_a_toml_config_is_read_and_flags_override_it(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('method = "drag"\ndataset = "nq"\noptimizer = "bootstrap"\nk = 7\nruns_dir = "out"\n')
    config = RunConfig.from_toml(path, k=3)
    assert (config.method, config.dataset, config.optimizer, config.k) == ("drag", "nq", "bootstrap", 3)
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
    )
    path = tmp_path / "config.toml"
    path.write_text(config.to_toml())
    assert RunConfig.from_toml(path) == config


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("k", 0, "k must be >= 1"),
        ("threads", "4", "threads must be an integer"),
        ("adapter", "xml", "valid choices: chat, field, json"),
        ("retriever", "grep", "bm25, dense, hybrid"),
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


def test_run_prints_and_writes_the_summary_json(tmp_path, capsys, monkeypatch):
    import dspy

    from ragscale.experiments import runner

    data = tmp_path / "data" / "nq"
    data.mkdir(parents=True)
    for split, n in (("train", 2), ("dev", 2)):
        rows = [
            {
                "id": f"{split}{i}",
                "question": f"What is the {split} number {i}?",
                "answers": [str(i)],
                "paragraphs": [],
                "supporting_titles": [],
                "type": "single-hop",
                "decomposition": None,
            }
            for i in range(n)
        ]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lm = dspy.utils.DummyLM({"dev number 0": {"answer": "0"}, "dev number 1": {"answer": "one"}})
    monkeypatch.setattr(runner, "load_lm_for", lambda config: lm)  # a scripted LM in place of the weights

    out = tmp_path / "summary.json"
    code = main(
        [
            "run",
            "--method",
            "closed-book",
            "--dataset",
            "nq",
            "--adapter",
            "chat",
            "--data-dir",
            str(tmp_path / "data"),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--json",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    summary = json.loads(out.read_text())
    assert list(summary) == [
        "method",
        "dataset",
        "optimizer",
        "lm",
        "n",
        "failed",
        "em",
        "f1",
        "acc",
        "retrieval_recall",
        "lm_calls_per_question",
        "input_tokens_per_question",
        "output_tokens_per_question",
        "questions_per_minute",
        "compile_s",
        "wall_s",
        "mlflow_run_id",
    ]
    assert (summary["method"], summary["n"], summary["em"], summary["retrieval_recall"]) == (
        "closed-book",
        2,
        50.0,
        None,
    )
    assert json.loads(capsys.readouterr().out) == summary
