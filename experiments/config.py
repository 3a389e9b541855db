"""The typed configuration of one experiment run.

A `RunConfig` is built from CLI flags or from a TOML file under `runs/configs/` (flags override the file). It is
validated on construction: an unknown method, optimizer, dataset, adapter, retriever or metric fails naming the
valid choices, and a value of the wrong type (from a TOML file or a Python caller) fails naming the field.
`asdict(config)` is logged to MLflow whole, so a run can be rerun from its params (`to_toml`). What the config
points at (the LM, the data files, the runs directory) is checked before the model loads by `inputs.check_inputs`,
and the LM name again by `load_lm` when the runner loads it (a preset, a local directory, a .gguf file or an
OpenAI-compatible server model).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ragscale.data import DATASETS, default_data_dir
from ragscale.data.corpora import corpus_name
from ragscale.optimizers.metrics import METRICS
from ragscale.optimizers.teleprompters import GEPA_BUDGETS, OPTIMIZERS, TEACHER_OPTIMIZERS
from ragscale.process import REQUEST_TIMEOUT_S
from ragscale.programs import PROGRAMS
from ragscale.programs.lm import ADAPTERS
from ragscale.programs.lm.models import DEFAULT_LM, WEIGHTS
from ragscale.programs.retrieval import RETRIEVERS

CORPUS_HELP = (
    "what the run retrieves from: a dataset name (every paragraph of its splits; default: --dataset's), 'all' (every "
    "dataset pooled), 'questions' (the run's own questions' paragraphs, the distractor setting), or a JSONL file "
    "(FlashRAG's {id, contents} or {id, title, text})"
)
"""The help of ``--corpus``, shared by ``run`` and ``sweep``."""


class ConfigError(ValueError):
    """A run configuration that cannot run: names the field, the value and the valid choices."""


def _choices(kind: str, value: str, valid) -> None:
    if value not in valid:
        raise ConfigError(f"unknown {kind} {value!r}; valid choices: {', '.join(sorted(valid))}")


@dataclass(frozen=True)
class RunConfig:
    """One run: compile `method` with `optimizer` on the train split of `dataset`, evaluate on its dev split.

    `lm` answers; `teacher` (an LM name, bootstrap-family optimizers only) writes the traces `lm` learns from.
    `api_base` is the server of `lm` (an `openai/<model>`) and `teacher_api_base` the teacher's own: a local
    student may learn from a teacher on a server, or the other way round. `reflection_lm` and `budget` are GEPA's:
    the LM that reads the feedback and rewrites instructions (default: the teacher, else `lm`) and how much it may
    spend (light, medium, heavy, or a cap on metric calls). `trace` records MLflow traces of every question and
    `autolog` DSPy's own compile and evaluation logging while the run compiles (``experiments/traces.py``).
    `corpus` is what the run retrieves from (``data/corpora.py``): a dataset's every
    paragraph (default: `dataset`'s), `all` of them, the run's own `questions`, or a JSONL file.
    `request_timeout` is how long, in seconds, each try of a call to a server (the LM's, the teacher's, the
    reflection LM's, a chroma server) waits for its answer; a question whose call gets none fails, and the rerun asks
    it again. It decides no answer, so it is not part of the run's key (``identity.py``).

    Paths are made absolute on construction (relative ones are taken from the current directory), so the params
    logged to MLflow point at the same files wherever the run is inspected from.
    """

    method: str
    dataset: str
    optimizer: str = "none"
    lm: str = DEFAULT_LM
    teacher: str | None = None
    api_base: str | None = None
    teacher_api_base: str | None = None
    reflection_lm: str | None = None
    budget: str | None = None
    weights: str | None = None
    adapter: str = "field"
    max_tokens: int = 256
    cache: bool = True
    retriever: str = "hybrid"
    corpus: str | None = None
    chroma_url: str | None = None
    request_timeout: float = REQUEST_TIMEOUT_S
    docs: int = 5
    iterations: int = 3
    shots: int = 4
    docs_per_demo: int = 3
    metric: str = "em"
    limit: int | None = None
    train_limit: int | None = 64
    data_dir: Path | None = None
    eval_file: Path | None = None
    runs_dir: Path = Path("runs")
    threads: int = 4
    seed: int = 0
    run_name: str | None = None
    trace: bool = False
    autolog: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_type(f.name, getattr(self, f.name))
        _choices("method", self.method, PROGRAMS)
        _choices("optimizer", self.optimizer, OPTIMIZERS)
        _choices("dataset", self.dataset, DATASETS)
        _choices("adapter", self.adapter, ADAPTERS)
        if self.weights is not None:
            _choices("weights", self.weights, WEIGHTS)
        _choices("retriever", self.retriever, RETRIEVERS)
        _choices("metric", self.metric, METRICS)
        if not self.lm:
            raise ConfigError(f"lm must be a non-empty name or path, got {self.lm!r}")
        if self.teacher_api_base is not None and self.teacher is None:
            raise ConfigError(f"teacher_api_base {self.teacher_api_base!r} is given but no teacher is")
        if self.teacher is not None:
            if self.optimizer not in TEACHER_OPTIMIZERS:
                raise ConfigError(
                    f"teacher {self.teacher!r} needs an optimizer that runs a teacher program "
                    f"({', '.join(TEACHER_OPTIMIZERS)}), got optimizer {self.optimizer!r}"
                )
        for name in ("reflection_lm", "budget"):
            if getattr(self, name) is not None and self.optimizer != "gepa":
                raise ConfigError(f"{name} {getattr(self, name)!r} is GEPA's; got optimizer {self.optimizer!r}")
        if (
            self.budget is not None
            and self.budget not in GEPA_BUDGETS
            and not (self.budget.isdigit() and int(self.budget) > 0)
        ):
            raise ConfigError(
                f"budget must be one of {', '.join(GEPA_BUDGETS)} or a number of metric calls, got {self.budget!r}"
            )
        for name, low in (
            ("docs", 1),
            ("iterations", 1),
            ("shots", 0),
            ("docs_per_demo", 0),
            ("max_tokens", 1),
            ("threads", 1),
            ("limit", 1),
            ("train_limit", 1),
        ):
            value = getattr(self, name)
            if value is not None and value < low:
                raise ConfigError(f"{name} must be >= {low}, got {value}")
        if not (math.isfinite(self.request_timeout) and self.request_timeout > 0):
            raise ConfigError(f"request_timeout must be a positive number of seconds, got {self.request_timeout}")
        data_dir = Path(self.data_dir) if self.data_dir is not None else default_data_dir()
        object.__setattr__(self, "data_dir", data_dir.expanduser().resolve())
        object.__setattr__(self, "runs_dir", Path(self.runs_dir).expanduser().resolve())
        if self.eval_file is not None:
            object.__setattr__(self, "eval_file", Path(self.eval_file).expanduser().resolve())
        if self.corpus == "":
            raise ConfigError("corpus must be a corpus name or a JSONL file, got ''")
        object.__setattr__(self, "corpus", self.dataset if self.corpus is None else corpus_name(self.corpus))

    @property
    def train_path(self) -> Path:
        return self.data_dir / self.dataset / "train.jsonl"

    @property
    def eval_path(self) -> Path:
        return self.eval_file if self.eval_file is not None else self.data_dir / self.dataset / "dev.jsonl"

    def to_params(self) -> dict[str, str]:
        """`asdict(self)` as MLflow params (every value a string, None as "None")."""
        return {key: str(value) for key, value in asdict(self).items()}

    def to_toml(self) -> str:
        """The config as TOML that `from_toml` reads back to an equal config (None values are left out)."""
        lines = []
        for key, value in asdict(self).items():
            if value is None:
                continue
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, int | float):
                text = repr(value)
            else:
                text = '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
            lines.append(f"{key} = {text}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_toml(cls, path: Path | str, *, method_defaults: bool = False, **overrides: Any) -> RunConfig:
        """Read a config from a TOML file of flat `key = value` lines; `overrides` win over the file, and
        ``method_defaults`` fills in what both leave out as ``from_mapping`` does.

        Relative paths inside the file are taken from the current directory. Unknown keys, and values of the wrong
        type, fail naming the file and the key; so do a path that is not a readable file and a file that is not
        UTF-8 TOML.
        """
        path = Path(path)
        if path.is_dir():
            raise ConfigError(f"config {path} is a directory, not a TOML file")
        try:
            with path.open("rb") as fh:
                values = tomllib.load(fh)
        except FileNotFoundError as exc:
            raise ConfigError(f"config file not found: {path}") from exc
        except OSError as exc:
            raise ConfigError(f"config {path} cannot be read: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not a TOML file (not UTF-8 text at byte {exc.start})") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        for key, value in values.items():
            if key in _FIELD_TYPES:
                try:
                    _check_type(key, value)
                except ConfigError as exc:
                    raise ConfigError(f"{path}: {exc}") from None
        return cls.from_mapping({**values, **overrides}, source=str(path), method_defaults=method_defaults)

    @classmethod
    def from_mapping(
        cls, values: dict[str, Any], *, source: str = "config", method_defaults: bool = False
    ) -> RunConfig:
        """A config of ``values``, each key a field; with ``method_defaults`` (what ``ragscale run`` and
        ``ragscale.run`` ask), the method's own compile settings (``with_method_defaults``) fill in those left out."""
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(valid))
        if unknown:
            raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(valid)}")
        missing = [name for name in ("method", "dataset") if name not in values]
        if missing:
            raise ConfigError(f"{source}: missing {' and '.join(missing)} (give --{missing[0]} or set it in the TOML)")
        return cls(**(with_method_defaults(values) if method_defaults else values))


