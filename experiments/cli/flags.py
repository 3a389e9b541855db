"""The command line's flags that name run settings, each defined once and added by every subcommand that takes it.

A flag is a name, its ``add_argument`` settings and its help; its default is ``RunConfig``'s (``config.DEFAULTS``),
which the help reads (``with_default``). ``ragscale run`` adds them without defaults (``argparse.SUPPRESS``: a flag
left out keeps the TOML's value or the config's default); ``sweep``, ``allocate``, ``compare``, ``ingest`` and ``ask``
add them with ``defaults=True``. A subcommand that asks something else of a flag (a sweep's teacher, the LM a stored
sweep ran with) changes its help, or its default, where it adds it (``add_flag``)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from ragscale.data import DATASETS
from ragscale.experiments.config import CORPUS_HELP, DEFAULTS, with_default
from ragscale.optimizers.metrics import METRICS
from ragscale.optimizers.teleprompters import OPTIMIZERS
from ragscale.programs import PROGRAMS
from ragscale.programs.lm import ADAPTERS, SERVER_RETRIES
from ragscale.programs.lm.models import DEFAULT_LM, WEIGHTS
from ragscale.programs.retrieval import RETRIEVERS

LM_HELP = "a preset, a local HF model dir, a .gguf file, or openai/<model> with --api-base"
METHOD_DEFAULTS_HELP = "; ".join(
    f"{method} read by {DEFAULT_LM} is compiled with "
    + ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in settings.items())
    + " unless they are given"
    for method, settings in ((name, cls.compile_defaults) for name, cls in PROGRAMS.items())
    if settings
)
"""What ``ragscale run``'s ``--teacher``, ``--shots`` and ``--train-limit`` default to for a method with its own
compile settings (``config.with_method_defaults``); said in ``--teacher``'s help."""


def _model_flags() -> dict[str, dict[str, Any]]:
    """The LM that answers, the one that teaches, and how prompts are written to them."""
    return {
        "--lm": {"help": with_default(LM_HELP, "lm")},
        "--teacher": {
            "help": "an LM (e.g. qwen2.5-coder-1.5b) that runs the teacher program of bootstrap, random-search or "
            "mipro: its traces become the demonstrations of --lm (default: --lm itself; " + METHOD_DEFAULTS_HELP + ")"
        },
        "--api-base": {"help": "URL of an OpenAI-compatible server (vLLM, SGLang)"},
        "--teacher-api-base": {"help": "URL of the server of an openai/<model> --teacher"},
        "--weights": {
            "choices": WEIGHTS,
            "help": "layout of a local model's linear layers on CPU: auto (the default: the fastest whose answers "
            "match fp32's on this CPU), fp32 (oneDNN-packed float32, the reference), int8 (int8 weights for decode "
            "steps), bf16 (bfloat16), int8-bf16 (int8 for decoding, bfloat16 for prefill), int4-bf16 (4-bit for "
            "decoding: faster, further from fp32's answers), dense (torch's)",
        },
        "--adapter": {
            "choices": sorted(ADAPTERS),
            "help": with_default("how prompts are formatted and parsed", "adapter"),
        },
        "--reflection-lm": {
            "help": "gepa: the LM that reads the feedback and rewrites instructions (default: the teacher, else --lm)"
        },
        "--no-cache": {"dest": "cache", "action": "store_false", "help": "bypass the DSPy LM cache"},
    }


def _method_flags() -> dict[str, dict[str, Any]]:
    """The method, its documents and iterations, and how it is compiled."""
    return {
        "--method": {"choices": sorted(PROGRAMS), "help": "the RAG method"},
        "--optimizer": {"choices": sorted(OPTIMIZERS), "help": with_default("teleprompter", "optimizer")},
        "--docs": {"type": int, "help": with_default("documents retrieved per query (the paper's k)", "docs")},
        "--iterations": {
            "type": int,
            "help": with_default("iterations of a method that iterates (IterDRAG's n)", "iterations"),
        },
        "--budget": {"help": "gepa: light, medium, heavy, or a cap on metric calls (default: light)"},
        "--shots": {"type": int, "help": with_default("demonstrations per predictor (the paper's m)", "shots")},
        "--docs-per-demo": {"type": int, "help": with_default("documents kept in each demonstration", "docs_per_demo")},
        "--metric": {"choices": sorted(METRICS), "help": with_default("metric the teleprompter optimises", "metric")},
    }


