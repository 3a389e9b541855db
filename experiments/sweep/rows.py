"""A sweep's row: one configuration (or oracle run) as it ran, a typed record.

A row joins three things under the names the rest of ragscale gives them: where the configuration sits in the grid
(``method``, ``docs``, ``shots``, ``iterations``: ``grid.Point``), the estimate of its effective context made just
before it ran (``estimated_*``, ``estimate_basis``; an oracle row is not estimated), and what its run measured (the
run's summary values, by the names of the summary JSON and the MLflow metrics: ``em``, ``f1``, ``acc``,
``effective_context_tokens_per_question``, ...). ``results.json`` and ``allocation.json`` keep rows as JSON objects
of these fields (``to_json``, ``from_json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from ragscale.experiments.config import ConfigError
from ragscale.experiments.sweep.grid import Point


@dataclass(frozen=True)
class Row:
    """One configuration of a sweep as it ran (see the module docstring)."""

    method: str
    docs: int
    shots: int
    iterations: int
    key: str = ""
    run_id: str | None = None
    lm: str | None = None
    em: float | None = None
    f1: float | None = None
    acc: float | None = None
    n: int = 0
    failed: int = 0
    effective_context_tokens_per_question: float | None = None
    output_tokens_per_question: float | None = None
    lm_calls_per_question: float | None = None
    eval_s: float | None = None
    wall_s: float | None = None
    resumed: int = 0  # questions carried over from a killed run, or carried (``carry.py``): eval_s did not time them
    carried: int = 0  # of those, the ones carried from a smaller iteration cap (``carry.py``)
    program: str | None = None  # the digest of the program it ran (``carry.program_digest``); None where unknown
    replica: str | None = None  # the server that ran it, of the sweep's ``api_base``; None for a local model
    estimated_effective_context: float | None = None
    estimated_low: float | None = None
    estimated_high: float | None = None
    estimated_calls: float | None = None
    estimate_basis: str | None = None
    estimated_s: float | None = None
    status: str | None = None

    @property
    def point(self) -> Point:
        return Point(self.method, self.docs, self.shots, self.iterations)

    @property
    def is_oracle(self) -> bool:
        return self.method.startswith("oracle")

    @property
    def label(self) -> str:
        """``rag k=5 m=2`` (the paper's theta), or the oracle's name."""
        return self.method if self.is_oracle else self.point.label

    @property
    def measured(self) -> bool:
        """Whether its run's accuracy and effective context are known (a run of it finished)."""
        return None not in (self.acc, self.effective_context_tokens_per_question, self.run_id)

    def effective_context(self) -> float:
        """Its effective context: measured when it ran, else estimated."""
        measured = self.effective_context_tokens_per_question
        return float(measured if measured is not None else self.estimated_effective_context)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, values: Mapping[str, Any], *, source: str = "a sweep row") -> Row:
        """A row from its JSON object; a field no row has fails naming it (a file of an older ragscale)."""
        unknown = sorted(set(values) - FIELDS)
        if unknown:
            raise ConfigError(f"{source}: unknown field(s) {', '.join(unknown)} (written by an older ragscale?)")
        return cls(**values)


FIELDS = frozenset(f.name for f in fields(Row))
