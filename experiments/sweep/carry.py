"""Questions a configuration need not ask again: a method that declares ``reaches_cap`` (IterDRAG) under a larger
iteration cap, for the questions whose loop stopped before a smaller cap that a finished configuration ran.

IterDRAG's cap (``max_iterations``) is read by its loop alone: no prompt names it, and the sweep compiles one
program per method and shot count for every iteration count. A question whose loop ended under the cap n' for
another reason than the cap (the model wrote "none", repeated a follow-up, or wrote one that could not be read), so
with fewer than n' follow-ups, makes the same calls in the same order under any larger cap: its record at n' is its
record at n. A configuration at n therefore carries those records from the finished configuration of the same
method, documents and shots with the largest smaller cap, when it ran the same program (the same demonstrations and
instructions: ``program_digest``, kept with each row), and asks only the questions that reached that cap. Its
answers are those a run asking every question would give, as far as the engine's greedy decoding is deterministic
(a redrawn follow-up is seeded); like a resumed run's, the carried questions are not in its questions per minute.
The published records show it: a carried question's record is the same in both configurations.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ragscale.experiments.sweep.grid import Point
from ragscale.experiments.sweep.ledger import run_records
from ragscale.programs import method_named


def source_of(point: Point, keys: Mapping[Point, str], finished: Mapping[str, Any]) -> Point | None:
    """The finished point ``point`` carries from: the same method, documents and shots with the largest smaller
    iteration count whose key (``keys``) is in ``finished``; None where the method carries nothing or none
    finished (a method carries when it declares ``reaches_cap``, the count that tells the cap ended a loop)."""
    if method_named(point.method).reaches_cap is None:
        return None
    lower = [
        p
        for p, key in keys.items()
        if (p.method, p.docs, p.shots) == (point.method, point.docs, point.shots)
        and 0 < p.iterations < point.iterations
        and key in finished
    ]
    return max(lower, key=lambda p: p.iterations, default=None)


def stopped_before_cap(method: str, records: Sequence[Mapping[str, Any]], cap: int) -> list[Mapping[str, Any]]:
    """The records of ``method`` run under ``cap`` whose loop ended before it, without an error: the questions a
    larger cap asks the same way (see the module docstring)."""
    count = method_named(method).reaches_cap
    return [r for r in records if r.get("error") is None and (r.get("behaviour") or {}).get(count, cap) < cap]


UNCOMPILED = "uncompiled"
"""``program_digest`` of no compiled program: the program as built, with no shots."""


def program_digest(program: Any) -> str:
    """What identifies the state of the program a configuration runs (its demonstrations and instructions): a hash of
    ``dump_state()``; ``UNCOMPILED`` for none (no shots: the program as built)."""
    if program is None:
        return UNCOMPILED
    state = json.dumps(program.dump_state(), sort_keys=True, default=str)
    return hashlib.sha256(state.encode("utf-8")).hexdigest()[:16]


def carried(
    point: Point, keys: Mapping[Point, str], finished: Mapping[str, Mapping[str, Any]], runs_dir: Any,
    program: str | None = None,
) -> tuple[Point | None, list[Mapping[str, Any]]]:  # fmt: skip
    """The point ``point`` carries from (``source_of``) and the records it carries (``stopped_before_cap`` of that
    finished run's records, read from ``runs_dir``); (None, []) where it carries none. Given the digest of the
    program ``point`` runs (``program_digest``), a source that ran another program, or one not known, gives none."""
    source = source_of(point, keys, finished)
    if source is None or (program is not None and finished[keys[source]].get("program") != program):
        return None, []
    records = run_records(runs_dir, finished[keys[source]]["run_id"]) or []
    return source, stopped_before_cap(point.method, records, source.iterations)
