"""The paper's claims, checked on sweep rows with per-question scores made to hold or to fail each claim."""

from __future__ import annotations

import hashlib

import pytest

from ragscale.experiments.sweep.claims import check_claims, format_claims, not_tested
from ragscale.experiments.sweep.rows import Row

N = 100


def row(method, docs, shots, iterations, acc, tokens):
    return Row(
        method, docs, shots, iterations, acc=acc, em=acc, f1=acc, effective_context_tokens_per_question=tokens,
        run_id=f"{method}-{docs}-{shots}-{iterations}",
    )  # fmt: skip


QUESTIONS = sorted((f"q{i}" for i in range(N)), key=lambda i: hashlib.sha256(i.encode()).hexdigest())


def scores_of(rows):
    """Each run right on its first `acc` questions in the order ``HeldOut`` deals them to its halves, so an even
    `acc` is its EM on either half too; a higher score is right wherever a lower one is."""
    by_run = {r.run_id: {q: 100.0 * (i < r.acc) for i, q in enumerate(QUESTIONS)} for r in rows}
    return by_run.get


def claim(rows, budgets, starts, fitted=None):
    """The claim checked on `rows` whose text starts with `starts`."""
    (found,) = [c for c in check_claims(rows, budgets, fitted, scores_of(rows)) if c["claim"].startswith(starts)]
    return found


SCALING = "under the best allocation"
RAG_K5 = {"method": "rag", "docs": 5, "shots": 0, "iterations": 0}
ORDER = "DRAG is best at small budgets"


RISING = [
    row("closed-book", 0, 0, 0, 10, 100),
    row("rag", 5, 0, 0, 30, 800),
    row("drag", 5, 2, 0, 45, 1800),
    row("iterdrag", 5, 2, 1, 60, 3500),
]
"""Each budget's best better than the one before."""


def test_the_scaling_claim_is_decided_by_the_best_at_the_largest_budget_against_the_best_at_the_smallest_alone():
    rising = RISING
    found = claim(rising, [1000, 2000, 4000], SCALING)
    assert found["verdict"] == "held"
    assert "4k - 1k: +30.0" in found["here"]

    past_the_grid = claim(rising, [1000, 2000, 4000, 8000, 16000], SCALING)  # 8k and 16k admit nothing new
    assert past_the_grid["verdict"] == "held"

    # a best that stops changing at 4k is no rule of its own: the deciding comparison still holds the claim
    flat = [
        *rising,
        row("rag", 10, 0, 0, 20, 1500),
        row("iterdrag", 10, 2, 2, 40, 7000),
        row("drag", 10, 2, 0, 5, 12000),
    ]
    found = claim(flat, [1000, 2000, 4000, 8000, 16000], SCALING)
    assert found["verdict"] == "held" and "4k-16k: iterdrag k=5 m=2 n=1 60.0" in found["here"]
    # one best at every budget: no comparison decides, so nothing is shown
    same = claim([row("rag", 5, 0, 0, 30, 800), row("drag", 5, 2, 0, 20, 1800)], [1000, 2000], SCALING)
    assert same["verdict"] == "not shown" and "one configuration is best at every budget" in same["here"]


def test_a_tie_on_the_choosing_half_goes_to_the_fewest_tokens_whatever_the_other_half_says():
    from ragscale.experiments.sweep.heldout import HeldOut

    choosing = set(QUESTIONS[0::2])
    cheap, dear = row("rag", 5, 0, 0, 0, 800), row("drag", 5, 2, 0, 0, 1800)
    scores = {
        cheap.run_id: {q: 100.0 * (q in choosing and q in QUESTIONS[:20]) for q in QUESTIONS},
        dear.run_id: {q: 100.0 * (q in QUESTIONS[:20] or q not in choosing) for q in QUESTIONS},
    }  # both right on the same 10 choosing questions; dear right on every question of the other half
    held_out = HeldOut(lambda r: scores[r.run_id], [cheap, dear])
    assert held_out.em(cheap, choosing=True) == held_out.em(dear, choosing=True)
    assert held_out.best_within([dear, cheap], 4000) is cheap and held_out.em(dear) > held_out.em(cheap)
    twin = row("drag", 5, 0, 0, 0, 800)  # as many tokens: the first label
    scores[twin.run_id] = scores[cheap.run_id]
    assert held_out.best_within([cheap, twin, dear], 4000) is twin


