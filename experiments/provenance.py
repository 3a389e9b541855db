"""What produced a run: the code, the libraries, the machine, the model files and the data files.

A run's configuration does not say which code ran it, on which libraries and hardware, with which weights or on
which version of its data files; two runs of one configuration can differ in any of them. ``provenance_tags``
gives them as MLflow tags (``ragscale.provenance.*``): the ragscale version and, run from a git checkout, its
commit and whether the work tree had uncommitted changes; the versions of ``PACKAGES``; the CPU model and the
flags that pick the engine's code paths, and the GPU; the sha256 of the model files of the LM, the teacher and
GEPA's reflection LM (a preset's pinned one, checked when it was assembled; a local file's, computed once per
process); the sha256 of the corpus searched. ``data_files`` names the dataset files a run reads;
``tracking.log_data_files`` logs them as MLflow dataset inputs with their sha256. ``differing`` says which of these
tags tell a set of runs apart (``ragscale compare`` prints it under its table).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import subprocess
from pathlib import Path

from ragscale.data.corpora import is_corpus_file
from ragscale.experiments.config import RunConfig
from ragscale.programs.lm.models import PRESETS, resolve

PACKAGES = ("dspy", "torch", "transformers", "chromadb", "mlflow")
"""The libraries whose versions change what a run computes or how it is recorded."""

CODE_PATH_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")
"""The CPU flags that choose the engine's kernels and weight layouts."""

PREFIX = "ragscale.provenance."
"""Every provenance tag starts with it."""

REPO = Path(__file__).resolve().parents[1]


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def git_state(path: Path = REPO) -> dict[str, str]:
    """``git_commit`` and ``git_dirty`` ("true" when tracked files have uncommitted changes) of the checkout at
    ``path``; empty when it is not one (an installed wheel) or git is missing."""
    if not (path / ".git").exists():
        return {}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=True).stdout

    try:
        commit, status = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {"git_commit": commit.strip(), "git_dirty": str(bool(status.strip())).lower()}


def machine() -> dict[str, str]:
    """The CPU model, its code-path flags, and the GPU torch sees (``none`` without one)."""
    import torch

    from ragscale.programs.lm.layouts import cpu_flags, cpu_model

    flags = cpu_flags()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return {"cpu": cpu_model(), "cpu_flags": " ".join(f for f in CODE_PATH_FLAGS if f in flags), "gpu": gpu}


@functools.lru_cache(maxsize=16)
def _file_sha256(path: Path, size: int, mtime_ns: int) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 of a file, computed once per process for a given size and modification time."""
    stat = path.stat()
    return _file_sha256(path.resolve(), stat.st_size, stat.st_mtime_ns)


def model_sha256(name: str) -> str | None:
    """The sha256 of LM ``name``'s weights: a preset's pinned one, a local file's, or over a model directory's
    config and weight files (in name order); None for a model on a server."""
    preset = PRESETS.get(name)
    if preset is not None and preset.sha256:
        return preset.sha256
    try:
        path = resolve(name)
    except (ValueError, FileNotFoundError):
        return None
    if path.is_file():
        return file_sha256(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.iterdir() if p.suffix in (".json", ".safetensors", ".bin", ".gguf")):
        digest.update(f"{file.name}:{file_sha256(file)}\n".encode())
    return digest.hexdigest()


def provenance_tags(config: RunConfig, corpus=None) -> dict[str, str]:
    """The MLflow tags that say what produced a run of ``config`` (see the module docstring), with the sha256 of
    the ``corpus`` it searched (a ``CorpusIdentity``) where it searches one."""
    tags = {"version": version("ragscale"), **git_state()}
    if corpus is not None:
        tags["corpus_sha256"] = corpus.sha256
    tags.update({f"versions.{package}": version(package) for package in PACKAGES})
    tags.update(machine())
    models = (
        ("model", config.lm, config.api_base),
        ("teacher", config.teacher, config.teacher_api_base),
        ("reflection_lm", config.reflection_lm, None),
    )
    for role, name, server in models:
        if name:
            digest = None if server else model_sha256(name)
            tags[f"{role}_sha256"] = digest or f"served by {server or name}"
    return {PREFIX + key: value for key, value in tags.items()}


def data_files(config: RunConfig) -> dict[str, Path]:
    """The dataset files a run of ``config`` reads, by the MLflow dataset context they serve: the training file
    (demonstrations), the evaluation file, and a corpus given as a file."""
    files = {"train": config.train_path, "eval": config.eval_path}
    if is_corpus_file(config.corpus):
        files["corpus"] = Path(config.corpus)
    return {context: path for context, path in files.items() if path.is_file()}


def differing(tag_sets: list[dict[str, str]]) -> list[str]:
    """The provenance tags (without the prefix) whose values differ among ``tag_sets``."""
    keys = sorted({key for tags in tag_sets for key in tags if key.startswith(PREFIX)})
    return [key.removeprefix(PREFIX) for key in keys if len({tags.get(key) for tags in tag_sets}) > 1]
