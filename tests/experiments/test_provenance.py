"""What produced a run: code, libraries, machine, model file and data files, on the run and in compare."""

import hashlib
import importlib.metadata
import json

from doubles import SCRIPT, scripted_lm

from ragscale.experiments import tracking
from ragscale.experiments.compare import provenance_note
from ragscale.experiments.config import RunConfig
from ragscale.experiments.provenance import PACKAGES, PREFIX, REPO, differing, model_sha256
from ragscale.experiments.runner import run_experiment
from ragscale.programs.lm.models import PRESETS


def test_a_run_records_its_code_libraries_machine_model_and_data_files(tmp_path, data_dir):
    served = {"teacher": "openai/teacher", "teacher_api_base": "http://teacher:8000/v1"}
    cfg = RunConfig(method="closed-book", dataset="hotpotqa", optimizer="bootstrap", adapter="chat", shots=1,
                    data_dir=data_dir, runs_dir=tmp_path / "runs", **served)  # fmt: skip
    summary = run_experiment(cfg, lm=scripted_lm(SCRIPT), teacher_lm=scripted_lm(SCRIPT), progress=False)
    run = tracking.client(cfg.runs_dir).get_run(summary["mlflow_run_id"])
    tags = {k.removeprefix(PREFIX): v for k, v in run.data.tags.items() if k.startswith(PREFIX)}

    assert tags["version"] == importlib.metadata.version("ragscale")
    assert all(tags[f"versions.{p}"] == importlib.metadata.version(p) for p in PACKAGES)
    assert ("git_commit" in tags) == (REPO / ".git").exists() and tags.get("git_dirty", "false") in ("true", "false")
    assert tags["cpu"] and tags["gpu"]  # the CPU's model name, and "none" without a GPU
    assert tags["model_sha256"] == PRESETS[cfg.lm].sha256
    assert tags["teacher_sha256"] == "served by http://teacher:8000/v1"

    inputs = {i.tags[0].value: i.dataset for i in run.inputs.dataset_inputs}
    assert set(inputs) == {"train", "eval"}
    for context, name in (("train", "train.jsonl"), ("eval", "dev.jsonl")):
        sha256 = hashlib.sha256((data_dir / "hotpotqa" / name).read_bytes()).hexdigest()
        assert inputs[context].name == f"hotpotqa/{name}" and inputs[context].digest == sha256[:32]
        assert json.loads(inputs[context].profile)["sha256"] == sha256


def test_a_local_model_file_is_identified_by_its_sha256_and_a_served_one_by_nothing(tmp_path):
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF not really a model")
    assert model_sha256(str(weights)) == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert model_sha256("openai/some-served-model") is None


def test_compare_says_which_provenance_tells_runs_apart_and_nothing_when_none_does():
    alike = {PREFIX + "git_commit": "abc", PREFIX + "versions.torch": "2.13.0", "ragscale.kind": "run"}
    rows = [{"provenance": alike}, {"provenance": {**alike, PREFIX + "git_commit": "def"}}]
    assert differing([row["provenance"] for row in rows]) == ["git_commit"]
    assert "git_commit" in provenance_note(rows) and "versions.torch" not in provenance_note(rows)
    assert provenance_note([{"provenance": alike}, {"provenance": dict(alike)}]) is None
