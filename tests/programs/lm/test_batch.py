"""The batch step of the local engine, run outside the engine's worker thread on the packaged SmolLM2-135M
(greedy, so outputs are exact): rows batched, joined and finished as they would run alone, prompts prefilled after
their cached prefixes, closed choices scored as a from-scratch pass scores them."""

import pytest

from ragscale.programs.lm.batch import Batcher
from ragscale.programs.lm.engine import PREFIX_CACHE_BYTES
from ragscale.programs.lm.prefix_cache import PrefixCache, common_prefix

pytestmark = pytest.mark.slow


CITIES = ["Paris", "Rome", "Berlin", "Madrid", "Vienna", "Lisbon", "Athens", "Dublin"]


def city_question(i: int) -> str:
    return f"Context: The museum of Tom is in {CITIES[i]}.\nQuestion: Where is the museum of Tom? Answer briefly."


def plain(engine) -> Batcher:
    """A batcher of its own on the loaded model, without a prefix cache: every prompt computed whole."""
    return Batcher(engine.model, engine.tokenizer)


def cached(engine, max_bytes: int = PREFIX_CACHE_BYTES, min_tokens: int = 16) -> Batcher:
    """A batcher of its own on the loaded model, with an empty prefix cache (the engine's default bound)."""
    return Batcher(engine.model, engine.tokenizer, prefixes=PrefixCache(max_bytes, min_tokens))


def test_a_batch_generates_what_each_prompt_generates_alone(engine, jobs_for, generate):
    prompts = [city_question(i) for i in range(3)]
    alone = [generate(engine.batcher, jobs_for([p]))[0] for p in prompts]
    assert generate(engine.batcher, jobs_for(prompts)) == alone
    assert [c in t for c, t in zip(CITIES, alone, strict=False)] == [True] * 3


def test_rows_that_finish_first_are_replaced_by_the_last_rows_and_the_others_decode_unchanged(
    engine, jobs_for, generate
):
    prompts = [city_question(i) for i in range(5)]
    lengths = [2, 16, 3, 16, 16]
    batcher = plain(engine)
    alone = []
    for p, n in zip(prompts, lengths, strict=True):
        [job] = jobs_for([p], max_new=n)
        generate(batcher, [job])
        alone.append(job.tokens)
    batch = jobs_for(prompts)
    for job, n in zip(batch, lengths, strict=True):
        job.max_new = n
    generate(batcher, batch)
    assert [j.tokens for j in batch] == alone


