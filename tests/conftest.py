"""Test session set-up: no network, a private DSPy cache, local MLflow stores, and paths to the shared data."""

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def pytest_configure(config):
    from ragscale.process import go_offline

    go_offline()
    os.environ.setdefault("DSPY_CACHEDIR", tempfile.mkdtemp(prefix="ragscale-dspy-cache-"))
    os.environ.setdefault("RAGSCALE_DATA_DIR", str(SHARED / "datasets"))
    os.environ.pop("MLFLOW_TRACKING_URI", None)  # tests track into their own runs folders, never a user's server
    # the engine's own decode step, eager: the compiled one is the same code, compiled once per process for
    # minutes; tests/programs/lm/test_step.py compiles it
    os.environ.setdefault("RAGSCALE_DECODE", "static")


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    path = SHARED / "datasets"
    if not path.is_dir():
        pytest.fail(f"shared datasets not found at {path}: tests need ../shared beside the repository")
    return path


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """hotpotqa/train.jsonl (q0-q3) and hotpotqa/dev.jsonl (q4-q6) in the shared schema (made-up facts, see
    ``doubles.FACTS``): 14 passages."""
    import json

    from doubles import record

    folder = tmp_path / "data" / "hotpotqa"
    folder.mkdir(parents=True)
    for split, ids in (("train", range(4)), ("dev", range(4, 7))):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(record(i)) + "\n" for i in ids))
    return tmp_path / "data"


@pytest.fixture
def clean_checkout():
    """Runs made in the test record a clean checkout (``doubles.clean_checkout``)."""
    from doubles import clean_checkout

    with clean_checkout():
        yield
