"""Teleprompters in DSPy's shape: each a ``dspy.teleprompt.Teleprompter`` registered by its name, built with its own
settings and compiled by ``compile(student, *, trainset, valset=None)``, the same program as ``compile_program``."""

import dspy
import pytest
from doubles import FixedRetriever, examples
from dspy.teleprompt.teleprompt import Teleprompter as DSPyTeleprompter
from dspy.utils import DummyLM

from ragscale.optimizers.base import Teleprompter
from ragscale.optimizers.graders import compile_graders, graders
from ragscale.optimizers.method import compile_method_with
from ragscale.optimizers.metrics import em_metric
from ragscale.optimizers.teleprompters import OPTIMIZERS, TEACHER_OPTIMIZERS, compile_program, teleprompter
from ragscale.programs import CRAG, DRAG


def test_every_registered_optimizer_is_a_dspy_teleprompter_under_its_own_name():
    assert list(OPTIMIZERS) == ["none", "labeled", "bootstrap", "random-search", "mipro", "gepa"]
    assert all(issubclass(cls, DSPyTeleprompter) and cls.name == name for name, cls in OPTIMIZERS.items())


def test_the_teleprompters_that_take_a_teacher_are_those_whose_constructor_names_one():
    assert TEACHER_OPTIMIZERS == ("bootstrap", "random-search", "mipro", "gepa")


def test_a_teleprompter_built_by_hand_compiles_the_program_compile_program_compiles_by_name():
    program = DRAG(FixedRetriever(), k=3)
    built = OPTIMIZERS["labeled"](metric=em_metric, shots=2, docs_per_demo=1, seed=3)
    by_hand = built.compile(program, trainset=examples())
    by_name = compile_program(program, examples(), optimizer="labeled", metric=em_metric, shots=2, docs_per_demo=1,
                              seed=3)  # fmt: skip
    assert [d.toDict() for d in by_hand.answer.demos] == [d.toDict() for d in by_name.answer.demos]
    assert len(by_hand.answer.demos) == 2 and all(len(d.documents) == 1 for d in by_hand.answer.demos)
    assert program.answer.demos == []


def test_a_teleprompter_takes_only_its_own_settings_and_the_registry_passes_it_only_those():
    with pytest.raises(TypeError, match="budget"):
        OPTIMIZERS["labeled"](metric=em_metric, shots=2, docs_per_demo=1, budget="light")
    built = teleprompter("labeled", metric=em_metric, shots=2, docs_per_demo=1, budget="light", num_candidates=8)
    assert (type(built).__name__, built.shots, built.seed) == ("Labeled", 2, 0)
    assert teleprompter("gepa", metric=em_metric, shots=0, docs_per_demo=0, budget="12").budget == "12"


def test_invalid_settings_fail_naming_what_is_valid():
    with pytest.raises(ValueError, match=r"shots \(-1\) and docs_per_demo \(1\) must be >= 0"):
        OPTIMIZERS["bootstrap"](metric=em_metric, shots=-1, docs_per_demo=1)
    with pytest.raises(ValueError, match="budget must be one of light, medium, heavy or a number of metric calls"):
        OPTIMIZERS["gepa"](metric=em_metric, shots=0, docs_per_demo=0, budget="lots")
    with pytest.raises(ValueError, match="unknown optimizer 'adam'; valid choices: none, labeled, bootstrap"):
        teleprompter("adam", metric=em_metric, shots=1, docs_per_demo=1)


def test_replaced_copies_a_teleprompter_with_some_settings_changed_and_refuses_one_it_has_not():
    built = OPTIMIZERS["bootstrap"](metric=em_metric, shots=2, docs_per_demo=3, threads=2)
    copied = built.replaced(docs_per_demo=0)
    assert (copied.docs_per_demo, copied.threads, built.docs_per_demo) == (0, 2, 3)
    with pytest.raises(TypeError, match="Bootstrap takes no budget"):
        built.replaced(budget="light")


def test_a_built_teleprompter_compiles_a_methods_graders_by_a_copy_of_itself_on_their_labels():
    from pathlib import Path

    from ragscale.data import load_jsonl

    train = load_jsonl(Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_mini.jsonl")
    built = OPTIMIZERS["labeled"](metric=em_metric, shots=4, docs_per_demo=2)
    compiled = compile_method_with(built, CRAG(lambda query, k: [], k=2), train)
    (grader,) = graders(compiled)
    assert sorted(d.grade for d in grader.demos) == ["irrelevant", "irrelevant", "relevant", "relevant"]
    untouched = CRAG(lambda query, k: [], k=2)
    none = OPTIMIZERS["none"](shots=4, docs_per_demo=0)
    assert compile_graders(untouched, train, optimizer=none, shots=4) is untouched
    assert untouched.grade.demos == []


def test_any_dspy_teleprompter_compiles_the_whole_program_as_it_does_any_program():
    lm = DummyLM([{"answer": "City 0"}] * 10)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        compiled = compile_method_with(dspy.LabeledFewShot(k=2), DRAG(FixedRetriever(), k=2), examples())
    assert len(compiled.answer.demos) == 2 and not isinstance(dspy.LabeledFewShot(k=2), Teleprompter)
