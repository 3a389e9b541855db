"""Every comparison the published pages test sits in exactly one family, and every table says which family and
which correction its stars come from."""

import inspect
import sys

import pytest

from ragscale.experiments import family, paired
from ragscale.published import directives, plan
from ragscale.published.directives import REPO, RESULTS, value
from ragscale.published.pages import PAGES, render


def rendered_families(monkeypatch) -> tuple[list[dict], list[tuple[str, str]]]:
    """The pages rendered afresh: each family adjusted on the way, as each of its comparisons (the per-question
    differences it pairs, either way round) with the verdict the family gives it, and each directive with the text
    it wrote."""
    compared: dict[int, tuple] = {}
    original = paired.paired_bootstrap

    def recording(a, b, **kwargs):
        ci = original(a, b, **kwargs)
        if ci is not None:
            there = tuple((i, float(a[i]) - float(b[i])) for i in sorted(set(a) & set(b)))
            back = tuple((i, -d) for i, d in there)
            compared[id(ci)] = (ci, min(there, back), 1 if there <= back else -1)  # the CI kept: its id stays its own
        return ci

    for module in list(sys.modules.values()):
        if module.__name__.startswith("ragscale") and getattr(module, "paired_bootstrap", None) is original:
            monkeypatch.setattr(module, "paired_bootstrap", recording)
    families: list[dict] = []
    adjust = family.adjust

    def recording_adjust(cis, rule=family.holm):
        out = adjust(cis, rule)
        caller = inspect.currentframe().f_back
        score = caller.f_locals.get("score", "em")  # a table of several scores makes a family of each
        where = next((str(f.f_locals["folder"]) for f in frames(caller) if "folder" in f.f_locals), None)
        members = {}
        for before, after in zip(cis, out, strict=True):
            if before is not None and id(before) in compared:
                _, key, sign = compared[id(before)]
                members[score, key] = family.verdict(after, sign)  # the verdict of the comparison the key names
        families.append({"folder": where, "members": members})
        return out

    monkeypatch.setattr(family, "adjust", recording_adjust)
    plan.adjusted.cache_clear()
    for cached in vars(directives).values():
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()
    written: list[tuple[str, str]] = []

    def writing(expr: str) -> str:
        text = value(expr)
        written.append((expr, text))
        return text

    for page in PAGES:
        render((REPO / page).read_text(encoding="utf-8"), page, writing)
    plan.adjusted.cache_clear()
    return families, written


def frames(frame):
    while frame is not None:
        yield frame
        frame = frame.f_back


def test_each_published_comparison_is_in_one_family_and_each_table_names_its_family(monkeypatch):
    """Every family the pages adjust is gathered with the published folder it was made on. A comparison (one score's
    per-question differences) in two families is allowed only where they are two folders' (two benchmarks that gave
    the same answers, each comparison of its own runs); and it gets one verdict wherever it is."""
    families, written = rendered_families(monkeypatch)
    distinct = {(f["folder"], frozenset(f["members"].items())) for f in families if f["members"]}
    held: dict[tuple, list] = {}
    for where, members in distinct:
        for comparison, verdict in members:
            held.setdefault(comparison, []).append((where, verdict))
    assert len(held) > 100  # the core tables, the methods, the sweeps, the documents
    for comparison, found in held.items():
        folders = [where for where, _ in found]
        assert len(found) == 1 or (None not in folders and len(set(folders)) == len(folders)), (
            f"a comparison of {len(comparison[1])} questions sits in {len(found)} families: {folders}"
        )
        assert len({verdict for _, verdict in found}) == 1, f"its verdicts differ: {found}"
    starred = [(expr, text) for expr, text in written if expr.split()[0] in ("table", "compiled", "against", "claims")]
    assert starred
    for expr, text in starred:
        assert family.RULE in text and plan.PLAN in text, f"`{expr}` does not name its family and correction"


def test_a_comparison_no_plan_names_is_an_error_naming_the_folder_and_the_plans_comparisons():
    folder = RESULTS / "core-hotpotqa-qwen2.5-coder-0.5b"
    (a, b), *_ = plan.planned(folder)
    assert plan.compared(folder, b, a).diff == -plan.compared(folder, a, b).diff
    with pytest.raises(ValueError, match=rf"core-hotpotqa-qwen2.5-coder-0.5b: {a} - {a} is not in its plan.json"):
        plan.compared(folder, a, a)


def test_a_plan_naming_a_missing_run_or_a_comparison_twice_is_refused(tmp_path):
    (tmp_path / "manifest.json").write_text('{"runs": {"rag-none": {}, "closed-book-none": {}}}')
    (tmp_path / "plan.json").write_text('{"comparisons": [["rag-none", "drag-bootstrap"]]}')
    with pytest.raises(ValueError, match=r"names drag-bootstrap; its runs: rag-none, closed-book-none"):
        plan.planned(tmp_path)
    (tmp_path / "plan.json").write_text('{"comparisons": [["rag-none", "closed-book-none"], ["closed-book-none", '
                                        '"rag-none"]]}')  # fmt: skip
    with pytest.raises(ValueError, match=r"named twice"):
        plan.planned(tmp_path)
    (tmp_path / "plan.json").unlink()
    with pytest.raises(ValueError, match=r"no plan.json"):
        plan.planned(tmp_path)