def test_iterdrag_ahead_at_the_largest_budget_and_not_at_the_smallest_holds_the_order_claim_and_behind_fails_it():
    base = [row("rag", 1, 0, 0, 20, 300), row("drag", 5, 2, 0, 40, 1500)]
    ahead = [*base, row("iterdrag", 1, 0, 1, 20, 1800), row("iterdrag", 5, 2, 2, 70, 6000)]
    assert claim(ahead, [2000, 8000], ORDER)["verdict"] == "held"
    drag_alone = [row("drag", 5, 2, 0, 40, 900), row("iterdrag", 5, 2, 2, 70, 6000)]
    assert claim(drag_alone, [1000, 8000], ORDER)["verdict"] == "held"
    behind = [*base, row("iterdrag", 1, 0, 1, 20, 1800), row("iterdrag", 5, 2, 2, 10, 6000)]
    assert claim(behind, [2000, 8000], ORDER)["verdict"] == "not held"
    # DRAG with no demonstration is RAG with no shot: that row is DRAG's best at 8k, ahead of IterDRAG there
    zero_shot = [*behind, row("rag", 20, 0, 0, 60, 3000), row("rag", 20, 2, 0, 90, 3200)]
    found = claim(zero_shot, [2000, 8000], ORDER)
    assert found["verdict"] == "not held" and found["pairs"][-1]["b"] == "rag k=20 m=0"


def test_drag_and_iterations_are_compared_at_the_same_documents_and_shots_only():
    rows = [
        row("rag", 5, 2, 0, 30, 800), row("rag", 10, 2, 0, 90, 1500), row("drag", 5, 2, 0, 50, 1800),
        row("iterdrag", 5, 2, 1, 40, 3000), row("iterdrag", 5, 2, 2, 40, 3600),
    ]  # fmt: skip
    demos = claim(rows, [4000], "DRAG's demonstrations")
    (pair,) = demos["pairs"]
    assert (pair["a"], pair["b"], pair["diff"]) == ("drag k=5 m=2", "rag k=5 m=2", 20.0)
    assert demos["verdict"] == "held"
    iterations = claim(rows, [4000], "more IterDRAG")
    assert iterations["verdict"] == "not shown" and iterations["pairs"][0]["diff"] == 0.0


@pytest.mark.parametrize(
    ("r2", "picks", "verdict"),
    [(0.95, [100.0, 96.0], "held"), (0.95, [100.0, 80.0], "not held"), (0.5, [100.0], "not held")],
)
def test_the_allocation_claim_needs_the_papers_fit_and_picks_within_a_few_percent(r2, picks, verdict):
    fitted = {
        "model": {"r2": r2, "mse": 0.1},
        "at_budget": [{"percent_of_best": p, "predicted": RAG_K5} for p in picks],
        "extrapolation": [{"percent_of_best": picks[-1]}],
    }
    claims = check_claims([], [1000], fitted, lambda run_id: None)
    assert [c["verdict"] for c in claims] == [verdict] and claims[0]["decides"] == ["rag k=5 m=0"]  # its picks


def test_without_per_question_scores_a_comparison_is_not_shown_and_says_so():
    rows = [row("closed-book", 0, 0, 0, 10, 100), row("rag", 5, 0, 0, 60, 800)]
    (found,) = [c for c in check_claims(rows, [1000], None, lambda run_id: None) if c["claim"].startswith("retrieval")]
    assert found["verdict"] == "not shown" and "n/a" in found["here"] and found["pairs"][0]["diff"] is None
    table = format_claims([found], N)
    assert table.splitlines()[0].startswith("| the paper's claim |") and "| not shown |" in table


def test_the_oracle_rows_are_set_against_the_grids_best_at_its_largest_budget_and_against_each_other():
    rows = [row("rag", 5, 0, 0, 30, 800), row("iterdrag", 5, 2, 2, 35, 6000)]
    gold, every = row("oracle-gold", 0, 0, 0, 50, 400), row("oracle-distractors", 50, 0, 0, 20, 1600)
    found = check_claims(rows, [1000, 8000], None, scores_of([*rows, gold, every]), oracle=[gold, every])
    bound, distractors = found[-2:]
    # the grid's best is compared on the half it was not chosen on: there IterDRAG's 35 is 17 of 50 right
    assert bound["pairs"][0]["b"] == "iterdrag k=5 m=2 n=2" and bound["pairs"][0]["diff"] == 16.0
    assert (bound["verdict"], distractors["verdict"]) == ("held", "held")
    assert distractors["here"].startswith("oracle-gold 50.0 (400 tokens) - oracle-distractors 20.0 (1,600)")


