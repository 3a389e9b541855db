"""What a sweep's planning and running share, loaded once: the LM, the questions, the retriever the estimates search
with, what is finished (the ledger and the sweep-tagged MLflow runs) and the LM's speed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragscale.experiments.config import RunConfig
from ragscale.experiments.inputs import corpus_for
from ragscale.experiments.parts import build_retriever_for, load_examples, load_lm_for
from ragscale.experiments.sweep.grid import Grid
from ragscale.experiments.sweep.ledger import load_ledger, mlflow_rows
from ragscale.experiments.sweep.speed import Speed, measure_speed, speed_from_runs
from ragscale.programs import method_named
from ragscale.programs.retrieval import BM25Retriever

if TYPE_CHECKING:
    from ragscale.data.corpora import Corpus


@dataclass(frozen=True)
class Loaded:
    """What a caller has loaded already, which the sweep would otherwise load (tests, benchmarks): ``lm`` (an LM, or
    a list of them, one per replica; default: one per URL of ``base.api_base`` that answers, ``load_replicas``),
    ``retriever`` (instead of one built over the config's corpus), ``corpus`` (the corpus the retriever is built
    over, instead of reading it: ``check_inputs``'), ``examples`` ((train, eval) instead of reading the files; limits
    still apply) and ``speed`` (instead of one read from earlier runs or measured)."""

    lm: Any = None
    retriever: Any = None
    corpus: Corpus | None = None
    examples: tuple[Sequence, Sequence] | None = None
    speed: Speed | None = None


@dataclass
class Setup:
    """What planning and running share (see the module docstring), the corpus the retriever searches (each run is
    handed it with the retriever), and the sweep's folder."""

    sweep_dir: Path
    lm: Any
    train: list
    evalset: list
    retriever: Any
    corpus: Corpus | None
    ledger: dict[str, dict]
    tracked: dict[str, dict]
    speed: Speed


def load_setup(
    grid: Grid, base: RunConfig, sweep_dir: Path, loaded: Loaded, *, index: bool = True, progress: bool = False,
    deadline: float | None = None,
) -> Setup:  # fmt: skip
    """Load what a sweep needs, but what ``loaded`` gives. ``index`` builds the configured retriever (cached under
    ``<runs_dir>/indexes``) so that the estimates count the documents it really retrieves; without it (a plan
    alone) an in-memory BM25 over the same corpus stands in, which builds in seconds. ``deadline`` (the sweep's time
    limit) bounds the LM's timed calls (``measure_speed``)."""
    lm = loaded.lm if loaded.lm is not None else load_lm_for(base)
    train, evalset = load_examples(base, loaded.examples)
    retriever, corpus = loaded.retriever, loaded.corpus
    if retriever is None and any(method_named(m).retrieves for m in grid.methods):
        if corpus is None:
            corpus = corpus_for(base, train, evalset)
        if index:
            retriever = build_retriever_for(base, train, evalset, corpus=corpus, progress=progress)
        else:
            retriever = BM25Retriever(corpus.passages, key=corpus.key)
    ledger = load_ledger(sweep_dir)
    tracked = mlflow_rows(base.runs_dir)
    speed = loaded.speed
    if speed is None:
        speed = speed_from_runs({**tracked, **ledger}.values(), base.lm)
    if speed is None:
        speed = measure_speed(
            lm,
            next((p["text"] for ex in evalset for p in (getattr(ex, "paragraphs", None) or [])), ""),
            deadline=deadline,
        )
    return Setup(sweep_dir, lm, train, evalset, retriever, corpus, ledger, tracked, speed)
