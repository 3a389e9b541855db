"""Compiling programs: the teleprompter registry, bootstrap, random search, MIPRO; compiled programs saved."""

import itertools
import re

import dspy
import pytest
from compiling import compile_iterdrag, following_up, multi_hop
from doubles import BEST, SECOND, FixedRetriever, examples, musique_example
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.utils import DummyLM

from ragscale.optimizers.demos import LabeledWithDocuments
from ragscale.optimizers.metrics import em_metric
from ragscale.optimizers.teleprompters import OPTIMIZERS, compile_program, keeping_behaviour
from ragscale.programs import DRAG, RAG, IterDRAG
from ragscale.programs.retrieval import format_passage


def answering(right: bool = True) -> DummyLM:
    """A DummyLM that answers every training question (rightly or not) and needs no follow-up."""
    return DummyLM(
        {ex.question: {"follow_up": "none", "answer": ex.answers[0] if right else "Nowhere"} for ex in examples()}
    )


def test_an_unknown_optimizer_fails_listing_the_valid_ones():
    with pytest.raises(ValueError, match="unknown optimizer 'magic'") as error:
        compile_program(
            DRAG(FixedRetriever(), k=5),
            examples(),
            optimizer="magic",
            metric=em_metric,
            shots=2,
            docs_per_demo=5,
        )
    for name in ("none", "labeled", "bootstrap", "random-search", "mipro", "gepa"):
        assert name in str(error.value)
    assert set(OPTIMIZERS) == {"none", "labeled", "bootstrap", "random-search", "mipro", "gepa"}


def test_bootstrap_compiles_drag_with_traces_holding_their_documents():
    program = DRAG(FixedRetriever(), k=3)
    compiled = compile_program(
        program,
        examples(),
        optimizer="bootstrap",
        metric=em_metric,
        shots=2,
        docs_per_demo=2,
        lm=answering(right=True),
        adapter=dspy.ChatAdapter(),
    )
    assert len(compiled.answer.demos) == 2
    assert all(demo.get("augmented") for demo in compiled.answer.demos)
    assert all(demo.documents == [format_passage(SECOND), format_passage(BEST)] for demo in compiled.answer.demos)
    assert program.answer.demos == []


def test_bootstrap_tops_up_with_labeled_demos_when_no_trace_passes_the_metric():
    compiled = compile_program(
        DRAG(FixedRetriever(), k=3),
        examples(),
        optimizer="bootstrap",
        metric=em_metric,
        shots=2,
        docs_per_demo=1,
        lm=answering(right=False),
        adapter=dspy.ChatAdapter(),
    )
    assert len(compiled.answer.demos) == 2
    assert not any(demo.get("augmented") for demo in compiled.answer.demos)
    assert all(
        demo.answer.startswith("City") and demo.documents == [format_passage(BEST)] for demo in compiled.answer.demos
    )


def test_bootstrap_runs_the_program_on_at_most_max_attempts_examples():
    lm = answering(right=False)
    compile_program(
        RAG(FixedRetriever(), k=1),
        examples(),
        optimizer="bootstrap",
        metric=em_metric,
        shots=2,
        lm=lm,
        adapter=dspy.ChatAdapter(),
        max_attempts=3,
        docs_per_demo=5,
    )
    assert len(lm.history) == 3


def test_the_bootstrap_teacher_is_shown_labeled_demonstrations_of_examples_it_is_not_run_on():
    import random

    lm = answering(right=True)
    compiled = compile_program(
        RAG(FixedRetriever(), k=1), examples(), optimizer="bootstrap", metric=em_metric, shots=2, lm=lm,
        adapter=dspy.ChatAdapter(), docs_per_demo=5,
    )  # fmt: skip
    shown = [ex.question for ex in random.Random(0).sample(examples(), 5)[:2]]  # the first shots, shuffled
    for call in lm.history:
        earlier, asked = call["messages"][:-1], call["messages"][-1]["content"]
        assert all(q in " ".join(m["content"] for m in earlier) for q in shown)
        assert not any(q in asked for q in shown)
    assert {d.question for d in compiled.answer.demos if d.get("augmented")}.isdisjoint(shown)


