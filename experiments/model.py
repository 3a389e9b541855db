"""A compiled program as an MLflow model, with no pickle: logged as code and JSON, rebuilt when it is loaded.

MLflow's DSPy flavor saves a program with cloudpickle (also with ``use_dspy_model_save``), and loading a pickle runs
whatever it holds. A ragscale program is instead logged as a *models-from-code* pyfunc model: the code file
``model_code.py`` (MLflow runs it to load the model), the program's DSPy JSON state (``program.save``), and a
config (``config.json``; a ``model_config`` given to ``load_model`` is laid over it) that says how to rebuild the rest:

- ``method``, ``k`` and ``iterations``: the method, built as ``ragscale run`` builds it (``build_program``);
- ``lm``, ``api_base``, ``max_tokens``, ``temperature``, ``weights`` and ``adapter``: the LM it was compiled for (a
  local preset or path, or an ``openai/<model>`` on a server, whose URL ``load_model(uri, model_config={"api_base":
  ...})`` changes at load time), the settings it was loaded with, and how prompts are formatted;
- ``retriever``, ``corpus``, ``corpus_sha256``, ``data_dir``, ``index_dir`` and ``chroma_url``: what it searches.
  A dataset corpus (``hotpotqa``, ``all``, ...) or a corpus file travels as its name and sha256 and is read again
  where the model loads (``data_dir`` or the default data folder); any other corpus (a user's list of texts, the
  ``questions`` of a run) travels as a ``corpus.jsonl`` artifact. A corpus whose sha256 differs from the logged one
  is refused, naming both. The indexes are built where ``index_dir`` says (default ``~/.cache/ragscale/indexes``),
  or found there from an earlier load. A ``data_dir`` or ``index_dir`` that is not on the machine that loads the
  model (one logged elsewhere) gives way to the default, with a warning.

Only a registered method built with its ``k`` and iterations travels: a method of your own, or one built with another
setting (IRCoT's ``max_steps``, ...), is refused when logged, naming what it would lose.

``mlflow.pyfunc.load_model(uri).predict(x)`` answers a question (``{"question": ...}`` or a string) with a dict of
the prediction's fields, and a list of them, or a DataFrame with a ``question`` column, with a list of dicts. The
program itself is ``loaded.unwrap_python_model().program``.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ragscale.data import default_data_dir
from ragscale.data.corpora import CORPORA, QUESTIONS, load_corpus, read_corpus_file

log = logging.getLogger(__name__)

MODEL = "model"
"""The artifact path (MLflow's model name) a program is logged at: ``runs:/<run id>/model``."""

CONFIG_FILE = "config.json"
CORPUS_FILE = "corpus.jsonl"


@dataclass(frozen=True)
class Searched:
    """What a program searches, as a model carries it: the corpus (a ``data.corpora.Corpus``), the retriever kind
    (``RETRIEVERS``) and where its indexes live."""

    corpus: Any
    kind: str = "hybrid"
    index_dir: Path | None = None
    chroma_url: str | None = None
    data_dir: Path | None = None


def _travels_by_name(corpus) -> bool:
    """A dataset corpus, or a corpus file that is still there: read again where the model loads."""
    return (corpus.name in CORPORA and corpus.name != QUESTIONS) or Path(corpus.name).is_file()


LM_SETTINGS = ("max_tokens", "temperature", "weights")
"""What a model says of its LM beside the name and server: the settings ``load_lm`` makes it again with."""


def model_config(program, *, lm: Mapping[str, Any], adapter: str, searched: Searched | None) -> dict:
    """The config a logged program is rebuilt from (see the module docstring); ``lm`` is the LM's ``lm`` (its
    name), ``api_base`` and any of ``LM_SETTINGS`` (``programs.lm.lm_reference`` gives them for a loaded LM)."""
    _check_rebuilds(program)
    config: dict[str, Any] = {
        "method": program.name,
        "k": program.k,
        "iterations": getattr(program, "max_iterations", None) if program.iterates else None,
        "lm": lm["lm"],
        "api_base": lm.get("api_base"),
        **{key: lm[key] for key in LM_SETTINGS if lm.get(key) is not None},
        "adapter": adapter,
        "retriever": None,
    }
    if searched is not None:
        corpus = searched.corpus
        config.update(
            retriever=searched.kind,
            corpus=corpus.name if _travels_by_name(corpus) else CORPUS_FILE,
            corpus_sha256=corpus.sha256,
            data_dir=str(searched.data_dir) if searched.data_dir is not None else None,
            index_dir=str(searched.index_dir) if searched.index_dir is not None else None,
            chroma_url=searched.chroma_url,
        )
    return config


def _check_rebuilds(program) -> None:
    """``ValueError`` unless the method registered under the program's name, built with its ``k`` and iterations
    alone, is the program: a model rebuilds it so, and a setting it would lose is named rather than dropped."""
    from ragscale.programs import PROGRAMS, build_program

    if PROGRAMS.get(getattr(program, "name", None)) is not type(program):
        raise ValueError(
            f"{type(program).__name__} is not a registered method (ragscale.programs.PROGRAMS): a logged model is "
            "rebuilt by its name"
        )
    built = build_program(program.name, None, k=program.k, iterations=getattr(program, "max_iterations", 1))
    for key, value in vars(program).items():
        if key.startswith("_") or not isinstance(value, bool | int | float | str):
            continue  # DSPy's own state (_compiled), and components: the retriever, the predictors
        if getattr(built, key, value) != value:
            raise ValueError(
                f"{type(program).__name__}'s {key}={value!r} is not its default {getattr(built, key)!r}: a logged "
                "model rebuilds the method with its k and iterations only"
            )


def log_program(program, *, lm: Mapping[str, Any], adapter: str, searched: Searched | None) -> str:
    """Log ``program`` to MLflow's active run as the pyfunc model ``MODEL`` (code and JSON, no pickle); returns the
    model's URI. A program that retrieves needs ``searched``: a search function of the user's own cannot travel;
    neither can a method that is not registered, or one built with settings other than its k and iterations."""
    import mlflow

    if program.retrieves and searched is None:
        raise ValueError(
            f"{type(program).__name__} searches a retriever that cannot travel in an MLflow model (a function of "
            "your own): build it with ragscale.retriever(corpus) to log the program"
        )
    config = model_config(program, lm=lm, adapter=adapter, searched=searched)
    with tempfile.TemporaryDirectory() as folder:
        artifacts = {"program": str(Path(folder) / "program.json"), "config": str(Path(folder) / CONFIG_FILE)}
        program.save(artifacts["program"])
        Path(artifacts["config"]).write_text(json.dumps(config, indent=2), encoding="utf-8")
        if config.get("corpus") == CORPUS_FILE:
            artifacts["corpus"] = str(Path(folder) / CORPUS_FILE)
            with open(artifacts["corpus"], "w", encoding="utf-8") as out:
                for passage in searched.corpus.passages:
                    out.write(json.dumps(passage, ensure_ascii=False) + "\n")
        info = mlflow.pyfunc.log_model(
            name=MODEL,
            python_model=str(Path(__file__).with_name("model_code.py")),
            artifacts=artifacts,  # the config as a file: MLflow would log a model_config's keys as the run's params
            pip_requirements=[_requirement()],  # given: inferring them would load the model
        )
    return info.model_uri


def _requirement() -> str:
    """ragscale pinned to the version installed here (unpinned in a source tree that is not installed)."""
    try:
        return f"ragscale=={version('ragscale')}"
    except PackageNotFoundError:
        return "ragscale"


@dataclass
class Loaded:
    """A logged program rebuilt: the program, and the LM and adapter it answers with."""

    program: Any
    lm: Any
    adapter: Any

    def answer(self, question: str) -> dict[str, Any]:
        import dspy

        with dspy.context(lm=self.lm, adapter=self.adapter):
            prediction = self.program(question=question)
        return dict(prediction.items())


def load(overrides: Mapping[str, Any] | None, artifacts: Mapping[str, str]) -> Loaded:
    """The program of a logged model rebuilt from its artifacts: its config (``model_config``), with the
    ``model_config`` given to ``mlflow.pyfunc.load_model`` over it, and its JSON state (see the module docstring)."""
    from ragscale.programs import build_program
    from ragscale.programs.lm import load_lm, make_adapter

    config = {**json.loads(Path(artifacts["config"]).read_text(encoding="utf-8")), **(overrides or {})}
    retriever = _retriever(config, artifacts) if config.get("retriever") else None
    program = build_program(config["method"], retriever, k=config["k"], iterations=config.get("iterations") or 1)
    program.load(artifacts["program"])
    settings = {key: config[key] for key in LM_SETTINGS if config.get(key) is not None}
    lm = load_lm(config["lm"], api_base=config.get("api_base"), **settings)
    return Loaded(program, lm, make_adapter(config["adapter"]))


def _folder(config: Mapping[str, Any], key: str, default: Path) -> Path:
    """The folder ``config[key]`` names where it exists here; else ``default``, said in a warning (a model logged
    on another machine names that machine's folders)."""
    named = config.get(key)
    if not named:
        return default
    if Path(named).is_dir():
        return Path(named)
    log.warning("the model's %s %s is not on this machine: using %s (give model_config={%r: ...})", key, named,
                default, key)  # fmt: skip
    return default


def default_index_dir() -> Path:
    """Where a loaded model builds its indexes when its config names no folder."""
    return Path("~/.cache/ragscale/indexes").expanduser()


def _retriever(config: Mapping[str, Any], artifacts: Mapping[str, str]):
    from ragscale.programs.retrieval import build_retriever

    name = config["corpus"]
    if name == CORPUS_FILE:
        corpus = read_corpus_file(artifacts["corpus"])
    else:
        corpus = load_corpus(name, _folder(config, "data_dir", default_data_dir()))
    if corpus.sha256 != config["corpus_sha256"]:
        raise ValueError(
            f"corpus {name!r} has changed since the program was logged: sha256 {corpus.sha256} here, "
            f"{config['corpus_sha256']} logged"
        )
    index_dir = _folder(config, "index_dir", default_index_dir())
    return build_retriever(
        corpus.passages, kind=config["retriever"], index_dir=index_dir, chroma_url=config.get("chroma_url"),
        key=corpus.key,
    )  # fmt: skip


def questions(model_input: Any) -> tuple[list[str], bool]:
    """The questions of a ``predict`` input and whether it was one question: a string, a ``{"question"}`` dict, a
    list of either, or a DataFrame with a ``question`` column."""
    if isinstance(model_input, str | Mapping):
        return [_question(model_input)], True
    if hasattr(model_input, "to_dict") and hasattr(model_input, "columns"):  # a pandas DataFrame
        if "question" not in model_input.columns:
            raise ValueError(f"a DataFrame input needs a 'question' column, got {list(model_input.columns)}")
        return [str(q) for q in model_input["question"]], False
    if isinstance(model_input, list | tuple):
        return [_question(item) for item in model_input], False
    raise TypeError(
        f"predict takes a question, a {{'question': ...}} dict, a list of them or a DataFrame with a 'question' "
        f"column; got {type(model_input).__name__}"
    )


def _question(item: Any) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, Mapping) and isinstance(item.get("question"), str):
        return item["question"]
    raise ValueError(f"each input needs a string 'question', got {item!r:.200}")


def predict(loaded: Loaded, model_input: Any) -> dict[str, Any] | list[dict[str, Any]]:
    """The loaded program's answers to ``model_input`` (``questions``): one dict, or a list of them."""
    asked, single = questions(model_input)
    answers = [loaded.answer(question) for question in asked]
    return answers[0] if single else answers
