"""The local torch engine behind dspy.LM, on the packaged SmolLM2-135M (greedy, so outputs are exact)."""

import copy
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest

from ragscale.programs.lm import chat, context_window, count_tokens
from ragscale.programs.lm.engine import TorchEngine, _Job
from ragscale.programs.lm.prefix_cache import common_prefix
from ragscale.programs.lm.prompt import chat_request

pytestmark = pytest.mark.slow


EIFFEL = (
    "Context: The Eiffel Tower is in Paris.\nQuestion: In which city is the Eiffel Tower? Answer with the city name."
)


CITIES = ["Paris", "Rome", "Berlin", "Madrid", "Vienna", "Lisbon", "Athens", "Dublin"]


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def city_question(i: int) -> str:
    return f"Context: The museum of Tom is in {CITIES[i]}.\nQuestion: Where is the museum of Tom? Answer briefly."


def jobs_for(engine: TorchEngine, prompts: list[str], max_new: int = 12) -> list[_Job]:
    return [
        _Job(
            engine.tokenizer(
                engine.tokenizer.apply_chat_template(ask(p), tokenize=False, add_generation_prompt=True),
                add_special_tokens=False,
            ).input_ids,
            max_new,
            0.0,
            None,
            (),
        )
        for p in prompts
    ]


def generate(engine: TorchEngine, jobs: list[_Job]) -> None:
    """Run ``jobs`` as one batch to the end, outside the worker thread: prefill, then decode token by token."""
    import torch

    with torch.inference_mode():
        running = engine._start(jobs) if jobs else None
        while running is not None:
            running = engine._step(running)


def texts(engine: TorchEngine, jobs: list[_Job]) -> list[str]:
    return [engine.tokenizer.decode(j.tokens) for j in jobs]


def test_greedy_answer_to_a_context_question_is_exact_and_repeatable(lm):
    first = chat(lm, ask(EIFFEL))
    assert first == "The Eiffel Tower is in Paris."
    assert chat(lm, ask(EIFFEL)) == first


def test_text_is_cut_before_the_first_stop_string(lm):
    assert chat(lm, ask(EIFFEL), stop=["Paris", "Tower"]) == "The Eiffel "


def test_a_trailing_assistant_message_is_continued_not_closed(lm, engine):
    messages = [*ask(EIFFEL), {"role": "assistant", "content": "Answer: The city is"}]
    assert chat(lm, messages, stop=["."]) == " Paris"
    prompt = engine.render(
        dspy.lm15.Request(
            model="m", messages=(dspy.lm15.Message.user(EIFFEL), dspy.lm15.Message.assistant("Answer: The"))
        )
    )
    assert prompt.endswith("<|im_start|>assistant\nAnswer: The")


def test_max_tokens_limits_the_output_and_usage_counts_the_prompt_tokens(lm):
    request = dspy.lm15.Request(
        model=lm.model, messages=(dspy.lm15.Message.user(EIFFEL),), config=dspy.lm15.Config(max_tokens=3)
    )
    response = lm(request)
    assert response.usage.output_tokens == 3
    assert response.finish_reason == "length"
    assert response.usage.input_tokens == count_tokens(lm, lm.engine.render(request))


def test_a_batch_generates_what_each_prompt_generates_alone(engine):
    prompts = [city_question(i) for i in range(3)]
    alone = []
    for p in prompts:
        [job] = jobs_for(engine, [p])
        generate(engine, [job])
        alone.append(engine.tokenizer.decode(job.tokens))
    batch = jobs_for(engine, prompts)
    generate(engine, batch)
    assert texts(engine, batch) == alone
    assert [c in t for c, t in zip(CITIES, alone, strict=False)] == [True] * 3


def test_eight_threads_get_the_same_answers_as_sequential_calls(lm):
    questions = [city_question(i) for i in range(8)]
    sequential = [chat(lm, ask(q), max_tokens=10) for q in questions]
    before = lm.engine.batch_sizes.copy()
    with ThreadPoolExecutor(8) as pool:
        threaded = list(pool.map(lambda q: chat(lm, ask(q), max_tokens=10), questions))
    assert threaded == sequential
    # eight concurrent calls cannot all run alone: at least one batch held several of them
    assert max(lm.engine.batch_sizes - before) > 1


