"""The library is offline and safe by itself: the Python API sets the environment that keeps ``datasets``, MLflow and
the price map off the network (a value the user set is kept), and DSPy's disk cache refuses a pickled object that
would run code when read."""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import dspy
import pytest
from dspy.clients.cache import Cache

from ragscale.process import OFFLINE_ENV
from ragscale.programs.lm import load_lm
from ragscale.programs.lm.cache import cache_is_restricted, restrict_cache

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_mini.jsonl"

# The README's way in: the Python API, no CLI. It loads a dataset, opens a tracking store and builds an LM, then
# reports the environment and what the libraries themselves read from it.
API_USER = """
import json, os, sys
from pathlib import Path
from ragscale.data import load_jsonl
from ragscale.experiments import tracking
from ragscale.programs.lm import load_lm

examples = load_jsonl(sys.argv[1], cache_dir=sys.argv[2])
tracking.client(Path(sys.argv[3]))
load_lm("openai/local", api_base="http://127.0.0.1:9/v1")

import datasets.config
from mlflow.telemetry.utils import is_telemetry_disabled

print(json.dumps({
    "examples": len(examples),
    "env": {key: os.environ.get(key) for key in json.loads(sys.argv[4])},
    "datasets_offline": datasets.config.HF_DATASETS_OFFLINE,
    "telemetry_disabled": is_telemetry_disabled(),
}))
"""


def run_api_user(tmp_path: Path, **user_env: str) -> dict:
    """Run ``API_USER`` in a fresh interpreter whose environment has no HF_*, MLFLOW_*, LITELLM_* or
    TRANSFORMERS_* variable, plus ``user_env``; what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "MLFLOW_", "LITELLM_", "TRANSFORMERS_"))}
    env.update(user_env)
    argv = [str(FIXTURE), str(tmp_path / "hf-cache"), str(tmp_path / "runs"), json.dumps(list(OFFLINE_ENV))]
    done = subprocess.run(
        [sys.executable, "-c", API_USER, *argv], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_python_api_sets_the_offline_environment_before_the_libraries_read_it(tmp_path):
    report = run_api_user(tmp_path)
    assert report["examples"] == 3
    assert report["env"] == OFFLINE_ENV
    assert report["datasets_offline"] is True
    assert report["telemetry_disabled"] is True


def test_a_value_the_user_set_is_kept(tmp_path):
    report = run_api_user(tmp_path, MLFLOW_DISABLE_TELEMETRY="1", LITELLM_LOCAL_MODEL_COST_MAP="true")
    assert report["env"]["MLFLOW_DISABLE_TELEMETRY"] == "1"
    assert report["env"]["LITELLM_LOCAL_MODEL_COST_MAP"] == "true"
    assert report["env"]["HF_DATASETS_OFFLINE"] == OFFLINE_ENV["HF_DATASETS_OFFLINE"]
    assert report["telemetry_disabled"] is True


class RunsCode:
    """Unpickled, it creates ``marker``: what a planted cache entry could do with any code instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


@pytest.fixture
def unrestricted_cache(tmp_path, monkeypatch) -> Cache:
    """DSPy's default kind of cache (plain pickle) in ``tmp_path``, as the process's cache for this test."""
    cache = Cache(True, True, str(tmp_path / "dspy-cache"), disk_size_limit_bytes=1 << 26, memory_max_entries=100)
    monkeypatch.setattr(dspy, "cache", cache, raising=False)
    return cache


def test_the_cache_refuses_a_pickled_object_that_would_run_code(tmp_path, unrestricted_cache):
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(RunsCode(marker)))
    assert marker.exists(), "the payload runs code under plain pickle"
    marker.unlink()

    restrict_cache()
    assert cache_is_restricted()
    request = {"model": "local/x", "messages": [{"role": "user", "content": "planted"}]}
    key = dspy.cache.cache_key(request)
    dspy.cache.disk_cache.set(key, RunsCode(marker))  # an entry someone else wrote into the cache directory

    assert dspy.cache.get(request) is None
    assert not marker.exists()
    assert key not in dspy.cache.disk_cache, "the refused entry is deleted"


def test_the_restricted_cache_keeps_its_directory_and_serves_plain_entries(unrestricted_cache):
    restrict_cache()
    assert dspy.cache is not unrestricted_cache
    assert dspy.cache.disk_cache_dir == unrestricted_cache.disk_cache_dir
    request = {"model": "local/x", "messages": [{"role": "user", "content": "kept"}]}
    value = {"responses": [{"message": {"role": "assistant", "parts": [{"type": "text", "text": "42"}]}}]}
    dspy.cache.put(request, value)
    dspy.cache.reset_memory_cache()
    assert dspy.cache.get(request) == value


def test_building_an_lm_makes_the_cache_restricted(unrestricted_cache):
    assert not cache_is_restricted()
    load_lm("openai/local", api_base="http://127.0.0.1:9/v1")
    assert cache_is_restricted()
