"""The scale-out path: the same DSPy program against an OpenAI-compatible server given by model name and URL."""

import json

import dspy
import pytest
from servers import ChatCompletions, serving_in_thread

from ragscale.programs.lm import chat, context_window, count_tokens, load_lm, meter


@pytest.fixture
def server_url():
    ChatCompletions.received = []
    with serving_in_thread(ChatCompletions) as url:
        yield f"{url}/v1"


def test_a_program_runs_against_a_local_openai_compatible_server_and_is_metered(server_url):
    lm = load_lm("openai/test", api_base=server_url, cache=False)
    program = dspy.Predict("question -> answer")
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)), meter() as usage:
        prediction = program(question="What is the capital of France?")
    assert prediction.answer == "Paris"
    [request] = ChatCompletions.received
    assert request["path"] == "/v1/chat/completions"
    assert request["model"] == "test"
    assert "What is the capital of France?" in json.dumps(request["messages"])
    assert usage.calls == 1
    assert usage.output_tokens == 7
    assert usage.input_tokens > 10


def test_a_server_lm_needs_an_address_and_approximates_tokens():
    with pytest.raises(ValueError, match="api_base"):
        load_lm("openai/test")
    lm = load_lm("openai/test", api_base="http://127.0.0.1:9/v1", context_window=4096)
    assert count_tokens(lm, "x" * 41) == 11
    assert context_window(lm) == 4096


def test_a_cached_server_answer_is_metered_with_its_original_tokens(server_url):
    lm = load_lm("openai/test", api_base=server_url, cache=True)
    question = [{"role": "user", "content": "Which country has Paris? Say France."}]
    with meter() as usage:
        first = chat(lm, question)
        again = chat(lm, question)
    assert first == again
    assert len(ChatCompletions.received) == 1
    assert [r.cached for r in usage.records] == [False, True]
    assert usage.records[1].input_tokens == usage.records[0].input_tokens > 0
    assert usage.records[1].output_tokens == usage.records[0].output_tokens == 7
