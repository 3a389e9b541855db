"""The paper's claims, checked on a finished sweep: each with its numbers, paired 95% CIs and a verdict.

Yue et al. 2024 ("Inference Scaling for Long-Context RAG") claim, for RAG under a budget of effective context:

- **scaling**: under the best configuration per budget, accuracy grows almost linearly with the log of the budget;
- **DRAG small, IterDRAG large**: DRAG is best at small budgets, IterDRAG at large ones;
- **iterations**: more IterDRAG iterations help at the same documents and shots;
- **demonstrations with documents**: DRAG beats RAG at the same documents and shots (its demonstrations carry
  their own documents, RAG's do not);
- **allocation**: the computation allocation model fits the grid (R² 0.903 there) and picks configurations within
  a few percent of the grid's best, also at budgets it was not fitted on;

and retrieval beating closed-book underlies them all. Beside them, the oracle rows (the RAG program given each
question's gold paragraphs, alone and padded to the grid's largest documents count with retrieved distractors) say
what bounds the reader: the gold paragraphs against the grid's best at its largest budget (retrieval), and the
padded gold against the gold alone (distractors).

The claims table is one family (``family``): its primary metric, named in advance, is EM (Acc and F1 are shown in
the rows and decide nothing). Differences are paired over the questions on per-question EM (``paired``: McNemar's
exact test, no seed), and every comparison in the table has its p-value adjusted with the others by Holm's rule
(``family.RULE``). Each claim names in advance the comparison that decides it, and ``family.verdict`` alone turns
that comparison into the claim's verdict; the others are shown beside it:

- scaling: the best at the largest budget against the best at the smallest (the best at each budget step in
  between is shown beside it, against the one before);
- DRAG then IterDRAG: IterDRAG's best against DRAG's at the largest budget (claimed higher), and at the smallest
  (claimed lower, or DRAG fitting alone there); DRAG's rows include RAG's with no shot, which are DRAG with no
  demonstration;
- iterations, DRAG's demonstrations: at the largest documents and shots where both rows ran; retrieval: RAG with
  the grid's largest documents and no shot against closed-book;
- allocation: R² and every pick reach ``ALLOCATION_R2`` and ``ALLOCATION_PICK`` (held or not held: no test).

Each claim names the configurations its verdict rests on (``decides``); one of them below a floor of its method
makes the claim ``not tested`` (``not_tested``), whatever its comparison shows.

A best per budget (overall, or DRAG's and IterDRAG's) is chosen on one half of the questions, ties broken without
reading the other half (``heldout``), and every comparison that involves it is made on the other half, so the
choice does not lean the comparison its way; the comparisons of settings named in advance use every question.

One concept in one file: a finished sweep's rows and per-question scores, turned into the paper's claims, checked.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ragscale.experiments import family
from ragscale.experiments.floors import describe, shortfalls
from ragscale.experiments.paired import BootstrapCI, format_ci, paired_bootstrap
from ragscale.experiments.sweep.carry import UNCOMPILED
from ragscale.experiments.sweep.grid import BASELINE, Point, format_size, rows_of
from ragscale.experiments.sweep.heldout import HeldOut
from ragscale.experiments.sweep.rows import Row

ALLOCATION_R2 = 0.9  # the paper's fit reaches 0.903
ALLOCATION_PICK = 95.0  # "within a few percent": every pick reaches this % of the grid's best at its budget

Scores = Callable[[str], Mapping[str, float] | None]  # run id -> per-question EM in percent; None: unreadable


def label(row: Row) -> str:
    return row.label


class Pairs:
    """Paired comparisons of sweep rows with their CIs, each run's per-question scores read once and each pair's CI
    made once; ``adjust`` then sets every CI's family-adjusted p, which the CIs handed out after it carry."""

    def __init__(self, scores: Scores, seed: int, rows: Sequence[Row]):
        self.scores, self.seed, self.read = scores, seed, {}
        self.made: dict[tuple[str, str, bool], BootstrapCI | None] = {}
        self.held_out = HeldOut(self.of, rows)

    def adjust(self) -> None:
        keys = list(self.made)
        self.made.update(zip(keys, family.adjust([self.made[k] for k in keys]), strict=True))

    def of(self, row: Row) -> Mapping[str, float] | None:
        """The row's per-question EM, read once."""
        if row.run_id not in self.read:
            self.read[row.run_id] = self.scores(row.run_id)
        return self.read[row.run_id]

    def best(self, rows: Sequence[Row], budget: float) -> Row | None:
        """The best within ``budget``, chosen on the choosing half of the questions."""
        return self.held_out.best_within(rows, budget)

    def em(self, row: Row, held_out: bool) -> float:
        """The row's EM on the reporting half (``held_out``), else on every question."""
        return self.held_out.em(row) if held_out and self.of(row) else row.em

    def ci(self, a: Row, b: Row, held_out: bool = False) -> BootstrapCI | None:
        if (a.run_id, b.run_id, held_out) not in self.made:
            sa, sb = (self.held_out.reporting_scores(r) if held_out else self.of(r) for r in (a, b))
            self.made[a.run_id, b.run_id, held_out] = (
                None if not sa or not sb else paired_bootstrap(sa, sb, seed=self.seed)
            )
        return self.made[a.run_id, b.run_id, held_out]

    def pair(self, a: Row, b: Row, *, held_out: bool = False, **extra: Any) -> dict[str, Any]:
        """``a`` against ``b``: on the reporting half when ``held_out`` (either was chosen), else on every question."""
        ci = self.ci(a, b, held_out)
        return {
            "a": label(a), "b": label(b), "a_em": self.em(a, held_out), "b_em": self.em(b, held_out),
            "a_tokens": a.effective_context(), "b_tokens": b.effective_context(), "held_out": held_out,
            "ci": ci, "text": format_ci(ci) if self.of(a) and self.of(b) else "n/a (no per-question scores)",
            **extra,
        }  # fmt: skip