def test_bootstrap_compiles_iterdrag():
    compiled = compile_program(
        IterDRAG(FixedRetriever(), k=2, max_iterations=2),
        examples(),
        optimizer="bootstrap",
        metric=em_metric,
        shots=2,
        docs_per_demo=1,
        lm=answering(right=True),
        adapter=dspy.ChatAdapter(),
    )
    assert [d.follow_up for d in compiled.decompose.demos] == ["none", "none"]
    assert all(len(d.documents) == 1 for d in compiled.synthesize.demos)
    assert len(compiled.synthesize.demos) == 2


class RecallingDemos:
    """An engine that answers a landmark question rightly only when its prompt shows that question as a
    demonstration (it repeats the demonstration's answer), "Nowhere" otherwise, with ``fields`` added to every reply
    (ChatAdapter format): a student that scores higher with the demonstrations a candidate program carries."""

    def __init__(self, **fields: str):
        self.fields = fields

    def complete(self, request):
        texts = [m.text or "" for m in request.messages]
        asked = re.search(r"Where is landmark \d+\?", texts[-1])
        shown = [reply for prompt, reply in itertools.pairwise(texts[:-1]) if asked and asked[0] in prompt]
        fields = {"answer": re.search(r"City \d+", shown[0])[0] if shown else "Nowhere", **self.fields}
        output = "".join(f"[[ ## {name} ## ]]\n{value}\n\n" for name, value in fields.items()) + "[[ ## completed ## ]]"
        return Response(id=None, model="recalling", message=Message.assistant([TextPart(output)]), finish_reason="stop",
                        usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0))  # fmt: skip


def recalling(**fields: str) -> dspy.LM:
    return dspy.LM("local/recalling", engine=RecallingDemos(**fields), cache=False, num_retries=0)


def test_random_search_picks_a_bootstrapped_candidate_and_caps_its_demos_and_documents():
    student = recalling()  # the zero-shot candidate scores 0: a candidate with demonstrations wins
    compiled = compile_program(
        DRAG(FixedRetriever(), k=3),
        examples(4),
        optimizer="random-search",
        metric=em_metric,
        shots=2,
        docs_per_demo=1,
        lm=student,
        adapter=dspy.ChatAdapter(),
        num_candidates=1,
        teacher_lm=answering(right=True),
    )
    assert isinstance(compiled, DRAG)
    assert len(compiled.answer.demos) == 2 and all(demo.get("augmented") for demo in compiled.answer.demos)
    assert all(demo.answer == f"City {demo.question.split()[-1].rstrip('?')}" for demo in compiled.answer.demos)
    assert all(demo.documents == [format_passage(BEST)] for demo in compiled.answer.demos)  # the most relevant one


def test_the_bootstrap_of_random_search_and_mipro_shows_each_training_question_once_per_predictor():
    """Random search and MIPRO bootstrap their candidates with DSPy's BootstrapFewShot (``optimizers/search.py``:
    no labeled demonstrations), which keeps one call of each predictor per trace: IterDRAG's decomposition, called
    three times on every chain here, still shows three distinct questions."""
    student = IterDRAG(FixedRetriever(), k=2, max_iterations=3)
    bootstrap = dspy.BootstrapFewShot(
        metric=keeping_behaviour(em_metric, student), max_bootstrapped_demos=3, max_labeled_demos=0
    )
    with dspy.context(lm=following_up(chains=frozenset(range(6))), adapter=dspy.ChatAdapter()):
        compiled = bootstrap.compile(student, trainset=multi_hop(6))
    for name, predictor in compiled.named_predictors():
        questions = [demo.get("question") or demo.sub_question for demo in predictor.demos]  # a follow-up's own
        assert len(questions) == len(set(questions)) == 3, name


def test_a_saved_program_reloads_to_the_same_demos_and_predictions(tmp_path):
    retriever = FixedRetriever()
    compiled = compile_program(
        DRAG(retriever, k=2), examples(), optimizer="labeled", metric=em_metric, shots=2, docs_per_demo=5
    )
    path = tmp_path / "drag.json"
    compiled.save(str(path), save_program=False)
    reloaded = DRAG(retriever, k=2)
    reloaded.load(str(path))
    assert reloaded.answer.demos == [demo.toDict() for demo in compiled.answer.demos]
    lm = DummyLM({"Where is landmark 4?": {"answer": "City 4"}})
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        before, after = compiled(question="Where is landmark 4?"), reloaded(question="Where is landmark 4?")
    assert before.answer == after.answer == "City 4"
    assert lm.history[0]["messages"] == lm.history[1]["messages"]


