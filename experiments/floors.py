"""Whether a finished compiled run kept its method's defining step: its floors judged on its own records.

A compiled program is checked against its method's floors (``Method.floors``) on held-back training questions when
it is compiled (``optimizers/floors.py``). A run compiled before that check existed, or one whose evaluation
questions went where its held-back ones did not, can still sit below a floor: IterDRAG that asks no follow-up is
DRAG under IterDRAG's name. Such a run is marked in its published table, and a claim that rests on it, a core
claim (``published/core_claims``) or a sweep's (``sweep/claims.below_floor``), is not tested. Its records carry each
question's behaviour, so the judgement is made again from them alone, over the questions the floor is measured on
(the multi-hop ones where ``Method.floors_multi_hop``, by the types of the run's dataset).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from ragscale.data.datasets import dataset_path, read_jsonl
from ragscale.programs import PROGRAMS
from ragscale.programs.behaviour import is_multi_hop


def shortfalls(params: dict[str, str], records: Sequence[dict]) -> list[tuple[str, float, float]]:
    """Each floor a published run (its ``params`` and per-question ``records``) falls below, as ``(behaviour,
    mean, floor)``; empty for an uncompiled run, a method without floors, or a run that keeps them. A question
    that failed is left out, as it is when compiling, and a behaviour no record reports is not judged."""
    method = PROGRAMS.get(params.get("method", ""))
    if params.get("optimizer", "none") == "none" or method is None or not method.floors:
        return []
    answered = [r for r in records if not r.get("error")]
    if method.floors_multi_hop:
        multi_hop = multi_hop_ids(params["dataset"])
        answered = [r for r in answered if r["id"] in multi_hop]
    found = []
    for name, least in method.floors:
        values = [r["behaviour"][name] for r in answered if name in (r.get("behaviour") or {})]
        mean = sum(values) / len(values) if values else None
        if mean is not None and mean < least:
            found.append((name, mean, least))
    return found


def describe(found: Sequence[tuple[str, float, float]]) -> str:
    """A run's shortfalls in words: ``questions_with_follow_up 0.37 < floor 0.5``."""
    return ", ".join(f"{behaviour} {mean:.2f} < floor {least:g}" for behaviour, mean, least in found)


@cache
def multi_hop_ids(dataset: str) -> frozenset[str]:
    """The ids of the multi-hop questions (``is_multi_hop``) of ``dataset``'s dev split, read from the data
    directory (``data.datasets.default_data_dir``): the questions a multi-hop floor is judged on."""
    return frozenset(row["id"] for row in read_jsonl(dataset_path(dataset, "dev")) if is_multi_hop(row))
