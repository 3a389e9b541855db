"""The packaged SmolLM2-135M, loaded once for the tests of the local engine (shared by every test module), in the
float32 layout: the reference the other layouts are compared with, and the same on every CPU; and the jobs of the
batch step that the engine and batch tests run on it."""

from collections.abc import Callable

import pytest

from ragscale.programs.lm import load_lm
from ragscale.programs.lm.batch import Batcher, Job


@pytest.fixture(scope="module")
def lm():
    return load_lm("smollm2-135m", max_tokens=24, cache=False, weights="fp32")


@pytest.fixture(scope="module")
def engine(lm):
    return lm.engine


@pytest.fixture(scope="module")
def jobs_for(engine) -> Callable[..., list[Job]]:
    """``jobs_for(prompts, max_new=12)``: a greedy job per user prompt, rendered by the chat template with its
    generation prompt (every engine and batcher of these tests shares ``engine``'s tokenizer)."""
    tokenizer = engine.tokenizer

    def make(prompts: list[str], max_new: int = 12) -> list[Job]:
        rendered = [
            tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            for p in prompts
        ]
        return [Job(tokenizer(r, add_special_tokens=False).input_ids, max_new, 0.0, None, ()) for r in rendered]

    return make


@pytest.fixture(scope="module")
def generate(engine) -> Callable[[Batcher, list[Job]], list[str]]:
    """``generate(batcher, jobs)``: run ``jobs`` as one batch to the end outside the engine's worker thread (prefill,
    then decode token by token); their texts."""
    import torch

    def run(batcher: Batcher, jobs: list[Job]) -> list[str]:
        with torch.inference_mode():
            running = batcher.start(jobs) if jobs else None
            while running is not None:
                running = batcher.step(running)
        return [engine.tokenizer.decode(j.tokens) for j in jobs]

    return run
