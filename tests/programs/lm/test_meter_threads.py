"""The meter follows DSPy's settings into worker threads: dspy.Parallel's (GEPA's evaluations) and copied contexts."""

import contextvars
from concurrent.futures import ThreadPoolExecutor

import dspy
from doubles import scripted_lm

from ragscale.programs.lm import chat, meter


def ask(lm, text: str) -> str:
    return chat(lm, [{"role": "user", "content": text}])


def test_calls_in_dspy_parallel_threads_and_copied_contexts_are_counted_and_meters_nest():
    lm = scripted_lm({})
    with meter() as outer:
        with meter() as inner:
            dspy.Parallel(num_threads=4)([(lambda i: ask(lm, f"q{i}"), (i,)) for i in range(6)])
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(contextvars.copy_context().run, ask, lm, f"r{i}") for i in range(3)]
            [f.result() for f in futures]
        with ThreadPoolExecutor(1) as pool:
            pool.submit(ask, lm, "a bare thread inherits nothing").result()
    assert inner.calls == 6
    assert outer.calls == 9
    assert ask(lm, "outside every block") and outer.calls == 9
