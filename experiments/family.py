"""Verdicts by family: the p-values of a table's comparisons adjusted together, so that a table of many CIs does not
call a difference real by chance.

A family is one table's comparisons of its primary metric, named in advance: EM (F1 and Acc are shown beside it and
never decide). Each comparison's p-value is exact and reads no seed (``paired.sign_flip_p``: McNemar's exact test
on the questions the two runs answer differently), and the family's are adjusted by Holm's step-down rule (Holm
1979), which bounds the chance of any false claim in the family at ``ALPHA`` whatever the dependence between
comparisons; ``benjamini_hochberg`` (1995) bounds the expected share of false claims instead, for a family read as a
screen. A difference is called real when its adjusted p is below ``ALPHA``, and ``verdict`` turns that into held,
not held or not shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

ALPHA = 0.05
PRIMARY = "em"
"""The metric whose comparisons make a family and decide its verdicts."""
RULE = f"McNemar's exact test, Holm-adjusted within its family, primary metric {PRIMARY.upper()}, alpha {ALPHA}"
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


def verdict(ci: Any, claimed: int = 1) -> str:
    """The one rule every star and claim of ragscale goes through: a difference (a ``paired.BootstrapCI``) that is
    called real (its exact p, adjusted within its family, below ``ALPHA``) is ``held`` in the ``claimed`` direction
    (+1: positive) and ``not held`` against it; one not called real, or unknown (None), is ``not shown``."""
    if ci is None or not ci.is_real() or ci.diff == 0:
        return "not shown"
    return "held" if (ci.diff > 0) == (claimed > 0) else "not held"


def not_tested(below_floor: Sequence[str]) -> str:
    """The verdict of a claim resting on runs or configurations (``below_floor``) compiled below a floor of their
    method, whatever its difference: they do not do what the claim's method is named for."""
    whose = "its floor" if len(below_floor) == 1 else "their floors"
    return f"not tested ({', '.join(below_floor)} below {whose})"