_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "str": ((str,), "a string"),
    "int": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"),
    "Path": ((str, Path), "a path (a string)"),
    "None": ((type(None),), "unset"),
}
"""What each annotation of a ``RunConfig`` field accepts, and how an error names it."""

_FIELD_TYPES = {f.name: f.type for f in fields(RunConfig)}

DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(RunConfig) if f.default is not MISSING}
"""Each field's default, the one place it is written: command-line help reads it from here."""


def with_method_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a run's settings as given) with its method's ``compile_defaults`` (``programs/base.py``: IterDRAG
    is taught by the 1.5B, docs/methods.md "IterDRAG compiled at the defaults a user gets") for the settings they
    leave out, when the run reads with the default LM on this machine and compiles by the bootstrap family (GEPA's
    teacher reflects on instructions and writes no demonstration); ``values`` as they are otherwise. A teacher named
    as the reader itself (``--teacher qwen2.5-coder-0.5b``) compiles the method on the reader's own chains."""
    method = PROGRAMS.get(values.get("method", ""))
    preset = method.compile_defaults if method is not None else {}
    optimizer = values.get("optimizer", DEFAULTS["optimizer"])
    reader = (values.get("lm", DEFAULTS["lm"]), values.get("api_base"))
    if not preset or optimizer not in TEACHER_OPTIMIZERS or optimizer == "gepa" or reader != (DEFAULT_LM, None):
        return values
    return {**preset, **values}


def with_default(text: str, name: str) -> str:
    """A flag's help ``text`` followed by the default of field ``name``: "text (default: value)"."""
    return f"{text} (default: {DEFAULTS[name]})"


def _check_type(name: str, value: Any) -> None:
    """Raise ``ConfigError`` unless ``value`` fits the annotation of field ``name`` (``str | None``, ``int``, ...):
    a TOML file or a Python caller can give any type, and a list, a number or a string in the wrong field would
    otherwise fail later as a TypeError far from its cause. A bool is not accepted as an integer."""
    kinds = [_KINDS[part.strip()] for part in _FIELD_TYPES[name].split("|")]
    accepted = tuple(kind for types, _ in kinds for kind in types)
    if isinstance(value, accepted) and not (isinstance(value, bool) and bool not in accepted):
        return
    wanted = " or ".join(text for _, text in kinds)
    raise ConfigError(f"{name} must be {wanted}, got {value!r} ({type(value).__name__})")
