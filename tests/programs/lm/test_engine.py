"""The local torch engine behind dspy.LM, on the packaged SmolLM2-135M (greedy, so outputs are exact)."""

import copy
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest

from ragscale.programs.lm import chat, context_window, count_tokens
from ragscale.programs.lm.batch import Job
from ragscale.programs.lm.engine import TorchEngine
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
def test_a_request_that_arrives_mid_generation_joins_the_running_batch(
    engine, jobs_for, generate, first_long, notes, in_place
):
    import time

    long = "\n".join(f"Note {i}: the museum of Ann {i} is in {c}." for i, c in enumerate((CITIES * 2)[:notes]))
    prompts = [f"{long}\n\n{city_question(1)}", city_question(2)]
    prompts = prompts if first_long else prompts[::-1]
    alone = [
        generate(TorchEngine(engine.model, engine.tokenizer, prefix_cache=False).batcher, jobs_for([p], max_new=20))[0]
        for p in prompts
    ]
    served = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    first, second = jobs_for(prompts, max_new=20)
    served._submit(first)
    while not first.tokens:  # the first request is decoding
        time.sleep(0.005)
    served._submit(second)
    assert first.done.wait(60) and second.done.wait(60)
    served.close()
    assert served.batch_sizes == {1: 2} and served.joined == 1  # the second joined the first's batch
    # into the running batch's spare row, unless it is longer than the batch by more than the slack columns
    assert served.work["joins in place"] == in_place
    assert [engine.tokenizer.decode(j.tokens) for j in (first, second)] == alone


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


def test_a_continued_turn_gets_text_even_when_the_model_opens_it_with_a_blank_line(lm, engine, generate):
    messages = [
        {"role": "system", "content": "Write a short encyclopedia passage that answers the question."},
        {"role": "user", "content": "question: Was Pepper Keenan or Rob Parissi born first?\n\nReply with passage."},
        {"role": "assistant", "content": "passage:"},
    ]
    ids = engine.tokenizer(engine.render_messages(messages), add_special_tokens=False).input_ids
    [raw] = generate(engine.batcher, [Job(ids, 3, 0.0, None, ())])
    assert raw.startswith("\n\n")  # what a "\n\n" stop would cut to nothing
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


def test_eight_threads_with_shared_and_distinct_prefixes_get_their_sequential_answers(engine, jobs_for, generate):
    demos = "\n".join(f"Example: the museum of Ann {i} is in {c}." for i, c in enumerate(CITIES * 2))
    prompts = [f"{demos}\n\n{city_question(i)}" if i % 2 else city_question(i) for i in range(8)]
    plain = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    sequential = [generate(plain.batcher, jobs_for([p]))[0] for p in prompts]
    shared = TorchEngine(engine.model, engine.tokenizer)
    jobs = jobs_for(prompts)

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


def test_a_request_whose_prefill_fails_fails_alone(engine, jobs_for):
    """Out of memory in one request's prefill: that request raises, the others batched with it complete."""
    import torch

    served = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    prompts = [city_question(0), EIFFEL, city_question(2)]
    doomed = len(jobs_for([EIFFEL])[0].ids)
    assert doomed != len(jobs_for([prompts[0]])[0].ids)
    forward = served.batcher._forward

    def forward_or_oom(ids, *args, **kwargs):
        if ids.shape[1] == doomed:
            raise torch.OutOfMemoryError("no memory for this prompt")
        return forward(ids, *args, **kwargs)

    served.batcher._forward = forward_or_oom
    alone = [chat(dspy.LM("local", engine=engine, cache=False), ask(p), max_tokens=8) for p in (prompts[0], prompts[2])]
    lm = dspy.LM("local", engine=served, cache=False)
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(chat, lm, ask(p), max_tokens=8) for p in prompts]
    served.close()
    with pytest.raises(Exception, match="no memory for this prompt"):  # DSPy wraps it, keeping the message
        futures[1].result()
    assert [futures[0].result(), futures[2].result()] == alone


def test_a_finished_row_keeps_its_text_when_the_next_step_fails(engine, jobs_for):
    served = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    short, long = jobs_for([city_question(0), city_question(1)], max_new=12)
    short.max_new = 2

    class FailsAfterTwo:
        """The engine's decoder, whose third step raises."""

        def __init__(self, decoder):
            self.decoder, self.steps, self.way = decoder, 0, decoder.way

        def prepare(self):
            self.decoder.prepare()

        def __call__(self, *args):
            self.steps += 1
            if self.steps > 2:
                raise RuntimeError("the step broke")
            return self.decoder(*args)

    served.batcher.decoder = FailsAfterTwo(served.batcher.decoder)
    served._gather = lambda first, room: ([short, long], False) if first is short else ([], False)
    served._submit(short)
    assert short.done.wait(60) and long.done.wait(60)
    served.close()
    assert short.error is None and len(short.tokens) == 2  # it finished at the step before the failure
    assert isinstance(long.error, RuntimeError) and "the step broke" in str(long.error)