def test_the_best_is_chosen_on_one_half_of_the_questions_and_reported_on_the_other():
    from ragscale.experiments.sweep.heldout import HeldOut
    from ragscale.experiments.sweep.report import budget_table

    choosing, reporting = QUESTIONS[0::2], QUESTIONS[1::2]
    lucky, steady = row("rag", 5, 0, 0, 50, 800), row("drag", 5, 2, 0, 48, 900)
    scores = {
        lucky.run_id: {q: 100.0 * (q in choosing) for q in QUESTIONS},  # right on every choosing question only
        steady.run_id: {q: 100.0 * (i < 48) for i, q in enumerate(QUESTIONS)},
    }
    held_out = HeldOut(lambda r: scores[r.run_id], [lucky, steady])
    assert (held_out.choosing, held_out.reporting) == (frozenset(choosing), frozenset(reporting))
    assert held_out.best_within([lucky, steady], 1000) is lucky  # 100 on the choosing half, against 48
    assert (held_out.em(lucky), held_out.em(steady)) == (0.0, 48.0)

    (best,) = [r for r in budget_table([lucky, steady], [1000], held_out) if r["method"] == "best"]
    assert (best["config"], best["em_held_out"], best["em"]) == ("rag k=5 m=0", 0.0, 50.0)
    gold = row("oracle-gold", 0, 0, 0, 60, 400)
    scores[gold.run_id] = scores_of([gold])(gold.run_id)
    found = check_claims([lucky, steady], [1000], None, scores.get, oracle=[gold])
    (bound,) = [c for c in found if c["claim"].startswith("retrieval bounds")]
    assert bound["pairs"][0]["held_out"] and bound["pairs"][0]["n"] == N // 2 and bound["pairs"][0]["b_em"] == 0.0


def test_the_verdicts_table_shows_each_claim_with_only_the_comparison_that_decides_it():
    from ragscale.experiments.sweep.claims import format_verdicts

    rows = [row("closed-book", 0, 0, 0, 10, 100), *(row("rag", k, 0, 0, 30 + k, 200 * k) for k in (1, 5, 10))]
    (found,) = [c for c in check_claims(rows, [4000], None, scores_of(rows)) if c["claim"].startswith("retrieval")]
    short = format_verdicts([found], N).splitlines()[2]
    assert short.startswith("| retrieval beats closed-book | rag k=10 m=0 - closed-book k=0 m=0: +30.0 ")
    assert "rag k=1 m=0" not in short and short.endswith(f"| {found['verdict']} |")
    # the scaling claim's deciding pair says which budgets' bests it sets against each other
    scaling = claim(rows, [1000, 4000], SCALING)
    assert "| the best at 4k - 1k: rag k=10 m=0 - rag k=" in format_verdicts([scaling], N)


def test_a_claim_decided_by_a_configuration_below_its_floor_is_not_tested_and_the_others_keep_their_verdicts():
    claims = check_claims(RISING, [1000, 2000, 4000], None, scores_of(RISING))
    scaling = next(c for c in claims if c["claim"].startswith(SCALING))
    assert scaling["verdict"] == "held" and scaling["decides"] == ["iterdrag k=5 m=2 n=1", "rag k=5 m=0"]
    marked = {c["claim"]: c["verdict"] for c in not_tested(claims, {"iterdrag k=5 m=2 n=1"})}
    assert marked[scaling["claim"]] == "not tested (iterdrag k=5 m=2 n=1 below its floor)"
    assert marked["retrieval beats closed-book"] == "held"  # rag k=5 m=0 - closed-book decides it
    assert not_tested(claims, set()) == claims


def test_a_configuration_whose_learned_demonstrations_skip_its_step_is_below_floor_on_its_records():
    from dataclasses import replace

    from ragscale.data.datasets import dataset_path, read_jsonl
    from ragscale.experiments.sweep.claims import below_floor, format_floors

    ids = [r["id"] for r in read_jsonl(dataset_path("hotpotqa", "dev"))][:10]

    def asking(share):
        return [{"id": i, "behaviour": {"questions_with_follow_up": float(n < 10 * share)}} for n, i in enumerate(ids)]

    declines, asks = row("iterdrag", 5, 2, 1, 30, 4000), row("iterdrag", 5, 4, 1, 30, 6000)
    uncompiled, unread = (
        replace(row("iterdrag", 5, 0, 1, 30, 2000), program="uncompiled"),
        row("iterdrag", 10, 2, 1, 30, 8000),
    )
    records = {declines.run_id: asking(0.2), asks.run_id: asking(0.9), uncompiled.run_id: asking(0.0)}
    below = below_floor([declines, asks, uncompiled, unread], "hotpotqa", records.get)
    assert below == {"iterdrag k=5 m=2 n=1": [("questions_with_follow_up", 0.2, 0.5)]}
    assert (
        format_floors(below).splitlines()[2] == "| iterdrag k=5 m=2 n=1 | questions_with_follow_up 0.20 < floor 0.5 |"
    )
