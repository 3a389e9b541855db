"""The packaged SmolLM2-135M, loaded once for the tests of the local engine (shared by every test module), in the
float32 layout: the reference the other layouts are compared with, and the same on every CPU."""

import pytest

from ragscale.programs.lm import load_lm


@pytest.fixture(scope="module")
def lm():
    return load_lm("smollm2-135m", max_tokens=24, cache=False, weights="fp32")


@pytest.fixture(scope="module")
def engine(lm):
    return lm.engine