def test_reusing_a_shared_prefix_cache_gives_the_same_outputs_as_recomputing(engine, jobs_for, generate):
    demos = "\n".join(f"Example: the museum of Ann {i} is in {c}." for i, c in enumerate(CITIES * 3))
    prompts = [f"{demos}\n\n{city_question(i)}" for i in range(3)]
    recomputed, shared = plain(engine), cached(engine)
    expected = generate(recomputed, jobs_for(prompts))
    batch = jobs_for(prompts)
    assert generate(shared, batch) == expected
    assert recomputed.computed_tokens == recomputed.prompt_tokens == shared.prompt_tokens
    # the first row is computed whole; the next two rows of the same batch reuse its demonstrations
    assert shared.computed_tokens < len(batch[0].ids) + 2 * (len(batch[1].ids) - len(demos) // 8)
    later = jobs_for([f"{demos}\n\n{city_question(5)}"])  # alone, served by the cached prefix
    computed = shared.computed_tokens
    assert generate(shared, later) == generate(recomputed, jobs_for([f"{demos}\n\n{city_question(5)}"]))
    assert shared.computed_tokens - computed == len(later[0].ids) - common_prefix(later[0].ids, batch[0].ids)


def test_a_batch_of_choices_scores_every_option_as_a_from_scratch_pass_does(engine, jobs_for):
    import torch

    options = ["relevant", "ambiguous", "irrelevant", "New York City"]  # options of 1 to 4 tokens
    eiffel = (
        "Context: The Eiffel Tower is in Paris.\nQuestion: In which city is the Eiffel Tower? "
        "Answer with the city name."
    )
    jobs = jobs_for([city_question(i) for i in range(4)] + [eiffel])
    expected = []
    for job in jobs:
        prompt = engine.tokenizer.decode(job.ids)
        job.options = [engine.tokenizer(f"{prompt} {o}", add_special_tokens=False).input_ids for o in options]
        job.option_starts = [min(common_prefix(job.ids, o), len(o) - 1) for o in job.options]
        for full, start in zip(job.options, job.option_starts, strict=True):
            with torch.inference_mode():
                logp = engine.model(torch.tensor([full])).logits[0].float().log_softmax(-1)
            expected.append(sum(float(logp[i - 1, full[i]]) for i in range(start, len(full))))
    engine.batcher.choose(jobs)
    got = [s for job in jobs for s in job.scores]
    assert got == pytest.approx(expected, abs=1e-3)
    assert [job.tokens[0] for job in jobs] == [
        max(range(4), key=expected[4 * j : 4 * j + 4].__getitem__) for j in range(len(jobs))
    ]


def test_a_second_request_computes_only_the_tokens_after_the_prefix_it_shares_with_the_first(
    engine, jobs_for, generate
):
    demos = "\n".join(f"Example: the museum of Bob {i} is in {c}." for i, c in enumerate(CITIES * 2))
    recomputed, shared = plain(engine), cached(engine)
    seen: list[int] = []
    for i in (1, 2):
        job, expected = jobs_for([f"{demos}\n\n{city_question(i)}"]), jobs_for([f"{demos}\n\n{city_question(i)}"])
        computed = shared.computed_tokens
        assert generate(shared, job) == generate(recomputed, expected)
        new = len(job[0].ids) - common_prefix(job[0].ids, seen)
        assert shared.computed_tokens - computed == new
        seen = job[0].ids
    assert shared.prompt_tokens == recomputed.prompt_tokens and shared.computed_tokens < recomputed.computed_tokens
    assert shared.prefixes.hits == 1


def test_each_row_is_prefilled_in_its_own_pass_after_its_cached_prefix(engine, jobs_for, generate, monkeypatch):
    demos = "\n".join(f"Example: the museum of Eve {i} is in {c}." for i, c in enumerate(CITIES))
    prompts = [f"{demos}\n\n{city_question(i)}" + " Please." * i for i in range(3)]  # unequal lengths: padding
    expected = generate(plain(engine), jobs_for(prompts))
    shared = cached(engine)
    passes = []
    forward = shared._forward
    monkeypatch.setattr(shared, "_forward", lambda ids, *a, **k: passes.append(ids.shape) or forward(ids, *a, **k))
    batch = jobs_for(prompts)
    assert generate(shared, batch) == expected
    first = len(batch[0].ids)
    widths = [first] + [len(j.ids) - common_prefix(j.ids, batch[0].ids) for j in batch[1:]]
    assert passes[:3] == [(1, w) for w in widths]  # one row per pass, then decoding


def test_the_prefix_cache_stays_within_its_bound_and_evicts_what_was_used_least_recently(engine, jobs_for, generate):
    [probe] = jobs_for([city_question(0)])
    config = engine.model.config
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head * engine.model.dtype.itemsize
    bound = int(1.5 * len(probe.ids)) * per_token  # room for one prompt and a half
    small = cached(engine, bound, min_tokens=4)
    prompts = [f"Note {i}: the museum of Zoe is in {c}.\n" + city_question(i) for i, c in enumerate(CITIES[:3])]
    for prompt in prompts:
        generate(small, jobs_for([prompt], max_new=2))
        assert 0 < small.prefixes.nbytes <= bound
    assert small.prefixes.evicted > 0
    computed = small.computed_tokens
    [last] = jobs_for([prompts[-1]], max_new=2)
    generate(small, [last])  # the most recent prompt is still held: only its last token is computed
    assert small.computed_tokens - computed == 1


def test_a_long_prompt_is_prefilled_in_passes_of_at_most_chunk_tokens_with_the_same_answer(
    engine, jobs_for, generate, monkeypatch
):
    """A pass's activations grow with its tokens: a prompt longer than ``chunk_tokens`` is computed in passes of
    that many, each after the keys of the ones before, and decodes as it does from one pass."""
    notes = "\n".join(f"Note {i}: the museum of Ann {i} is in {CITIES[i % 8]}." for i in range(24))
    prompt = f"{notes}\n\n{city_question(5)}"
    whole = Batcher(engine.model, engine.tokenizer, chunk_tokens=10**6)
    expected = generate(whole, jobs_for([prompt]))
    chunked = Batcher(engine.model, engine.tokenizer, chunk_tokens=64)
    passes = []
    forward = chunked._forward
    monkeypatch.setattr(chunked, "_forward", lambda ids, *a, **k: passes.append(ids.shape[1]) or forward(ids, *a, **k))
    [job] = jobs_for([prompt])
    assert generate(chunked, [job]) == expected
    assert "Lisbon" in expected[0]
    prefill = passes[: -(len(job.tokens) + 1)] if len(passes) > len(job.tokens) else passes
    assert sum(prefill) == len(job.ids) and max(prefill) == 64 and len(prefill) == -(-len(job.ids) // 64)


def test_a_running_batchs_spare_rows_stay_within_their_bytes_and_a_request_still_joins(
    engine, jobs_for, generate, monkeypatch
):
    """Spare rows are as long as the batch: at long context they are bounded in bytes, and a request that finds
    none is copied into new buffers with the batch, both decoding as they would alone."""
    import torch

    from ragscale.programs.lm import batch as batch_module
    from ragscale.programs.lm.kv import position_bytes

    assert position_bytes(engine.model) == 2 * 30 * 3 * 64 * 4  # SmolLM2-135M: 30 layers, 3 key/value heads, fp32
    notes = "\n".join(f"Note {i}: the museum of Ann {i} is in {CITIES[i % 8]}." for i in range(16))
    prompts = [f"{notes}\n\n{city_question(1)}", city_question(2)]
    alone = [generate(plain(engine), jobs_for([p], max_new=8))[0] for p in prompts]
    batcher = plain(engine)
    first, second = jobs_for(prompts, max_new=8)
    row = position_bytes(engine.model) * (len(first.ids) + 8 + batch_module.ROOM + batch_module.SLACK)
    for spare_bytes, spare_rows in ((2 * row + row // 2, 2), (0, 0)):
        monkeypatch.setattr(batch_module, "SPARE_BYTES", spare_bytes)
        with torch.inference_mode():
            running = batcher.start(jobs_for(prompts[:1], max_new=8), running=True)
        assert running.cache.layers[0].spare_rows == spare_rows  # not the seven up to the batch size
    with torch.inference_mode():
        running = batcher.step(batcher.start([first], running=True))
        running = batcher.merge(running, batcher.start([second]))
        while running is not None:
            running = batcher.step(running)
    assert batcher.joined == 1 and batcher.work["joins in place"] == 0  # copied in with the batch
    assert [engine.tokenizer.decode(j.tokens) for j in (first, second)] == alone
