"""Choosing a sweep's best configuration on questions it is not reported on.

The best configuration within a budget, chosen and scored on the same questions, is the largest of many noisy
estimates and leans high, and every comparison made with it leans in its favour. ``HeldOut`` splits the sweep's
questions into two fixed halves by the SHA-256 of their ids (the same halves whatever order they were asked in, and
for every configuration): ``best_within`` ranks the configurations that fit a budget by their EM on the choosing
half (ties to the fewest tokens, then the first label in alphabetical order: nothing of the other half is read),
and ``em`` and ``reporting_scores`` give a configuration's EM on the other half, where the budget table and the
claims that compare a chosen best report it. A configuration whose per-question scores cannot be read is never
chosen.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence

from ragscale.experiments.sweep.report import fits
from ragscale.experiments.sweep.rows import Row

Scores = Callable[[Row], Mapping[str, float] | None]  # a row -> its per-question EM in percent; None: unreadable


class HeldOut:
    """The sweep's questions in a choosing half and a reporting half; see the module docstring."""

    def __init__(self, scores: Scores, rows: Sequence[Row]):
        self.scores = scores
        ids = sorted(
            {i for row in rows if (found := scores(row)) for i in found},
            key=lambda i: hashlib.sha256(i.encode()).hexdigest(),
        )
        self.choosing, self.reporting = frozenset(ids[0::2]), frozenset(ids[1::2])

    def _on(self, row: Row, half: frozenset[str]) -> dict[str, float] | None:
        found = self.scores(row)
        return None if found is None else {i: v for i, v in found.items() if i in half}

    def reporting_scores(self, row: Row) -> dict[str, float] | None:
        """The row's per-question EM on the reporting half."""
        return self._on(row, self.reporting)

    def em(self, row: Row, *, choosing: bool = False) -> float | None:
        """The row's EM (percent) on the reporting half, or on the choosing half."""
        found = self._on(row, self.choosing if choosing else self.reporting)
        return sum(found.values()) / len(found) if found else None

    def best_within(self, rows: Sequence[Row], budget: float) -> Row | None:
        """The configuration with the highest EM on the choosing half among those measured within ``budget``; of
        those tied, the one with the fewest tokens, then the first label."""
        chosen = [(em, r) for r in rows if fits(r, budget) and (em := self.em(r, choosing=True)) is not None]
        best = min(chosen, key=lambda item: (-item[0], item[1].effective_context(), item[1].label), default=None)
        return None if best is None else best[1]
