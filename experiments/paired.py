"""Paired statistics: the difference between two sets of per-question scores, its bootstrap CI and its exact p-value.

Every comparison ragscale reports pairs two runs over the questions both answered: each question's score under one
minus its score under the other, so the question's own difficulty cancels and a difference shows with fewer
questions than two unpaired means would need. ``paired_bootstrap`` gives the mean of those differences, its
percentile CI over ``RESAMPLES`` resamples of the paired questions (a generator seeded with ``SEED``: the same scores
give the same CI), and the two-sided p-value of ``sign_flip_p``, which reads no random draw where it matters:

- a 0/1 metric (EM, Acc: every question that differs differs by the same amount) gets McNemar's exact binomial test
  on the discordant questions;
- another (F1, retrieval recall) gets the paired sign-flip permutation test: exact where its differences are
  multiples of one small unit (recall's are) or few, else read from ``FLIPS`` seeded draws, whose Monte Carlo
  standard error is at most ``FLIPS_ERROR``. F1 decides no verdict (``family.PRIMARY``).

``BootstrapCI`` holds them, and its family-adjusted p once ``family.adjust`` sets it; ``format_ci`` writes one as
a table shows it. The comparison of tracked runs (``compare``), the door's ``Evaluation.compare``, the sweep's
claims and the published tables all read their differences from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ragscale.experiments import family

RESAMPLES = 2000
"""The bootstrap's draws for a CI."""
SEED = 0
"""The seed of the bootstrap's draws and of the sign-flip test's, so that the same scores give the same numbers."""
EXACT_FLIPS = 20
"""Up to this many differing questions the sign-flip test enumerates every one of the 2**n sign patterns."""
EXACT_WORK = 50_000_000
"""The most steps (differences x the sum of their sizes in units) the sign-flip test counts exactly."""
FLIPS = 200_000
FLIPS_ERROR = math.sqrt(0.25 / FLIPS)
"""The largest Monte Carlo standard error of a p-value read from ``FLIPS`` draws (about 0.0011)."""


@dataclass(frozen=True)
class BootstrapCI:
    """Mean paired difference (a - b) and its percentile CI, in the units of the inputs, over `n` pairs; `p` the
    two-sided exact p-value of no difference (``sign_flip_p``), `p_adjusted` the same adjusted within its family
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
        """Whether the difference is called real: its p below ``family.ALPHA``, adjusted within its family once the
        family is (``family.verdict`` says which way)."""
        return (self.p if self.p_adjusted is None else self.p_adjusted) < family.ALPHA


def paired_bootstrap(
    a: Mapping[str, float],
    b: Mapping[str, float],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = 0.95,
) -> BootstrapCI | None:
    """Paired bootstrap CI of mean(a[i] - b[i]) over the ids both hold, read from ``resamples`` draws, and the exact
    two-sided p-value of ``sign_flip_p``, which the seed does not move. None when they share no id."""
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    ids = sorted(set(a) & set(b))
    if not ids:
        return None
    diffs = np.array([float(a[i]) - float(b[i]) for i in ids])
    n = len(diffs)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // n)  # bounds memory at ~16 MB of indices per chunk
    for lo in range(0, resamples, chunk):
        hi = min(resamples, lo + chunk)
        means[lo:hi] = diffs[rng.integers(0, n, size=(hi - lo, n))].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return BootstrapCI(diff=float(diffs.mean()), low=float(low), high=float(high), n=n, p=sign_flip_p(diffs))


def sign_flip_p(diffs) -> float:
    """The two-sided p-value of no difference from paired differences: the share of the 2**n ways of flipping
    their signs whose sum lies at least as far from 0 as the observed one (ties with it counted).

    Exact in three cases, which cover every 0/1 metric and per-question recall: when every difference that is not 0
    has the same size (a 0/1 metric) it is McNemar's exact binomial test on the discordant pairs; when the sizes are
    whole multiples of one unit whose sum is small (``_units``: recall over 2 or 3 gold passages), the distribution
    of the flipped sums is counted exactly; up to ``EXACT_FLIPS`` nonzero differences every pattern is enumerated.
    Past that it is read from ``FLIPS`` draws (seeded with ``SEED``; the observed pattern counts as one)."""
    d = np.asarray(diffs, dtype=float)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    size = np.abs(d)
    if np.allclose(size, size[0], rtol=1e-9, atol=0):
        return mcnemar_p(int((d > 0).sum()), int((d < 0).sum()))
    units = _units(size)
    if units is not None:  # the distribution of sum(+-units), each sign 1/2, by one convolution per difference
        total = int(units.sum())
        spread = np.zeros(2 * total + 1)
        spread[total] = 1.0
        for u in units:
            spread = 0.5 * (np.concatenate([spread[u:], np.zeros(u)]) + np.concatenate([np.zeros(u), spread[:-u]]))
        observed = abs(int(np.rint(units @ np.sign(d))))
        far = np.abs(np.arange(-total, total + 1)) >= observed
        return min(1.0, float(spread[far].sum()))
    observed = abs(d.sum()) * (1 - 1e-9)  # a flip that reorders the float sum still counts as a tie
    if d.size <= EXACT_FLIPS:
        far, total = 0, 0
        for lo in range(0, 2**d.size, 1 << 16):  # 65,536 patterns at a time
            signs = 1 - 2 * ((np.arange(lo, min(lo + (1 << 16), 2**d.size))[:, None] >> np.arange(d.size)) & 1)
            far += int((np.abs(signs @ size) >= observed).sum())
            total += len(signs)
        return far / total
    rng = np.random.default_rng(SEED)
    far = 1  # the observed pattern
    for lo in range(1, FLIPS, 10_000):
        signs = rng.integers(0, 2, size=(min(10_000, FLIPS - lo), d.size)).astype(np.float32) * 2 - 1
        far += int((np.abs(signs @ size.astype(np.float32)) >= np.float32(observed)).sum())
    return far / FLIPS


def _units(size) -> np.ndarray | None:
    """``size`` as whole multiples of one unit (1/q for a q of at most 1,000 that every size is a multiple of), when
    counting their flipped sums exactly costs at most ``EXACT_WORK`` steps; None otherwise."""
    fractions = [Fraction(float(x)).limit_denominator(1000) for x in size]
    if any(abs(float(f) - x) > 1e-9 * x for f, x in zip(fractions, size, strict=True)):
        return None
    q = math.lcm(*(f.denominator for f in fractions))
    units = np.array([int(f * q) for f in fractions])
    return units if len(units) * units.sum() <= EXACT_WORK else None


def mcnemar_p(up: int, down: int) -> float:
    """McNemar's exact two-sided p-value: ``up`` questions better, ``down`` worse; under no difference each of the
    ``up + down`` discordant ones goes either way with probability 1/2 (twice the smaller tail, at most 1)."""
    m = up + down
    tail = sum(math.comb(m, i) for i in range(min(up, down) + 1))
    return min(1.0, 2 * tail / 2**m) if m else 1.0


def format_ci(ci: BootstrapCI | None, is_base: bool = False, *, mark: bool = True) -> str:
    """A difference with its 95% CI and, with ``mark``, ``*`` when it is called real (``BootstrapCI.is_real``)."""
    if is_base:
        return "baseline"
    if ci is None:
        return "n/a (no shared questions, or another corpus)"
    mark = " *" if mark and ci.is_real() else ""
    return f"{ci.diff:+.1f} [{ci.low:+.1f}, {ci.high:+.1f}]{mark}"
