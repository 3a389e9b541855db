"""A sweep's compiled programs: one kept from an earlier sitting is loaded, and held to its method's floors as one
compiled now is."""

import pytest
from compiling import following_up, multi_hop
from doubles import FixedRetriever

from ragscale.experiments.config import RunConfig
from ragscale.experiments.sweep.compiling import compile_once
from ragscale.optimizers.floors import CompilationFailedError


def test_a_kept_program_below_its_floor_is_refused_when_a_later_sitting_loads_it(tmp_path):
    config = RunConfig(method="iterdrag", dataset="hotpotqa", optimizer="bootstrap", adapter="chat", docs=2,
                       shots=2, docs_per_demo=5, runs_dir=tmp_path / "runs")  # fmt: skip
    saved = tmp_path / "compiled" / "iterdrag-m2.json"
    first = compile_once(config, multi_hop(8), lm=following_up(chains=frozenset({3})), retriever=FixedRetriever(),
                         saved=saved)  # fmt: skip
    assert saved.exists() and first.held_back_behaviour == {"questions_with_follow_up": 1.0}
    again = compile_once(config, multi_hop(8), lm=following_up(), retriever=FixedRetriever(), saved=saved)
    assert again.held_back_behaviour == {"questions_with_follow_up": 1.0}  # loaded, not compiled: the same demos
    declining = following_up()
    for example in multi_hop(8)[6:]:
        declining.answers[example.question] = {"follow_up": "none", "answer": example.answers[0]}
    with pytest.raises(CompilationFailedError, match="questions_with_follow_up"):
        compile_once(config, multi_hop(8), lm=declining, retriever=FixedRetriever(), saved=saved)