def scaling(rows: Sequence[Row], budgets: Sequence[int], pairs: Pairs) -> dict[str, Any] | None:
    optimum = [(b, best) for b in budgets if (best := pairs.best(rows, b)) is not None]
    if len(optimum) < 2:
        return None
    # a step is informative when configurations entered between its budgets; past the grid's largest effective
    # context a budget adds none, and an unchanged best there says nothing about the claim
    steps = [
        (lo, hi) for lo, hi in itertools.pairwise(optimum) if any(lo[0] < r.effective_context() <= hi[0] for r in rows)
    ]
    rises = [pairs.pair(hi, lo, held_out=True, budget=b) for (_, lo), (b, hi) in steps if hi is not lo]
    (b0, first), (b1, last) = optimum[0], optimum[-1]
    overall = (
        pairs.pair(last, first, held_out=True, span=f"{format_size(b1)} - {format_size(b0)}")
        if last is not first
        else None
    )
    verdict = family.verdict(overall["ci"]) if overall else "not shown"
    path = "; ".join(
        f"{_span([b for b, _ in group])}: {label(r)} {pairs.em(r, True):.1f} ({r.effective_context():,.0f})"
        for group in _runs_of(optimum)
        for r in [group[0][1]]
    )
    span = f"{overall['span']}: {overall['text']}" if overall else "one configuration is best at every budget"
    return {
        "claim": "under the best allocation, accuracy grows almost linearly with the log of the effective context",
        "here": f"best per budget, EM held out (tokens): {path}; {span}",
        "verdict": verdict,
        "pairs": rises + ([overall] if overall else []),
        "decides": _labels(overall),
    }


def _runs_of(optimum):
    """Consecutive budgets that share their best row, as [(budget, row), ...] groups."""
    return [list(group) for _, group in itertools.groupby(optimum, key=lambda item: id(item[1]))]


def _span(budgets: Sequence[int]) -> str:
    return format_size(budgets[0]) + (f"-{format_size(budgets[-1])}" if len(budgets) > 1 else "")


