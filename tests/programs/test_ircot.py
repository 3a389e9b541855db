"""IRCoT: retrieval interleaved with chain-of-thought, one sentence and one search at a time."""

import itertools

from method_doubles import HAPPY_PATHS, QUESTION, OverlapRetriever, prompt, run

from ragscale.programs.ircot import IRCoT


def test_ircot_stops_reasoning_at_the_sentence_that_gives_the_answer():
    retriever = OverlapRetriever()
    prediction, _ = run(IRCoT(retriever, k=2, max_steps=3), HAPPY_PATHS["ircot"][1])
    assert len(prediction.reasoning) == 2
    assert prediction.queries == [QUESTION, "Doctor Strange was directed by Scott Derrickson."]
    assert retriever.queries == prediction.queries  # no retrieval after the answer sentence


def test_ircot_stops_at_the_step_cap_and_keeps_at_most_max_passages():
    retriever = OverlapRetriever()
    replies = [{"next_sentence": s} for s in ("Doctor Strange is a film.", "Ed Wood was an actor.", "Paris.")]
    prediction, lm = run(IRCoT(retriever, k=3, max_steps=3, max_passages=4), [*replies, {"answer": "Denver"}])
    assert len(prediction.reasoning) == 3
    assert len(retriever.calls) == 4  # the question, then one query per sentence
    assert len(prediction.passages) == 4
    assert "Ed Wood was an actor." in prompt(lm, 2)  # each step sees the sentences so far


def test_ircot_appends_each_steps_passages_so_every_prompt_extends_the_last_ones_documents():
    program = IRCoT(OverlapRetriever(), k=2, max_steps=3)
    seen, reason = [], program.reason
    program.reason = lambda **inputs: seen.append(inputs["documents"]) or reason(**inputs)
    replies = [{"next_sentence": s} for s in ("Doctor Strange is a film.", "Ed Wood was an actor.", "Paris.")]
    prediction, _ = run(program, [*replies, {"answer": "Denver"}])
    assert len(seen) == 3 and len(seen[-1]) > len(seen[0])
    for before, after in itertools.pairwise(seen):
        assert after[: len(before)] == before  # the earlier documents, in the same order, come first
    titles = [p["title"] for p in prediction.passages]  # the reader gets the whole collection, in that order
    assert titles[: len(seen[-1])] == [document.split(":")[0] for document in seen[-1]]
