"""Every published manifest is append-only: across its committed history (and the working tree's copy), no entry of
a run or a sweep row is rewritten or dropped; a replaced one goes, whole, to the end of its ``superseded`` list,
which only grows. A manifest from before the rule (no ``superseded``) is where its history starts to be checked."""

import itertools
import json
import subprocess
from pathlib import Path

import pytest

from ragscale.published.runs import SUPERSEDED

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "benchmarks" / "results").glob("*/manifest.json"))


def entries(manifest: dict) -> dict[str, dict]:
    """A manifest's entries by name: a method table's runs, a sweep's ``rows/<name>`` and ``oracle/<name>``."""
    if "rows" in manifest:
        return {f"{part}/{name}": entry for part in ("rows", "oracle") for name, entry in manifest[part].items()}
    return dict(manifest["runs"])


def versions(path: Path) -> list[dict]:
    """The manifest at ``path`` as each commit that changed it left it, oldest first, then as the work tree has it
    (a clone without history gives the work tree's alone)."""
    relative = str(path.relative_to(ROOT))

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout

    try:
        shown = [
            git("show", f"{commit}:{relative}")
            for commit in git("log", "--format=%H", "--reverse", "--", relative).split()
        ]
    except (OSError, subprocess.CalledProcessError):
        shown = []
    return [json.loads(text) for text in shown if text.strip()] + [json.loads(path.read_text(encoding="utf-8"))]


def rewritten(old: dict, new: dict) -> list[str]:
    """What ``new`` rewrote of ``old``: none where ``old`` predates the rule."""
    if SUPERSEDED not in old:
        return []
    gone = new.get(SUPERSEDED, [])
    problems = [] if gone[: len(old[SUPERSEDED])] == old[SUPERSEDED] else ["an entry of superseded was changed"]
    added, now = gone[len(old[SUPERSEDED]) :], entries(new)
    for name, entry in entries(old).items():
        if now.get(name) != entry and {"name": name, **entry} not in added:
            problems.append(f"{name}: its entry was rewritten or dropped, not superseded")
    return problems


@pytest.mark.parametrize("path", MANIFESTS, ids=[path.parent.name for path in MANIFESTS])
def test_no_manifest_history_rewrites_an_entry(path):
    history = versions(path)
    assert SUPERSEDED in history[-1], f"{path}: no {SUPERSEDED} list: a manifest is append-only"
    for old, new in itertools.pairwise(history):
        assert not rewritten(old, new), f"{path}: {rewritten(old, new)}"


def test_the_check_catches_an_edited_entry_and_passes_a_superseded_one():
    old = {"runs": {"rag-none": {"run_id": "a", "made": {"git_commit": "1"}}}, SUPERSEDED: []}
    edited = {"runs": {"rag-none": {"run_id": "a", "made": {"git_commit": "2"}}}, SUPERSEDED: []}
    assert rewritten(old, edited) == ["rag-none: its entry was rewritten or dropped, not superseded"]
    rerun = {"runs": {"rag-none": {"run_id": "b"}}, SUPERSEDED: [{"name": "rag-none", **old["runs"]["rag-none"]}]}
    assert rewritten(old, rerun) == [] and rewritten(rerun, {**rerun, SUPERSEDED: []}) != []