def drag_then_iterdrag(rows: Sequence[Row], budgets: Sequence[int], pairs: Pairs) -> dict[str, Any] | None:
    found, drag_alone = [], False  # drag_alone: at the smallest budget DRAG fits and no IterDRAG does
    for b in budgets:
        drag = pairs.best(rows_of("drag", rows), b)
        iterdrag = pairs.best([r for r in rows if r.method == "iterdrag"], b)
        if drag is not None and iterdrag is not None:
            found.append((b, pairs.best(rows, b).method, pairs.pair(iterdrag, drag, held_out=True, budget=b)))
        drag_alone = drag_alone or (drag is not None and iterdrag is None and not found)
    if not found:
        return None
    # IterDRAG - DRAG: claimed positive at the largest budget, negative at the smallest (unless DRAG fits alone)
    large, small = family.verdict(found[-1][2]["ci"]), family.verdict(found[0][2]["ci"], claimed=-1)
    if large == "not held" or (small == "not held" and not drag_alone):
        verdict = "not held"
    elif large == "held" and (drag_alone or small == "held"):
        verdict = "held"
    else:
        verdict = "not shown"
    winners = ", ".join(f"{format_size(b)} {method}" for b, method, _ in found)
    return {
        "claim": "DRAG is best at small budgets, IterDRAG at large ones",
        "here": f"best method per budget: {winners}; IterDRAG's best - DRAG's best: "
        + ", ".join(f"{format_size(b)} {p['text']}" for b, _, p in found)
        + ("; the smallest budget fits DRAG and no IterDRAG" if drag_alone else ""),
        "verdict": verdict,
        "pairs": [p for _, _, p in found],
        "decides": sorted({*_labels(found[0][2]), *_labels(found[-1][2])}),
    }


def same_setting(rows: Sequence[Row], pairs: Pairs, *, claim: str, changed: Callable, base: Callable) -> dict | None:
    """Rows that differ only in the claimed change: each ``changed(row)`` row against the ``base(row)`` row with its
    documents and shots; the pair at the largest documents and shots (then the most iterations) decides."""
    found = []
    for row in sorted(filter(changed, rows), key=lambda r: (r.docs, r.shots, r.iterations)):
        partner = next((r for r in rows if base(r) and (r.docs, r.shots) == (row.docs, row.shots)), None)
        if partner is not None:
            found.append(pairs.pair(row, partner))
    if not found:
        return None
    return {
        "claim": claim,
        "here": "; ".join(f"{p['a']} - {p['b']}: {p['text']}" for p in found) + f" (decides: {found[-1]['a']})",
        "verdict": family.verdict(found[-1]["ci"]),
        "pairs": found,
        "decides": _labels(found[-1]),
    }


