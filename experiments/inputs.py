"""A run's inputs and outputs, checked before any model loads.

Loading a model takes from seconds to minutes, and a run reads its data only after that (and writes its summary JSON
only when it has finished), so a wrong path or a broken file would otherwise cost the load, or the whole run, before
it shows. Each check here raises ``ConfigError`` (exit code 2 in the CLI) naming the flag and the file, line, field
or value at fault:

- ``check_inputs(config)``: the model name (a path must be a model folder or a whole GGUF file), the data folder
  holding the dataset, every line of the train and evaluation files (``read_jsonl``: JSON, UTF-8, the schema, unique
  question ids), the corpus the run searches (every line of a corpus file) and ``docs`` against its passages, and
  the runs directory writable, and the servers it names by URL answering (``reach.check_reachable``: ``--api-base``,
  of whose replicas one is enough, ``--teacher-api-base``, ``--chroma-url``); it returns the corpus it read, which
  the run then searches;
- ``check_lm(name, flag)``: a model given as a path, without loading it;
- ``check_writable_dir(path, flag)`` and ``check_output_file(path, flag)``: a folder or a file path that the command
  will write, created (the folder) and tried with a scratch file now.

The CLI calls them first in every command that loads a model or writes a file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ragscale.data import DATASETS, DatasetError, read_jsonl
from ragscale.data.corpora import Corpus, CorpusError, load_corpus
from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.reach import answering, check_reachable, is_http
from ragscale.programs import method_named
from ragscale.programs.lm.gguf_header import check_gguf
from ragscale.programs.lm.models import PRESETS, resolve


def check_inputs(config: RunConfig) -> Corpus | None:
    """Everything of ``config`` that can be checked without loading a model (see the module docstring); the runs
    directory is created, so it is checked last, once nothing else is wrong. Returns the corpus the run searches,
    read to check it, for the run to search (``run_experiment(corpus=...)``); None for a method that retrieves
    nothing."""
    check_lm(config.lm, "--lm")
    if config.teacher is not None:
        check_lm(config.teacher, "--teacher")
    if config.reflection_lm is not None:
        check_lm(config.reflection_lm, "--reflection-lm")
    check_servers(config)
    train, evalset = read_examples(config)
    corpus = None
    if method_named(config.method).retrieves:  # one that retrieves nothing reads no corpus
        corpus = check_docs(config, train, evalset)
    check_writable_dir(config.runs_dir, "--runs-dir")
    return corpus


def check_lm(name: str, flag: str = "--lm") -> None:
    """A model named by a path exists and can be loaded: a folder with ``config.json`` or a whole GGUF file
    (``models.resolve``, then ``check_gguf``, which reads only the GGUF header). Presets and server models
    (``openai/...``) are checked when they load, which for them fails at once."""
    if name.startswith("openai/") or name in PRESETS:
        return
    try:
        path = resolve(name)
        if path.is_file():
            check_gguf(path)
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(f"{flag} {name!r}: {exc}") from exc


def check_servers(config: RunConfig) -> None:
    """Every server ``config`` names by URL answers (``reach.check_reachable``). A sweep's ``api_base`` may name
    several replicas, comma-separated: one that answers is enough (the sweep warns about the others and runs
    without them: ``sweep/replicas.py``), none answering is the first one's error."""
    urls = [url.strip() for url in (config.api_base or "").split(",") if url.strip()]
    live, dead = answering(urls, "--api-base", "openai")
    if dead and not live:
        raise dead[0]
    if is_http(config.teacher_api_base):
        check_reachable(config.teacher_api_base, "--teacher-api-base", "openai")
    chroma = config.chroma_url
    if chroma and "://" not in chroma:  # host:port, as the dense index takes it
        chroma = f"http://{chroma}"
    if is_http(chroma):
        check_reachable(chroma, "--chroma-url", "chroma")


def read_examples(config: RunConfig) -> tuple[list[dict], list[dict]]:
    """The (train, eval) records a run of ``config`` reads, cut to ``train_limit`` and ``limit`` as the runner cuts
    them; every line of both files is checked (``read_jsonl``), and a missing dataset folder names what the data
    folder holds instead."""
    needed = [config.train_path] if config.eval_file is not None else [config.train_path, config.eval_path]
    missing = [path for path in needed if not path.exists()]
    if missing:
        raise ConfigError(_missing_data(config, missing))
    files = [(config.train_path, "--data-dir"), (config.eval_path, "--eval-file" if config.eval_file else "--data-dir")]
    records = []
    for path, flag in files:
        try:
            records.append(read_jsonl(path))
        except DatasetError as exc:
            raise ConfigError(f"{flag}: {exc}") from exc
    train, evalset = records
    return train[: config.train_limit], evalset[: config.limit]


def _missing_data(config: RunConfig, missing: list[Path]) -> str:
    where = f"the data folder {config.data_dir} (--data-dir, else $RAGSCALE_DATA_DIR or ../shared/datasets)"
    if not config.data_dir.is_dir():
        return f"{where} is not a directory" if config.data_dir.exists() else f"{where} does not exist"
    names = ", ".join(str(path.relative_to(config.data_dir)) for path in missing)
    present = [name for name in DATASETS if (config.data_dir / name).is_dir()]
    holds = f"it holds {', '.join(present)}" if present else f"it holds none of {', '.join(DATASETS)}"
    return f"{where} has no {names} for --dataset {config.dataset}; {holds}"


def check_docs(config: RunConfig, train: list[dict], evalset: list[dict]) -> Corpus:
    """The corpus the run searches can be read (``data.corpora``: every line of a corpus file is checked) and
    holds at least ``docs`` passages: more can never be retrieved, and a number far beyond the corpus is a typo.
    Returns it."""
    corpus = corpus_for(config, train, evalset)
    if config.docs > len(corpus):
        raise ConfigError(f"--docs {config.docs} is more than the {len(corpus)} passages of --corpus {corpus.name}")
    return corpus


def corpus_for(config: RunConfig, train, evalset) -> Corpus:
    """The corpus the config names (``data.corpora``), with an evaluation file's own paragraphs added; a corpus
    that cannot be read is a ConfigError naming it."""
    try:
        corpus = load_corpus(config.corpus, config.data_dir, questions=[*train, *evalset])
    except CorpusError as exc:
        message = str(exc)  # one that names the flag already is not prefixed again
        raise ConfigError(message if message.startswith("--corpus") else f"--corpus {message}") from exc
    return corpus.with_paragraphs(evalset) if config.eval_file is not None else corpus


def check_writable_dir(path: Path, flag: str) -> None:
    """``path`` is a folder this process can write files in: created if missing (with its parents), then tried with
    a scratch file that is removed at once."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {path} is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".ragscale-write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write there ({exc.strerror or exc})") from exc


def check_output_file(path: Path, flag: str) -> None:
    """A file the command writes when it ends (``write_json`` replaces it by a rename in its folder): not a folder,
    and its folder writable (created if missing), so a run cannot finish only to fail writing its result."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; give a file path")
    check_writable_dir(path.parent, f"{flag} {path}: its folder")
