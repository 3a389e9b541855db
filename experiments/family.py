"""Verdicts by family: the p-values of a table's comparisons adjusted together, so that a table of many CIs does not
call a difference real by chance.

A family is one table's comparisons of its primary metric, named in advance: EM (F1 and Acc are shown beside it and
never decide). Each comparison's p-value is the paired bootstrap's (``paired.paired_bootstrap``: the share of
resampled mean differences on the far side of 0, doubled, a small one read from enough draws to resolve it below
``ALPHA`` / m), and the family's are adjusted by Holm's step-down rule (Holm 1979), which bounds the chance of any
false claim in the family at ``ALPHA`` whatever the dependence between comparisons; ``benjamini_hochberg`` (1995)
bounds the expected share of false claims instead, for a family read as a screen. A difference is called real when
its adjusted p is below ``ALPHA``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

ALPHA = 0.05
PRIMARY = "em"
"""The metric whose comparisons make a family and decide its verdicts."""
RULE = f"Holm-adjusted within the table, primary metric {PRIMARY.upper()}, alpha {ALPHA}"
"""How a page says which rule its verdicts follow."""


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest of m is multiplied by m - i, then
    made non-decreasing in that order and capped at 1."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    adjusted, running = [1.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def benjamini_hochberg(p: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the order given: the i-th smallest of m times m / i, made
    non-increasing from the largest down and capped at 1."""
    order = sorted(range(len(p)), key=lambda i: p[i], reverse=True)
    adjusted, running = [1.0] * len(p), 1.0
    for position, i in enumerate(order):
        rank = len(p) - position
        running = min(running, p[i] * len(p) / rank)
        adjusted[i] = min(1.0, running)
    return adjusted


def adjust(cis: Sequence[Any], rule=holm) -> list[Any]:
    """The family's CIs (``paired.BootstrapCI``) with ``p_adjusted`` set by ``rule`` over those that exist (a missing
    one, None, is no member)."""
    present = [i for i, ci in enumerate(cis) if ci is not None]
    adjusted = rule([cis[i].p for i in present])
    out = list(cis)
    for i, p in zip(present, adjusted, strict=True):
        out[i] = replace(cis[i], p_adjusted=p)
    return out


def direction(ci: Any) -> int:
    """+1 or -1 when a difference (a ``paired.BootstrapCI``) is called real (``is_real``) upward or downward, 0 when
    it is not, or is unknown (None)."""
    if ci is None or not ci.is_real():
        return 0
    return 1 if ci.diff > 0 else -1


VERDICTS = {1: "held", -1: "not held", 0: "not shown"}
"""A claim's verdict by the ``direction`` of its deciding difference, the claim being that it is positive."""