def allocation_fit(fitted: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if fitted is None or not fitted["at_budget"]:
        return None
    r2 = fitted["model"]["r2"]
    if r2 is None or math.isnan(r2):
        return None  # the model could not be assessed (all configurations scored alike)
    picks = [a["percent_of_best"] for a in fitted["at_budget"]]
    extrapolated = [a["percent_of_best"] for a in fitted["extrapolation"]]
    held = r2 >= ALLOCATION_R2 and min(picks + extrapolated) >= ALLOCATION_PICK
    extra = f"{min(extrapolated):.0f}-{max(extrapolated):.0f}%" if extrapolated else "not checked"
    return {
        "claim": "the allocation model fits the grid (R² 0.903) and picks within a few percent of the best, also at "
        "budgets it was not fitted on",
        "here": f"R² {r2:.3f}, MSE {fitted['model']['mse']:.3f} (logit); picks {min(picks):.0f}-{max(picks):.0f}% of "
        f"the best; extrapolated {extra} (held needs R² >= {ALLOCATION_R2} and every pick >= {ALLOCATION_PICK:.0f}%)",
        "verdict": "held" if held else "not held",
        "pairs": [],
        "decides": sorted({_point(a["predicted"]).label for a in fitted["at_budget"]}),
    }


def retrieval(rows: Sequence[Row], pairs: Pairs) -> dict[str, Any] | None:
    """RAG without shots against closed-book at each documents count; the grid's largest decides."""
    closed = next((r for r in rows if r.method == BASELINE and r.shots == 0), None)
    rag = sorted((r for r in rows if r.method == "rag" and r.shots == 0), key=lambda r: r.docs)
    found = [pairs.pair(r, closed) for r in rag] if closed else []
    if not found:
        return None
    return {
        "claim": "retrieval beats closed-book",
        "here": "; ".join(f"{p['a']} - closed-book: {p['text']}" for p in found) + f" (decides: {found[-1]['a']})",
        "verdict": family.verdict(found[-1]["ci"]),
        "pairs": found,
        "decides": _labels(found[-1]),
    }


def oracle_bounds(rows: Sequence[Row], budgets: Sequence[int], oracle: Sequence[Row], pairs: Pairs) -> list[dict]:
    by_name = {r.method: r for r in _measured(oracle)}
    gold, padded = by_name.get("oracle-gold"), by_name.get("oracle-distractors")
    best = pairs.best(rows, budgets[-1])
    checks = [
        ("retrieval bounds the reader: given the gold paragraphs, it beats the grid's best", gold, best, True),
        ("distractors hurt the reader: the gold paragraphs among retrieved passages score below them alone", gold,
         padded, False),
    ]  # fmt: skip
    claims = []
    for claim, a, b, held_out in checks:
        if a is not None and b is not None:
            p = pairs.pair(a, b, held_out=held_out)
            here = f"{p['a']} {p['a_em']:.1f} ({a.effective_context():,.0f} tokens) - {p['b']} {p['b_em']:.1f} "
            here += f"({b.effective_context():,.0f}): {p['text']}"
            claims.append({"claim": claim, "here": here, "verdict": family.verdict(p["ci"]), "pairs": [p],
                           "decides": _labels(p)})  # fmt: skip
    return claims


def check_claims(
    rows: Sequence[Row],
    budgets: Sequence[int],
    fitted: Mapping[str, Any] | None,
    scores: Scores,
    *,
    oracle: Sequence[Row] = (),
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The claims the sweep's rows (and its ``oracle`` rows) speak to, in the order of the module docstring: each
    the claim, what was found here (numbers and CIs), the verdict, the paired comparisons behind it (JSON-ready),
    and the configurations that decide it."""
    measured = _measured(rows)
    budgets, pairs = sorted(budgets), Pairs(scores, seed, [*measured, *oracle])
    _claims(measured, budgets, fitted, oracle, pairs)  # every comparison made once, then adjusted as one family
    pairs.adjust()
    return [_json(c) for c in _claims(measured, budgets, fitted, oracle, pairs) if c is not None]


def _claims(measured: Sequence[Row], budgets: Sequence[int], fitted, oracle: Sequence[Row], pairs: Pairs) -> list:
    return [
        scaling(measured, budgets, pairs),
        drag_then_iterdrag(measured, budgets, pairs),
        same_setting(
            measured, pairs, claim="more IterDRAG iterations help at the same documents and shots",
            changed=lambda r: r.method == "iterdrag" and r.iterations > 1,
            base=lambda r: r.method == "iterdrag" and r.iterations == 1,
        ),
        same_setting(
            measured, pairs, claim="DRAG's demonstrations, which carry their documents, beat RAG's at the same "
            "documents and shots",
            changed=lambda r: r.method == "drag" and r.shots > 0,
            base=lambda r: r.method == "rag",
        ),
        allocation_fit(fitted),
        retrieval(measured, pairs),
        *(oracle_bounds(measured, budgets, oracle, pairs) if budgets else []),
    ]  # fmt: skip


def below_floor(
    rows: Sequence[Row], dataset: str, records: Callable[[str], Sequence[dict] | None]
) -> dict[str, list[tuple[str, float, float]]]:
    """The labels of ``rows`` whose learned demonstrations left them below a floor of their method, judged on their
    per-question ``records`` (by run id; None where they cannot be read, and the row is not judged), each with its
    shortfalls (``experiments.floors.shortfalls``): what ``not_tested`` takes, and what ``format_floors`` lists."""
    below = {}
    for row in rows:
        if row.program == UNCOMPILED or (row.program is None and not row.shots) or not row.run_id:
            continue  # None: a row that recorded no program, compiled when it has shots
        found = records(row.run_id)
        learned = {"method": row.method, "optimizer": "learned", "dataset": dataset}
        if found is not None and (short := shortfalls(learned, found)):
            below[row.label] = short
    return below


def format_floors(below: Mapping[str, list[tuple[str, float, float]]]) -> str:
    """The configurations below a floor of their method (``below_floor``) as a table, each with its shortfall: what
    the budget table, the claims and the allocation model count under a method's name without its defining step."""
    if not below:
        return "No configuration with learned demonstrations falls below a floor its records measure."
    lines = ["| configuration | below its method's floor |", "|---|---|"]
    for label, found in below.items():
        lines.append(f"| {label} | {describe(found)} |")
    return "\n".join(lines)


def not_tested(claims: Sequence[dict[str, Any]], below_floor: Collection[str]) -> list[dict[str, Any]]:
    """``claims`` with the verdict of each one decided by a configuration in ``below_floor`` (labels of
    configurations that fall below a floor of their method: ``below_floor``) made ``not tested``: a claim of
    IterDRAG decided by an IterDRAG that asks no follow-up tests nothing of IterDRAG."""
    marked = []
    for claim in claims:
        below = [name for name in claim["decides"] if name in below_floor]
        marked.append({**claim, "verdict": family.not_tested(below) if below else claim["verdict"]})
    return marked


def _point(predicted: Mapping[str, Any]) -> Point:
    """The configuration an allocation pick names (``allocation.assess``'s ``predicted``)."""
    return Point(predicted["method"], predicted["docs"], predicted["shots"], predicted["iterations"])


def _labels(pair: Mapping[str, Any] | None) -> list[str]:
    """The configurations a deciding comparison pairs."""
    return [] if pair is None else [pair["a"], pair["b"]]


def _measured(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if None not in (r.em, r.effective_context_tokens_per_question, r.run_id)]


def _json(claim: dict[str, Any]) -> dict[str, Any]:
    def plain(pair):
        ci = pair.pop("ci")
        return {**pair, **{k: getattr(ci, k, None) for k in ("diff", "low", "high", "n", "p", "p_adjusted")}}

    return {**claim, "pairs": [plain(dict(p)) for p in claim["pairs"]]}


def format_claims(claims: Sequence[Mapping[str, Any]], n: int) -> str:
    lines = [
        f"| the paper's claim | here: EM, {n} questions (a chosen best: the {n // 2} it was not chosen on), paired "
        f"95% CI (* real: {family.RULE}) | held? |",
        "|---|---|---|",
    ]
    return "\n".join(lines + [f"| {c['claim']} | {c['here']} | {c['verdict']} |" for c in claims])


def format_verdicts(claims: Sequence[Mapping[str, Any]], n: int) -> str:
    """The claims table in short, for a page that states verdicts: each claim with only the comparison that decides
    it (its last pair: the largest budget, documents and shots, or the one comparison made), else what was found."""

    def deciding(c: Mapping[str, Any]) -> str:
        if not c["pairs"]:
            return c["here"]
        p = c["pairs"][-1]
        if p.get("span"):  # the best at the largest budget against the best at the smallest
            at = f"the best at {p['span']}: "
        else:
            at = f"at {format_size(p['budget'])}: " if p.get("budget") is not None else ""
        return f"{at}{p['a']} - {p['b']}: {p['text']}" + (" (held out)" if p["held_out"] else "")

    lines = [
        f"| the paper's claim | the comparison that decides it: EM, {n} questions (held out: the {n // 2} a best "
        f"was not chosen on), paired 95% CI (* real: {family.RULE}) | held? |",
        "|---|---|---|",
    ]
    return "\n".join(lines + [f"| {c['claim']} | {deciding(c)} | {c['verdict']} |" for c in claims])