@pytest.mark.parametrize(("first_long", "notes", "in_place"), [(True, 16, True), (False, 2, True), (False, 16, False)])
def test_a_request_that_arrives_mid_generation_joins_the_running_batch(engine, first_long, notes, in_place):
    import time

    long = "\n".join(f"Note {i}: the museum of Ann {i} is in {c}." for i, c in enumerate((CITIES * 2)[:notes]))
    prompts = [f"{long}\n\n{city_question(1)}", city_question(2)]
    prompts = prompts if first_long else prompts[::-1]
    alone = []
    for p in prompts:
        plain = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
        [job] = jobs_for(plain, [p], max_new=20)
        generate(plain, [job])
        alone.append(texts(plain, [job])[0])
    served = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    first, second = jobs_for(served, prompts, max_new=20)
    served._submit(first)
    while not first.tokens:  # the first request is decoding
        time.sleep(0.005)
    served._submit(second)
    assert first.done.wait(60) and second.done.wait(60)
    served.close()
    assert served.batch_sizes == {1: 2} and served.joined == 1  # the second joined the first's batch
    # into the running batch's spare row, unless it is longer than the batch by more than the slack columns
    assert served.work["joins in place"] == in_place
    assert texts(served, [first, second]) == alone


def test_rows_that_finish_first_are_replaced_by_the_last_rows_and_the_others_decode_unchanged(engine):
    prompts = [city_question(i) for i in range(5)]
    lengths = [2, 16, 3, 16, 16]
    plain = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    alone = []
    for p, n in zip(prompts, lengths, strict=True):
        [job] = jobs_for(plain, [p], max_new=n)
        generate(plain, [job])
        alone.append(job.tokens)
    batch = jobs_for(plain, prompts)
    for job, n in zip(batch, lengths, strict=True):
        job.max_new = n
    generate(plain, batch)
    assert [j.tokens for j in batch] == alone