def test_mipro_light_compiles_drag_with_proposed_instructions_and_bootstrapped_demos():
    proposals = {"observations": "o", "summary": "s", "program_description": "p", "module_description": "m"}
    lm = recalling(proposed_instruction="Answer in two words.", **proposals)
    compiled = compile_program(
        DRAG(FixedRetriever(), k=2),
        examples(6),
        optimizer="mipro",
        metric=em_metric,
        shots=2,
        docs_per_demo=1,
        lm=lm,
        adapter=dspy.ChatAdapter(),
        valset=examples(6),  # scored on the questions the demonstrations show, so a few-shot set wins
        teacher_lm=answering(right=True),
    )
    assert isinstance(compiled, DRAG)
    assert len(compiled.answer.demos) == 2 and all(demo.get("augmented") for demo in compiled.answer.demos)
    assert all(demo.answer == f"City {demo.question.split()[-1].rstrip('?')}" for demo in compiled.answer.demos)
    assert all(demo.documents == [format_passage(BEST)] for demo in compiled.answer.demos)
    system_prompts = [call["messages"][0]["content"] for call in lm.history]
    assert any("`observations`" in prompt for prompt in system_prompts)  # MIPRO's data-aware proposer ran


def test_mipro_without_optuna_fails_before_any_work_with_an_install_hint(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "optuna" else find_spec(name, *a))
    lm = DummyLM([])
    with pytest.raises(ImportError, match="pip install 'optuna"):
        compile_program(
            DRAG(FixedRetriever(), k=5),
            examples(),
            optimizer="mipro",
            metric=em_metric,
            shots=2,
            lm=lm,
            docs_per_demo=5,
        )
    assert lm.history == []


def test_a_saved_iterdrag_reloads_its_decomposition_demos(tmp_path):
    compiled = LabeledWithDocuments(4, 5).compile(
        IterDRAG(FixedRetriever(), k=2, max_iterations=3), trainset=[musique_example()]
    )
    path = tmp_path / "iterdrag.json"
    compiled.save(str(path), save_program=False)
    reloaded = IterDRAG(FixedRetriever(), k=2, max_iterations=3)
    reloaded.load(str(path))
    for name in ("decompose", "answer_sub", "synthesize"):
        saved = [demo.toDict() for demo in getattr(compiled, name).demos]
        assert getattr(reloaded, name).demos == saved and saved
    assert [d["follow_up"] for d in reloaded.decompose.demos] == ["Who wrote The Hobbit?"]


def test_a_right_iterdrag_trace_without_follow_ups_is_not_a_demonstration_for_a_multi_hop_question():
    compiled = compile_iterdrag(answering(right=True), multi_hop())
    assert compiled.decompose.demos == [] and compiled.answer_sub.demos == []
    bootstrapped = [d for d in compiled.synthesize.demos if d.get("augmented")]
    assert bootstrapped == []  # the synthesize demos left are the labeled top-up


def test_a_right_iterdrag_trace_with_a_follow_up_and_its_answer_is_kept():
    compiled = compile_iterdrag(following_up(), multi_hop())
    assert len(compiled.answer_sub.demos) == 2
    assert all(d.answer.startswith("City") for d in compiled.answer_sub.demos)
    assert all(d.get("augmented") for d in compiled.synthesize.demos)
    assert all(len(d.follow_ups) == 1 for d in compiled.synthesize.demos)


def test_the_behaviour_filter_applies_to_traces_only_not_to_scoring():
    program = IterDRAG(FixedRetriever(), k=3, max_iterations=3)
    metric = keeping_behaviour(em_metric, program)
    example = multi_hop(1)[0]
    skipped = dspy.Prediction(answer="City 0", sub_questions=[], intermediate_answers=[])
    assert metric(example, skipped, trace=[]) == 0.0 and metric(example, skipped) == 1.0
    assert keeping_behaviour(em_metric, RAG(FixedRetriever(), k=5)) is em_metric


