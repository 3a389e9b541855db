"""Every star of the published pages follows one exact rule: no published comparison's p-value, and so no verdict,
moves with the bootstrap's seed."""

import functools

from ragscale.experiments import paired
from ragscale.published import directives
from ragscale.published.directives import REPO
from ragscale.published.pages import PAGES, render


def published_differences(monkeypatch) -> dict[tuple[float, ...], float]:
    """Every paired difference the published pages test, each question's, with its p-value: the pages rendered
    afresh with ``paired.sign_flip_p`` recording what it is asked."""
    seen: dict[tuple[float, ...], float] = {}
    exact = paired.sign_flip_p

    def recording(diffs):
        key = tuple(float(d) for d in diffs)
        if key not in seen:
            seen[key] = exact(diffs)
        return seen[key]

    monkeypatch.setattr(paired, "sign_flip_p", recording)
    for cached in vars(directives).values():
        if isinstance(cached, functools._lru_cache_wrapper):
            cached.cache_clear()  # a folder read by an earlier test is read again, its comparisons made again
    for page in PAGES:
        render((REPO / page).read_text(encoding="utf-8"), page)
    return seen


def test_no_published_p_value_moves_over_200_seeds_of_the_bootstrap(monkeypatch):
    seen = published_differences(monkeypatch)
    assert len(seen) > 100  # the core tables, the methods, the sweeps, the documents
    for diffs, p in list(seen.items()):
        a, zero = {f"{i:05d}": d for i, d in enumerate(diffs)}, {f"{i:05d}": 0.0 for i in range(len(diffs))}
        assert {paired.paired_bootstrap(a, zero, resamples=20, seed=seed).p for seed in range(200)} == {p}
