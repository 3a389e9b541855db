"""ragscale run: unknown names fail listing the valid ones (exit code 2) before anything runs; the summary JSON."""

import json

import pytest

from ragscale.experiments.cli import main


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
    assert "top_k" in err and str(path) in err and "docs_per_demo" in err


def test_run_prints_and_writes_the_summary_json(tmp_path, capsys, monkeypatch):
    import dspy

    from ragscale.experiments import parts

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
    monkeypatch.setattr(parts, "load_lm_for", lambda config: lm)  # a scripted LM in place of the weights

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
        "docs",
        "shots",
        "iterations",
        "n",
        "failed",
        "em",
        "f1",
        "acc",
        "retrieval_recall",
        "lm_calls_per_question",
        "effective_context_tokens_per_question",
        "output_tokens_per_question",
        "questions_per_minute",
        "eval_s",
        "compile_s",
        "compile_lm_calls",
        "compile_input_tokens",
        "compile_output_tokens",
        "wall_s",
        "peak_rss_gb",
        "weights_gb",
        "corpus",
        "behaviour",
        "held_back_behaviour",
        "resumed",
        "mlflow_run_id",
        "model_uri",
    ]
    assert summary["corpus"] is None  # closed-book searches no corpus
    assert summary["model_uri"] == f"runs:/{summary['mlflow_run_id']}/model"  # a closed book travels too
    assert (summary["method"], summary["n"], summary["em"], summary["retrieval_recall"]) == (
        "closed-book",
        2,
        50.0,
        None,
    )
    assert summary["behaviour"] == {} and summary["compile_lm_calls"] == 0  # no defining step; nothing compiled
    assert json.loads(capsys.readouterr().out) == summary


def test_run_compiles_iterdrag_with_its_own_settings_and_a_teacher_given_wins(monkeypatch):
    from ragscale.experiments.cli import runs

    seen = []
    monkeypatch.setattr(runs, "check_inputs", lambda config: None)
    monkeypatch.setattr(runs, "run_experiment", lambda config, **_: seen.append(config) or {})
    argv = ["run", "--method", "iterdrag", "--dataset", "hotpotqa", "--optimizer", "bootstrap", "--no-progress"]
    assert main(argv) == 0
    assert main([*argv, "--teacher", "qwen2.5-coder-0.5b"]) == 0
    assert [(c.teacher, c.shots, c.train_limit) for c in seen] == [
        ("qwen2.5-coder-1.5b", 2, 16),
        ("qwen2.5-coder-0.5b", 2, 16),
    ]