def test_the_teacher_lm_writes_the_demonstrations_and_the_student_lm_answers_at_evaluation():
    student, teacher = answering(right=False), answering(right=True)
    compiled = compile_program(
        DRAG(FixedRetriever(), k=2),
        examples(),
        optimizer="bootstrap",
        metric=em_metric,
        shots=2,
        lm=student,
        adapter=dspy.ChatAdapter(),
        teacher_lm=teacher,
        docs_per_demo=5,
    )
    assert student.history == [] and teacher.history  # compiling ran the teacher only
    assert len(compiled.answer.demos) == 2 and all(d.get("augmented") for d in compiled.answer.demos)
    assert all(d.answer == f"City {d.question.split()[-1].rstrip('?')}" for d in compiled.answer.demos)
    with dspy.context(lm=student, adapter=dspy.ChatAdapter()):
        assert compiled(question=examples()[0].question).answer == "Nowhere"
    assert len(student.history) == 1


def test_a_teacher_needs_a_teleprompter_that_runs_one():
    with pytest.raises(ValueError, match=r"'labeled' runs no teacher.*bootstrap, random-search, mipro"):
        compile_program(
            DRAG(FixedRetriever(), k=5),
            examples(),
            optimizer="labeled",
            metric=em_metric,
            teacher_lm=answering(),
            shots=4,
            docs_per_demo=5,
        )


def test_a_bootstrapped_decomposition_shows_the_follow_ups_as_they_were_when_the_step_was_taken():
    compiled = compile_iterdrag(following_up(), multi_hop())
    for demo in compiled.decompose.demos:  # a trace keeps inputs by reference: later appends must not show
        if demo.follow_up == "none":
            assert len(demo.follow_ups) == 1
        else:
            assert demo.follow_ups == [] and demo.follow_up.startswith("Which city")
    assert compiled.decompose.demos


def test_gepa_compiles_within_its_metric_call_budget_with_feedback_that_names_what_went_wrong(monkeypatch, caplog):
    import logging

    import ragscale.optimizers.feedback as feedback
    import ragscale.optimizers.gepa as gepa

    caplog.set_level(logging.INFO, logger="ragscale.optimizers")

    program, calls = RAG(FixedRetriever(), k=1), []
    metric = feedback.with_feedback(em_metric, program)
    monkeypatch.setattr(gepa, "with_feedback", lambda m, p: lambda *a, **k: calls.append(1) or metric(*a, **k))
    train = [ex.copy(supporting_titles=["Elsewhere"]) for ex in examples(4)]
    proposed = "Answer with the city's name only."
    reflection = DummyLM([{"new_instruction": proposed}] * 20, adapter=dspy.JSONAdapter())  # GEPA asks for JSON
    compiled = compile_program(program, train, optimizer="gepa", metric=em_metric, lm=answering(right=False),
                               adapter=dspy.ChatAdapter(), budget="12", teacher_lm=reflection,
                               shots=4, docs_per_demo=5)  # fmt: skip
    used = compiled.detailed_results.total_metric_calls
    assert 0 < used <= 12 + len(train)  # checked between iterations: at most one minibatch and one evaluation over
    assert calls and reflection.history  # the feedback metric scored, the reflection LM proposed
    assert "gold answer is 'City" in reflection.history[0]["messages"][-1]["content"]
    assert f"GEPA used {used} metric calls (budget 12)" in caplog.text


def test_a_gepa_budget_is_a_named_level_or_a_number_of_metric_calls_and_a_reflection_lm_is_gepas_alone():
    from ragscale.experiments.config import ConfigError, RunConfig

    with pytest.raises(ConfigError, match="light, medium, heavy or a number"):
        RunConfig(method="rag", dataset="hotpotqa", optimizer="gepa", budget="lots")
    with pytest.raises(ConfigError, match="reflection_lm 'x' is GEPA's"):
        RunConfig(method="rag", dataset="hotpotqa", optimizer="bootstrap", reflection_lm="x")
    assert RunConfig(method="rag", dataset="hotpotqa", optimizer="gepa", budget="40").budget == "40"
