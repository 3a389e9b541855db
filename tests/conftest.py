"""Test session set-up: no network, a private DSPy cache, and paths to the shared data."""

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def pytest_configure(config):
    from ragscale.experiments.cli import go_offline

    go_offline()
    os.environ.setdefault("DSPY_CACHEDIR", tempfile.mkdtemp(prefix="ragscale-dspy-cache-"))
    os.environ.setdefault("RAGSCALE_DATA_DIR", str(SHARED / "datasets"))


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    path = SHARED / "datasets"
    if not path.is_dir():
        pytest.fail(f"shared datasets not found at {path}: tests need ../shared beside the repository")
    return path