def test_reusing_a_shared_prefix_cache_gives_the_same_outputs_as_recomputing(engine):
    demos = "\n".join(f"Example: the museum of Ann {i} is in {c}." for i, c in enumerate(CITIES * 3))
    prompts = [f"{demos}\n\n{city_question(i)}" for i in range(3)]
    plain = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    shared = TorchEngine(engine.model, engine.tokenizer, prefix_cache=True)
    expected = jobs_for(plain, prompts)
    generate(plain, expected)
    batch = jobs_for(shared, prompts)
    generate(shared, batch)
    assert plain.computed_tokens == plain.prompt_tokens == shared.prompt_tokens
    # the first row is computed whole; the next two rows of the same batch reuse its demonstrations
    assert shared.computed_tokens < len(batch[0].ids) + 2 * (len(batch[1].ids) - len(demos) // 8)
    assert texts(shared, batch) == texts(plain, expected)
    later = jobs_for(shared, [f"{demos}\n\n{city_question(5)}"])  # alone, served by the cached prefix
    computed = shared.computed_tokens
    generate(shared, later)
    alone = jobs_for(plain, [f"{demos}\n\n{city_question(5)}"])
    generate(plain, alone)
    assert shared.computed_tokens - computed == len(later[0].ids) - common_prefix(later[0].ids, batch[0].ids)
    assert texts(shared, later) == texts(plain, alone)


def test_deep_copy_of_a_program_shares_the_model_weights(lm):
    program = dspy.Predict("question -> answer")
    program.set_lm(lm)
    copied = copy.deepcopy(program)
    assert copied.get_lm().engine is lm.engine
    assert copied.get_lm().engine.model is lm.engine.model


def test_a_prompt_longer_than_the_context_window_is_refused_with_the_sizes(lm):
    assert context_window(lm) == 8192
    with pytest.raises(Exception, match="context window of 8192"):
        chat(lm, ask("word " * 9000))


def test_a_saved_lm_state_reloads_onto_the_already_loaded_engine(lm):
    state = lm.dump_state()
    assert state["engine"]["state"]["model"] == "smollm2-135m"
    reloaded = dspy.LM.load_state(state, allow_custom_lm_class=True)
    assert reloaded.engine is lm.engine


def test_a_continued_turn_gets_text_even_when_the_model_opens_it_with_a_blank_line(lm, engine):
    messages = [
        {"role": "system", "content": "Write a short encyclopedia passage that answers the question."},
        {"role": "user", "content": "question: Was Pepper Keenan or Rob Parissi born first?\n\nReply with passage."},
        {"role": "assistant", "content": "passage:"},
    ]
    from ragscale.programs.lm.engine import _Job

    ids = engine.tokenizer(engine.render_messages(messages), add_special_tokens=False).input_ids
    raw = _Job(ids, 3, 0.0, None, ())
    generate(engine, [raw])
    assert engine.tokenizer.decode(raw.tokens).startswith("\n\n")  # what a "\n\n" stop would cut to nothing
    reply = chat(lm, messages, stop=["\n\n"], max_tokens=8)
    assert reply.strip() and not reply.startswith("\n")


def enum_format(options: list[str]) -> dict:
    return {"type": "json_schema", "name": "choice", "schema": {"type": "string", "enum": options}}


def test_a_closed_choice_is_the_option_with_the_highest_log_likelihood(lm, engine):
    import json

    import torch

    options = ["Rome", "Paris", "Berlin"]
    messages = [*ask(EIFFEL), {"role": "assistant", "content": "The city is"}]
    reply = chat(lm, messages, response_format=enum_format(options))
    prompt = engine.render_messages([dict(m) for m in messages])
    start = len(engine.tokenizer(prompt, add_special_tokens=False).input_ids)
    scores = {}
    for option in options:  # recomputed from scratch: one unbatched, uncached forward pass per option
        full = engine.tokenizer(f"{prompt} {option}", add_special_tokens=False).input_ids
        with torch.inference_mode():
            logp = engine.model(torch.tensor([full])).logits[0].float().log_softmax(-1)
        scores[option] = sum(float(logp[i - 1, full[i]]) for i in range(start, len(full)))
    assert reply == json.dumps(max(scores, key=scores.get)) == '"Paris"'
    # the reply carries every option's score, which a call asking for logprobs gets (calibration reads them)
    response = lm(chat_request(lm, messages, response_format=enum_format(options)))
    (chosen,) = response.logprobs
    assert chosen.token == "Paris" and chosen.logprob == pytest.approx(scores["Paris"], abs=1e-3)
    assert {t.token: t.logprob for t in chosen.top} == pytest.approx(scores, abs=1e-3)


def test_a_batch_of_choices_scores_every_option_as_a_from_scratch_pass_does(engine):
    import torch

    options = ["relevant", "ambiguous", "irrelevant", "New York City"]  # options of 1 to 4 tokens
    jobs = jobs_for(engine, [city_question(i) for i in range(4)] + [EIFFEL])
    expected = []
    for job in jobs:
        prompt = engine.tokenizer.decode(job.ids)
        job.options = [engine.tokenizer(f"{prompt} {o}", add_special_tokens=False).input_ids for o in options]
        job.option_starts = [min(common_prefix(job.ids, o), len(o) - 1) for o in job.options]
        for full, start in zip(job.options, job.option_starts, strict=True):
            with torch.inference_mode():
                logp = engine.model(torch.tensor([full])).logits[0].float().log_softmax(-1)
            expected.append(sum(float(logp[i - 1, full[i]]) for i in range(start, len(full))))
    engine.choose(jobs)
    got = [s for job in jobs for s in job.scores]
    assert got == pytest.approx(expected, abs=1e-3)
    assert [job.tokens[0] for job in jobs] == [
        max(range(4), key=expected[4 * j : 4 * j + 4].__getitem__) for j in range(len(jobs))
    ]


def test_choices_and_generations_batched_across_threads_get_their_sequential_answers(lm):
    requests = [(city_question(i), enum_format(CITIES) if i % 2 else None) for i in range(8)]

    def call(request):
        question, fmt = request
        return chat(lm, ask(question), **({"response_format": fmt} if fmt else {}))

    sequential = [call(r) for r in requests]
    with ThreadPoolExecutor(8) as pool:
        parallel = list(pool.map(call, requests))
    assert parallel == sequential
    assert [parallel[i] for i in range(1, 8, 2)] == [f'"{CITIES[i]}"' for i in range(1, 8, 2)]


def test_a_json_schema_other_than_one_string_enum_is_refused(lm):
    schema = {"type": "json_schema", "name": "x", "schema": {"type": "object"}}
    with pytest.raises(Exception, match="one string enum"):
        chat(lm, ask("hi"), response_format=schema)


def test_a_second_request_computes_only_the_tokens_after_the_prefix_it_shares_with_the_first(engine):
    demos = "\n".join(f"Example: the museum of Bob {i} is in {c}." for i, c in enumerate(CITIES * 2))
    plain = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    shared = TorchEngine(engine.model, engine.tokenizer, prefix_cache=True)
    seen: list[int] = []
    for i in (1, 2):
        job, expected = (jobs_for(e, [f"{demos}\n\n{city_question(i)}"]) for e in (shared, plain))
        computed = shared.computed_tokens
        generate(shared, job)
        generate(plain, expected)
        assert texts(shared, job) == texts(plain, expected)
        new = len(job[0].ids) - common_prefix(job[0].ids, seen)
        assert shared.computed_tokens - computed == new
        seen = job[0].ids
    assert shared.prompt_tokens == plain.prompt_tokens and shared.computed_tokens < plain.computed_tokens
    assert shared.prefixes.hits == 1


def test_each_row_is_prefilled_in_its_own_pass_after_its_cached_prefix(engine, monkeypatch):
    demos = "\n".join(f"Example: the museum of Eve {i} is in {c}." for i, c in enumerate(CITIES))
    prompts = [f"{demos}\n\n{city_question(i)}" + " Please." * i for i in range(3)]  # unequal lengths: padding
    plain = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    expected = jobs_for(plain, prompts)
    generate(plain, expected)
    shared = TorchEngine(engine.model, engine.tokenizer)
    passes = []
    forward = shared._forward
    monkeypatch.setattr(shared, "_forward", lambda ids, *a, **k: passes.append(ids.shape) or forward(ids, *a, **k))
    batch = jobs_for(shared, prompts)
    generate(shared, batch)
    assert texts(shared, batch) == texts(plain, expected)
    first = len(batch[0].ids)
    widths = [first] + [len(j.ids) - common_prefix(j.ids, batch[0].ids) for j in batch[1:]]
    assert passes[:3] == [(1, w) for w in widths]  # one row per pass, then decoding


def test_the_prefix_cache_stays_within_its_bound_and_evicts_what_was_used_least_recently(engine):
    [probe] = jobs_for(engine, [city_question(0)])
    config = engine.model.config
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head * engine.model.dtype.itemsize
    bound = int(1.5 * len(probe.ids)) * per_token  # room for one prompt and a half
    small = TorchEngine(engine.model, engine.tokenizer, prefix_cache_bytes=bound, min_prefix_tokens=4)
    prompts = [f"Note {i}: the museum of Zoe is in {c}.\n" + city_question(i) for i, c in enumerate(CITIES[:3])]
    for prompt in prompts:
        generate(small, jobs_for(small, [prompt], max_new=2))
        assert 0 < small.prefixes.nbytes <= bound
    assert small.prefixes.evicted > 0
    computed = small.computed_tokens
    [last] = jobs_for(small, [prompts[-1]], max_new=2)
    generate(small, [last])  # the most recent prompt is still held: only its last token is computed
    assert small.computed_tokens - computed == 1


def test_eight_threads_with_shared_and_distinct_prefixes_get_their_sequential_answers(engine):
    demos = "\n".join(f"Example: the museum of Ann {i} is in {c}." for i, c in enumerate(CITIES * 2))
    prompts = [f"{demos}\n\n{city_question(i)}" if i % 2 else city_question(i) for i in range(8)]
    plain = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    sequential = []
    for p in prompts:
        job = jobs_for(plain, [p])
        generate(plain, job)
        sequential.append(texts(plain, job)[0])
    shared = TorchEngine(engine.model, engine.tokenizer)
    jobs = jobs_for(shared, prompts)

    def submit(job):
        shared._submit(job)
        assert job.done.wait(120)
        return engine.tokenizer.decode(job.tokens)

    with ThreadPoolExecutor(8) as pool:
        parallel = list(pool.map(submit, jobs))
    shared.close()
    assert parallel == sequential
    assert shared.computed_tokens < shared.prompt_tokens  # the demonstrations were computed once, not four times


def test_a_sampled_reply_with_a_seed_depends_on_its_prompt_and_seed_only(lm):
    poem = ask("Write one line of a poem about the sea.")

    def sample(seed: int) -> list[str]:
        return chat(lm, poem, max_tokens=12, temperature=1.0, seed=seed)

    alone = [sample(seed) for seed in range(4)]
    with ThreadPoolExecutor(8) as pool:  # batched beside each other and beside greedy calls
        greedy = [pool.submit(chat, lm, ask(city_question(i)), max_tokens=10) for i in range(4)]
        batched = [pool.submit(sample, seed) for seed in range(4)]
        [call.result() for call in greedy]
    assert [call.result() for call in batched] == alone
    assert len(set(alone)) > 1  # the seeds draw different lines