def test_complete_raises_at_once_when_the_worker_thread_is_gone(engine):
    import time

    from ragscale.programs.lm.engine import EngineStoppedError

    served = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)

    def die(first, room):
        raise SystemExit("the worker dies")  # not an Exception: nothing in the worker catches it

    served._gather = die
    lm = dspy.LM("local", engine=served, cache=False)
    began = time.monotonic()
    with pytest.raises(Exception, match="worker thread is not running") as raised:
        chat(lm, ask(EIFFEL), max_tokens=4)
    assert time.monotonic() - began < 10
    assert isinstance(raised.value.__cause__, EngineStoppedError)  # DSPy wraps it
    del served._gather  # the class's own again: the next request starts a new worker and is served
    assert chat(lm, ask(EIFFEL), max_tokens=4)


def test_a_shared_engine_frees_its_weights_when_its_last_holder_releases_it():
    import weakref

    from ragscale.programs.lm import load_lm, release_lm

    settings = {"max_tokens": 4, "cache": False, "weights": "fp32", "decode": "hf", "max_batch_size": 3}
    teacher, student = load_lm("smollm2-135m", **settings), load_lm("smollm2-135m", **settings)
    engine = teacher.engine
    assert student.engine is engine and chat(teacher, ask(EIFFEL))
    weights = weakref.ref(engine.model)
    release_lm(teacher)  # the student still holds it
    assert chat(student, ask(EIFFEL)) and weights() is not None
    release_lm(student)
    assert weights() is None  # freed, though the callers still hold their LMs
    with pytest.raises(Exception, match="was released"):
        chat(teacher, ask(EIFFEL))
    again = load_lm("smollm2-135m", **settings)
    assert again.engine is not engine and chat(again, ask(EIFFEL))
    release_lm(again)


def test_the_worker_prepares_its_decoder_again_whenever_it_goes_from_idle_to_busy(engine):
    """So that decode graphs left out for want of memory are compiled once there is room (``Decoder.prepare``)."""
    served = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    decoder, calls = served.batcher.decoder, []

    def prepare():
        calls.append(1)
        decoder.__class__.prepare(decoder)

    decoder.prepare = prepare
    lm = dspy.LM("local", engine=served, cache=False)
    for _ in range(2):
        assert chat(lm, ask(EIFFEL), max_tokens=4)
    served.close()
    assert len(calls) == 2  # each request that found it idle, the first when the worker started


def test_complete_waits_at_most_request_timeout_s(engine):
    served = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False, request_timeout_s=0.5)
    served._queue.put = lambda job: None  # the request is never served
    served._worker = __import__("threading").Thread(target=lambda: __import__("time").sleep(5), daemon=True)
    served._worker.start()
    lm = dspy.LM("local", engine=served, cache=False)
    with pytest.raises(Exception, match=r"no completion within 0\.5 s"):
        chat(lm, ask(EIFFEL), max_tokens=4)


def test_rows_that_are_decoding_keep_stepping_while_a_long_prompt_is_prefilled(engine, jobs_for, generate):
    """A prompt of several chunks joins a decoding row: the row steps between the chunks, and both get the
    tokens they get alone."""
    import time

    notes = "\n".join(f"Note {i}: the museum of Ann {i} is in {CITIES[i % 8]}." for i in range(40))
    prompts = [city_question(3), f"{notes}\n\n{city_question(1)}"]
    alone = [
        generate(TorchEngine(engine.model, engine.tokenizer, prefix_cache=False).batcher, jobs_for([p], max_new=24))[0]
        for p in prompts
    ]
    served = TorchEngine(engine.model, engine.tokenizer, prefix_cache=False)
    served.batcher.chunk_tokens = 64
    decoding, joining = jobs_for(prompts, max_new=24)
    assert len(joining.ids) > 4 * 64
    served._submit(decoding)
    while not decoding.tokens:
        time.sleep(0.005)
    served._submit(joining)
    assert decoding.done.wait(60) and joining.done.wait(60)
    served.close()
    assert served.work["steps between prefill chunks"] >= 4
    assert [engine.tokenizer.decode(j.tokens) for j in (decoding, joining)] == alone
