"""Paired statistics: the difference between two sets of per-question scores, with its bootstrap CI and p-value.

Every comparison ragscale reports pairs two runs over the questions both answered: each question's score under one
minus its score under the other, so the question's own difficulty cancels and a difference shows with fewer
questions than two unpaired means would need. ``paired_bootstrap`` gives the mean of those differences, its
percentile CI over resamples of the paired questions (a seeded generator: the same scores give the same CI) and a
two-sided p-value; ``BootstrapCI`` holds them, and its family-adjusted p once ``family.adjust`` sets it;
``format_ci`` writes one as a table shows it. The comparison of tracked runs (``compare``), the door's
``Evaluation.compare``, the sweep's claims and the published tables all read their differences from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ragscale.experiments import family

RESAMPLES = 2000
PRECISE = 200_000  # the draws a small p-value is read from: it resolves p down to 1e-5
TAIL = 10  # fewer far-side draws than this among RESAMPLES: the p-value is read from PRECISE draws


@dataclass(frozen=True)
class BootstrapCI:
    """Mean paired difference (a - b) and its percentile CI, in the units of the inputs, over `n` pairs; `p` the
    two-sided bootstrap p-value of no difference, `p_adjusted` the same adjusted within its family
    (``family.adjust``), None until it is."""

    diff: float
    low: float
    high: float
    n: int
    p: float = 1.0
    p_adjusted: float | None = None

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def is_real(self) -> bool:
        """Whether the difference is called real: its family-adjusted p below ``family.ALPHA`` once its family is
        adjusted, its CI excluding 0 before."""
        return self.p_adjusted < family.ALPHA if self.p_adjusted is not None else self.excludes_zero()


def paired_bootstrap(
    a: Mapping[str, float],
    b: Mapping[str, float],
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapCI | None:
    """Paired bootstrap CI of mean(a[i] - b[i]) over the ids both hold, and its two-sided p-value: the share of the
    resampled means on the far side of 0 from the observed one, doubled (``(k + 1) / (resamples + 1)``, so never 0);
    1 when every pair ties. None when they share no id.

    The CI is read from ``resamples`` draws. When fewer than ``TAIL`` of them fall on the far side, the p-value is
    read from ``PRECISE`` draws (those first, then more from the same generator): ``resamples`` draws cannot give a p
    below 1 / ``resamples``, and Holm's rule over a family of m comparisons asks the smallest p to be below
    ``family.ALPHA`` / m, so with 2,000 draws a family of 100 could call nothing real however large a difference."""
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    ids = sorted(set(a) & set(b))
    if not ids:
        return None
    diffs = np.array([float(a[i]) - float(b[i]) for i in ids])
    n = len(diffs)
    rng = np.random.default_rng(seed)

    def draw(count: int):
        means = np.empty(count)
        chunk = max(1, 2_000_000 // n)  # bounds memory at ~16 MB of indices per chunk
        for lo in range(0, count, chunk):
            hi = min(count, lo + chunk)
            means[lo:hi] = diffs[rng.integers(0, n, size=(hi - lo, n))].mean(axis=1)
        return means

    def far_side(means) -> int:
        return min(int((means <= 0).sum()), int((means >= 0).sum()))

    means = draw(resamples)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    far = far_side(means)
    if far < TAIL and resamples < PRECISE and diffs.any():  # a small p: resolve it
        means = np.concatenate([means, draw(PRECISE - resamples)])
        far = far_side(means)
    p = 1.0 if not diffs.any() else min(1.0, 2 * (far + 1) / (len(means) + 1))
    return BootstrapCI(diff=float(diffs.mean()), low=float(low), high=float(high), n=n, p=p)


def format_ci(ci: BootstrapCI | None, is_base: bool = False, *, mark: bool = True) -> str:
    """A difference with its 95% CI and, with ``mark``, ``*`` when it is called real (``BootstrapCI.is_real``)."""
    if is_base:
        return "baseline"
    if ci is None:
        return "n/a (no shared questions, or another corpus)"
    mark = " *" if mark and ci.is_real() else ""
    return f"{ci.diff:+.1f} [{ci.low:+.1f}, {ci.high:+.1f}]{mark}"
