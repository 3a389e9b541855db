"""The parts a run is made of, each loaded or built from its config: its LMs (the reader, a teacher), its examples,
its retriever over its corpus, its program, and that program compiled. ``run_experiment`` (``runner.py``) puts them
together; the sweep (``sweep/``) loads them once and hands them to each of its runs, and the benchmarks and the demo
load them as a run would."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ragscale.data import load_jsonl, load_split
from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.files import exclusive
from ragscale.experiments.inputs import corpus_for
from ragscale.optimizers.method import compile_method
from ragscale.optimizers.metrics import METRICS as SCORES
from ragscale.process import REQUEST_TIMEOUT_S
from ragscale.programs import build_program
from ragscale.programs.lm import load_lm
from ragscale.programs.retrieval import build_retriever

log = logging.getLogger(__name__)


TEACHER_DECODE = "hf"
"""How a teacher's (and a reflection LM's) decode steps run: transformers' forward. A teacher answers a few dozen
training questions once; compiling its decode graphs would cost a minute and a copy of its weights per batch size,
memory the reader's own graphs then could not have."""


def load_named_lm(
    name: str, *, api_base: str | None = None, max_tokens: int = 256, cache: bool = True, weights: str | None = None,
    decode: str | None = None, request_timeout: float = REQUEST_TIMEOUT_S,
):  # fmt: skip
    """``load_lm(name)``; an unknown or unusable LM name becomes a ConfigError naming it."""
    local = {"decode": decode} if decode and not name.startswith("openai/") else {}
    try:
        return load_lm(name, api_base=api_base, max_tokens=max_tokens, cache=cache, weights=weights,
                       request_timeout=request_timeout, **local)  # fmt: skip
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(f"--lm {name!r}: {exc}") from exc


def local_weight_bytes(lm) -> int | None:
    """The bytes of a local LM's weights as loaded (``layouts.weight_bytes``); None for a server or scripted LM."""
    model = getattr(getattr(lm, "engine", None), "model", None)
    if model is None:
        return None
    from ragscale.programs.lm.layouts import weight_bytes

    return weight_bytes(model)


def load_lm_for(config: RunConfig):
    """``load_named_lm`` with the config's LM settings."""
    return load_named_lm(
        config.lm, api_base=config.api_base, max_tokens=config.max_tokens, cache=config.cache, weights=config.weights,
        request_timeout=config.request_timeout,
    )  # fmt: skip


def teaches_itself(config: RunConfig) -> bool:
    """Whether the config's teacher is its reader: the same model on the same server (or both local). The reader
    then writes the traces itself, on its own engine, rather than on a second copy of its weights."""
    return config.teacher == config.lm and config.teacher_api_base == config.api_base


def load_teacher_for(config: RunConfig):
    """``load_named_lm`` of the config's teacher, on its own server if it has one, decoding by ``TEACHER_DECODE``."""
    return load_named_lm(
        config.teacher,
        api_base=config.teacher_api_base,
        max_tokens=config.max_tokens,
        cache=config.cache,
        weights=config.weights,
        decode=TEACHER_DECODE,
        request_timeout=config.request_timeout,
    )


def load_examples(config: RunConfig, given: tuple[Sequence, Sequence] | None = None) -> tuple[list, list]:
    """(train, eval) examples, read from the config's files unless ``given``, cut to ``train_limit`` and
    ``limit`` (the files' order, which is already shuffled)."""
    if given is None:
        train = load_split(config.dataset, "train", config.data_dir)
        if config.eval_file is not None:
            evalset = load_jsonl(config.eval_file)
        else:
            evalset = load_split(config.dataset, "dev", config.data_dir)
    else:
        train, evalset = given
    return list(train)[: config.train_limit], list(evalset)[: config.limit]


def build_retriever_for(config: RunConfig, train: Sequence, evalset: Sequence, *, corpus=None, progress=False):
    """The config's retriever over its corpus (``corpus``, the one its caller loaded, else ``corpus_for``); a caller
    that hands the retriever on hands on the corpus with it. Its indexes live under ``<runs_dir>/indexes``, named by
    the corpus's digest, so every run, dataset and sweep that searches one corpus shares them. Runs on one runs
    directory build their indexes one at a time, so two runs over the same corpus embed it once (the second finds it
    built) and never write one chromadb store together. ``progress`` draws a bar while an index is built."""
    if corpus is None:
        corpus = corpus_for(config, train, evalset)
    index_dir = config.runs_dir / "indexes"
    log.info("corpus %s: %d passages, sha256 %s (%s index under %s)", corpus.name, len(corpus), corpus.sha256,
             config.retriever, index_dir)  # fmt: skip
    with exclusive(index_dir / "build.lock"):
        retriever = build_retriever(
            corpus.passages, kind=config.retriever, index_dir=index_dir, chroma_url=config.chroma_url,
            key=corpus.key, progress=progress, timeout_s=config.request_timeout,
        )  # fmt: skip
    return retriever


def build_program_for(config: RunConfig, retriever):
    """The config's method with its documents per query (and its iterations, if it iterates) over ``retriever``."""
    return build_program(config.method, retriever, k=config.docs, iterations=config.iterations)


def compile_for(config: RunConfig, program, trainset: Sequence, lm, adapter=None, teacher_lm=None, reflection_lm=None):
    """Compile ``program`` on ``trainset`` with the configured teleprompter (``none`` returns it as it is), the
    teacher copy on ``teacher_lm`` when given; its Grade predictors (CRAG, Self-RAG) are then compiled on their own
    relevance labels (``compile_graders``), with the same teacher."""
    return compile_method(
        program, trainset, optimizer=config.optimizer, metric=SCORES[config.metric], shots=config.shots,
        docs_per_demo=config.docs_per_demo, threads=config.threads, lm=lm, adapter=adapter, seed=config.seed,
        teacher_lm=teacher_lm, reflection_lm=reflection_lm, budget=config.budget,
    )  # fmt: skip