def _data_flags() -> dict[str, dict[str, Any]]:
    """The questions, and what is searched for them."""
    return {
        "--dataset": {"choices": list(DATASETS), "help": "dataset folder under --data-dir"},
        "--limit": {"type": int, "help": "evaluate on the first N questions"},
        "--train-limit": {"type": int, "help": with_default("compile on the first N train questions", "train_limit")},
        "--data-dir": {"type": Path, "help": "datasets folder (default: RAGSCALE_DATA_DIR or ../shared/datasets)"},
        "--eval-file": {"type": Path, "help": "evaluate on this JSONL instead of dev.jsonl"},
        "--retriever": {
            "choices": RETRIEVERS,
            "help": with_default("hybrid is dense + BM25, fused by RRF", "retriever"),
        },
        "--corpus": {"help": CORPUS_HELP},
        "--chroma-url": {"help": "a chromadb server (default: embedded, under runs/)"},
    }


REQUEST_TIMEOUT_HELP = (
    "how long each try of a call to a server (the LM, the teacher, the reflection LM, --chroma-url, a VLM) waits for "
    f"its answer; an LM call is tried {1 + SERVER_RETRIES} times, so it gives up after {1 + SERVER_RETRIES} x SECONDS "
    f"+ {2**SERVER_RETRIES - 1} s (DSPy waits 1 s, 2 s, ... between tries), and a question whose call gave up fails "
    "(a rerun asks it again)"
)
"""The help of ``--request-timeout``."""


def seconds(text: str) -> float:
    """A flag's positive, finite number of seconds; argparse's usage error (exit 2) names the value otherwise."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _server_flags() -> dict[str, dict[str, Any]]:
    """How long a call to a server may wait."""
    return {
        "--request-timeout": {
            "type": seconds,
            "metavar": "SECONDS",
            "help": with_default(REQUEST_TIMEOUT_HELP, "request_timeout"),
        },
    }


def _run_flags() -> dict[str, dict[str, Any]]:
    """Where a run is kept, and how it runs."""
    return {
        "--runs-dir": {"type": Path, "help": with_default("MLflow store, indexes, artifacts", "runs_dir")},
        "--threads": {"type": int, "help": with_default("questions answered in parallel", "threads")},
        "--seed": {"type": int, "help": with_default("random seed", "seed")},
        "--run-name": {"help": "MLflow run name (default: method-optimizer-dataset-lm-time)"},
        "--trace": {
            "action": "store_true",
            "help": "MLflow traces of every question's module and LM calls, linked to the run (off: it costs time)",
        },
        "--no-autolog": {
            "dest": "autolog",
            "action": "store_false",
            "help": "no DSPy compile and evaluation logging (mlflow.dspy.autolog's log_compiles, log_evals) while "
            "compiling",
        },
        "--no-progress": {"dest": "progress", "action": "store_false", "help": "no progress bar"},
    }


def flags() -> dict[str, dict[str, Any]]:
    """Every shared flag's ``add_argument`` settings, by its name."""
    return {**_model_flags(), **_method_flags(), **_data_flags(), **_server_flags(), **_run_flags()}


def dest_of(name: str, settings: dict[str, Any]) -> str:
    """The attribute a flag sets: its ``dest``, else its name without dashes, ``-`` as ``_``."""
    return settings.get("dest", name.lstrip("-").replace("-", "_"))


def add_flag(
    parser: argparse.ArgumentParser, name: str, *, defaults: bool = False, known: dict | None = None, **changes: Any
) -> None:
    """Add the shared flag ``name`` to ``parser`` (``known``: ``flags()``, when it is already built). ``defaults``
    gives it ``RunConfig``'s default when it has one; ``changes`` replace its settings (``help``, ``default``,
    ``required``)."""
    settings = dict((known if known is not None else flags())[name])
    dest = dest_of(name, settings)
    settings["dest"] = dest
    if defaults and dest in DEFAULTS and settings.get("action") is None:
        settings["default"] = DEFAULTS[dest]
    settings.update(changes)
    parser.add_argument(name, **settings)


def add_flags(parser: argparse.ArgumentParser, *names: str, defaults: bool = False) -> None:
    """Add the shared flags ``names`` to ``parser``, in that order (``add_flag``)."""
    known = flags()
    for name in names:
        add_flag(parser, name, defaults=defaults, known=known)
