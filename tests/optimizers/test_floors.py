"""A compiled program is checked against its method's floors on training questions held back from compiling: one
that skips its defining step there is refused, one that keeps it carries the means measured."""

import dspy
import pytest
from compiling import following_up, multi_hop
from doubles import FixedRetriever, examples
from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.utils import DummyLM

from ragscale.optimizers.floors import CompilationFailedError, held_back_size
from ragscale.optimizers.method import check_loaded, compile_method
from ragscale.optimizers.metrics import em_metric
from ragscale.programs import RAG, IterDRAG, MultiQuery


def compiled_iterdrag(lm: DummyLM, trainset: list) -> IterDRAG:
    return compile_method(IterDRAG(FixedRetriever(), k=2, max_iterations=3), trainset, optimizer="bootstrap",
                          metric=em_metric, shots=2, docs_per_demo=5, lm=lm, adapter=dspy.ChatAdapter())  # fmt: skip


def test_an_iterdrag_that_answers_held_back_questions_with_no_follow_up_is_refused_naming_its_floor(caplog):
    lm = following_up(chains=frozenset({3}))
    for example in multi_hop(8)[6:]:  # the two held back: the compiled reader declines at once, as DRAG
        lm.answers[example.question] = {"follow_up": "none", "answer": example.answers[0]}
    with pytest.raises(
        CompilationFailedError, match=r"iterdrag .* 2 held-back .*questions_with_follow_up 0\.00 < "
    ) as refused:
        compiled_iterdrag(lm, multi_hop(8))
    assert "each of 3 demonstration sets" in str(refused.value)  # compiled again twice, from other traces
    assert [f"seed {seed}: questions_with_follow_up" in refused.value.shortfalls for seed in (0, 1, 2)] == [True] * 3
    assert "held-back question" not in caplog.text  # answered, with no follow-up: not failed


def test_an_iterdrag_that_asks_on_held_back_questions_carries_the_rate_and_was_compiled_without_them():
    compiled = compiled_iterdrag(following_up(chains=frozenset({3})), multi_hop(8))
    assert compiled.held_back_behaviour == {"questions_with_follow_up": 1.0}
    held = {example.question for example in multi_hop(8)[6:]}
    assert not held & {demo.question for demo in compiled.decompose.demos + compiled.synthesize.demos}


def test_only_a_compiled_method_with_floors_holds_questions_back_and_single_hop_ones_are_not_measured():
    assert held_back_size(RAG(FixedRetriever(), k=1), examples(8)) == 0
    assert held_back_size(IterDRAG(FixedRetriever(), k=1, max_iterations=2), examples(8)) == 2
    assert held_back_size(IterDRAG(FixedRetriever(), k=1, max_iterations=2), examples(3)) == 0  # too few to spare
    single_hop = [example.copy(type="single-hop") for example in examples(8)]
    lm = following_up()
    for example in single_hop[6:]:  # NQ-like questions may be answered without a follow-up
        lm.answers[example.question] = {"follow_up": "none", "answer": example.answers[0]}
    assert compiled_iterdrag(lm, single_hop).held_back_behaviour == {}
    none = compile_method(IterDRAG(FixedRetriever(), k=1, max_iterations=2), multi_hop(8), optimizer="none",
                          metric=em_metric, shots=2, docs_per_demo=5)  # fmt: skip
    assert none.held_back_behaviour == {}


def test_ragscale_run_ends_a_failed_compilation_with_its_message_and_a_nonzero_exit(monkeypatch, capsys, tmp_path):
    from ragscale.experiments.cli import main, runs

    def compiled_below_its_floor(*args, **kwargs):
        raise CompilationFailedError("compiled iterdrag fell below its floor on 4 held-back training questions")

    monkeypatch.setattr(runs, "run_experiment", compiled_below_its_floor)
    argv = ["run", "--method", "iterdrag", "--optimizer", "bootstrap", "--dataset", "hotpotqa", "--runs-dir", tmp_path]
    assert main([str(arg) for arg in argv]) == 1
    err = capsys.readouterr().err
    assert "ragscale run: the compilation failed: compiled iterdrag fell below its floor" in err
    assert "Traceback" not in err


def test_held_back_questions_the_program_fails_on_are_left_out_and_all_failing_is_said_not_taken_for_a_skip():
    with pytest.raises(CompilationFailedError, match=r"(?s)failed on all 2 held-back .* the first error: .*No more"):
        compile_method(MultiQuery(FixedRetriever(), k=1), examples(8), optimizer="labeled", metric=em_metric,
                       shots=2, docs_per_demo=5, lm=DummyLM([]))  # fmt: skip


def test_a_saved_program_is_held_to_its_floors_when_it_is_loaded(tmp_path):
    compiled_iterdrag(following_up(chains=frozenset({3})), multi_hop(8)).save(str(tmp_path / "iterdrag.json"))
    loaded = IterDRAG(FixedRetriever(), k=2, max_iterations=3)
    loaded.load(str(tmp_path / "iterdrag.json"))
    with dspy.context(lm=following_up(chains=frozenset({3})), adapter=dspy.ChatAdapter()):
        kept = check_loaded(loaded, multi_hop(8), optimizer="bootstrap")
    assert kept.held_back_behaviour == {"questions_with_follow_up": 1.0}
    declining = following_up()
    for example in multi_hop(8)[6:]:  # the held-back questions, answered at once
        declining.answers[example.question] = {"follow_up": "none", "answer": example.answers[0]}
    with dspy.context(lm=declining, adapter=dspy.ChatAdapter()):
        with pytest.raises(CompilationFailedError, match=r"questions_with_follow_up 0\.00 < floor 0\.50"):
            check_loaded(loaded, multi_hop(8), optimizer="bootstrap")


class ChainImitatingEngine(DummyEngine):
    """``following_up(chains={3})``'s replies, except that on a held-back question a prompt whose demonstrations
    show no chain of two ("Which country holds city ...") is answered at once, with no follow-up."""

    def _complete_messages(self, messages):
        held = [i for i, ex in enumerate(multi_hop(8)) if i >= 6 and ex.question in messages[-1]["content"]]
        shown = any("Which country holds city" in message["content"] for message in messages[:-1])
        if held and not shown:
            return super()._complete_messages([*messages[:-1], {"role": "user", "content": f"declining #{held[0]}"}])
        return super()._complete_messages(messages)


class ChainImitating(DummyLM):
    """A reader that decomposes a question as far as its demonstrations show (see ``ChainImitatingEngine``)."""

    def __init__(self):
        super().__init__(following_up(chains=frozenset({3})).answers)
        for i, example in enumerate(multi_hop(8)[6:], start=6):
            self.answers[f"declining #{i}"] = {"follow_up": "none", "answer": example.answers[0]}
        self._engine_spec = ChainImitatingEngine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)

    def copy(self, **kwargs):
        copied = super().copy(**kwargs)
        copied._engine_spec = ChainImitatingEngine(copied)
        copied._async_engine_spec = AsyncDummyEngine(copied._engine_spec)
        return copied


def test_a_compilation_below_its_floor_is_made_again_from_other_traces_and_the_one_that_keeps_it_is_kept(caplog):
    """Seed 0 draws two training questions of one follow-up each; the reader, shown no chain of two, declines the
    held-back questions. Seed 1 draws the question with a chain of two, and the reader asks."""
    compiled = compiled_iterdrag(ChainImitating(), multi_hop(8))
    assert compiled.held_back_behaviour == {"questions_with_follow_up": 1.0}
    assert "compiling again from other traces (seed 1)" in caplog.text
    assert "Where is landmark 3?" in {demo.question for demo in compiled.decompose.demos}
