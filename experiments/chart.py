"""The comparison chart: each compared run's EM and F1 with their 95% CIs, and its effective context.

``plot(rows, runs, path)`` draws ``compare.compare_runs`` rows (``ragscale compare`` writes it beside its table
and logs both to MLflow).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragscale.experiments.compare import RunResult
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT
from ragscale.experiments.paired import RESAMPLES, paired_bootstrap


def plot(
    rows: Sequence[Mapping[str, Any]],
    runs: Sequence[RunResult],
    path: Path,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Path:
    """One group per row: its EM and F1 as bars with their 95% bootstrap CIs (of each run's own mean, not of a
    difference), and its effective context (input tokens per question) as a diamond on a second, log axis;
    written to ``path`` (PNG) with matplotlib's Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_id = {run.run_id: run for run in runs}
    labels, bars, errors, context = [], {"EM": [], "F1": []}, {"EM": [], "F1": []}, []
    for row in rows:
        run = by_id[row["run_id"]]
        labels.append(f"{row['method']}\n{row['optimizer']}\n{row['dataset']}")
        for name, scores in (("EM", run.em), ("F1", run.f1)):
            zero = dict.fromkeys(scores, 0.0)  # the CI of the run's own mean
            ci = paired_bootstrap(scores, zero, resamples=resamples, seed=seed) if scores else None
            bars[name].append(ci.diff if ci else 0.0)
            errors[name].append((ci.diff - ci.low, ci.high - ci.diff) if ci else (0.0, 0.0))
        context.append(row.get(EFFECTIVE_CONTEXT))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(rows) + 2), 4.5))
    width = 0.38
    for offset, name in ((-width / 2, "EM"), (width / 2, "F1")):
        xs = [i + offset for i in range(len(rows))]
        ax.bar(xs, bars[name], width, label=name, yerr=list(zip(*errors[name], strict=True)), capsize=3)
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("score (%), 95% CI")
    tokens = ax.twinx()
    shown = [(i, c) for i, c in enumerate(context) if c]
    if shown:
        tokens.scatter(*zip(*shown, strict=True), color="black", marker="D", s=22, label="effective context")
        tokens.set_yscale("log")
    tokens.set_ylabel("effective context (input tokens / question)")
    handles = ax.get_legend_handles_labels()[0] + tokens.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="upper left")
    ax.set_title(f"{len(rows)} runs: EM and F1 with 95% CIs, effective context")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
