"""A sweep's compiled programs: one kept from an earlier sitting is loaded and held to its method's floors as one
compiled now is; one below its floor is set aside and its group compiled again."""

import pytest
from compiling import following_up, multi_hop
from doubles import FixedRetriever

from ragscale.experiments.config import RunConfig
from ragscale.experiments.sweep.compiling import compile_once
from ragscale.optimizers.floors import CompilationFailedError


def declining():
    """An LM that asks a follow-up on the training questions and answers the two held-back ones at once."""
    lm = following_up()
    for example in multi_hop(8)[6:]:
        lm.answers[example.question] = {"follow_up": "none", "answer": example.answers[0]}
    return lm


@pytest.fixture
def config(tmp_path):
    return RunConfig(method="iterdrag", dataset="hotpotqa", optimizer="bootstrap", adapter="chat", docs=2, shots=2,
                     docs_per_demo=5, runs_dir=tmp_path / "runs")  # fmt: skip


def test_a_kept_program_is_loaded_with_the_demonstrations_it_was_kept_with(config, tmp_path):
    saved = tmp_path / "compiled" / "iterdrag-m2.json"
    first = compile_once(config, multi_hop(8), lm=following_up(chains=frozenset({3})), retriever=FixedRetriever(),
                         saved=saved)  # fmt: skip
    kept = saved.read_bytes()
    assert first.held_back_behaviour == {"questions_with_follow_up": 1.0}
    again = compile_once(config, multi_hop(8), lm=following_up(), retriever=FixedRetriever(), saved=saved)
    assert saved.read_bytes() == kept and again.dump_state() == first.dump_state()  # loaded, not compiled again
    assert again.held_back_behaviour == {"questions_with_follow_up": 1.0}


def test_a_kept_program_below_its_floor_is_set_aside_and_its_group_compiled_again(config, tmp_path, caplog):
    saved = tmp_path / "compiled" / "iterdrag-m2.json"
    compile_once(config, multi_hop(8), lm=following_up(chains=frozenset({3})), retriever=FixedRetriever(),
                 saved=saved)  # fmt: skip
    kept = saved.read_bytes()
    with pytest.raises(CompilationFailedError, match=r"questions_with_follow_up 0\.00"):
        compile_once(config, multi_hop(8), lm=declining(), retriever=FixedRetriever(), saved=saved)
    assert (tmp_path / "compiled" / "iterdrag-m2.json.below-floor").read_bytes() == kept  # nothing kept is lost
    assert "the kept program iterdrag-m2.json is refused" in caplog.text
    assert not saved.exists()  # the compile done again fell below too, so nothing was kept in its place
    again = compile_once(config, multi_hop(8), lm=following_up(chains=frozenset({3})), retriever=FixedRetriever(),
                         saved=saved)  # fmt: skip
    assert saved.exists() and again.held_back_behaviour == {"questions_with_follow_up": 1.0}
