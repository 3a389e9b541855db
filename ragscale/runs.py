"""A tracked run from Python: what ``ragscale run`` does, from a ``RunConfig`` or its fields as keywords."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ragscale.experiments.tracking import tracking_uri

if TYPE_CHECKING:
    from ragscale.experiments.config import RunConfig


def run(
    config: RunConfig | None = None,
    /,
    *,
    progress: bool = True,
    fresh: bool = False,
    max_failed: float = 0.5,
    **settings: Any,
) -> dict[str, Any]:
    """One tracked run, as ``ragscale run`` makes it: compile ``method`` on ``dataset``'s train split, evaluate it on
    its dev split, log everything to MLflow (the compiled program as the model ``model`` too); returns the summary
    (EM, F1, tokens per question, ``mlflow_run_id``, ``model_uri``, ...).

    ``config`` is a ``RunConfig``, or give its fields as keywords (``run(method="drag", dataset="hotpotqa",
    optimizer="bootstrap", limit=20)``); keywords given with a config replace its fields. Inputs are checked before
    the model loads; an unfinished run of the same configuration is resumed unless ``fresh``. Inside your own
    ``mlflow.start_run()`` on the same store, the run is a child of yours. Keywords get a method's own compile
    settings for those they leave out, as ``ragscale run`` does (``Method.compile_defaults``); a config is as built.
    More than ``max_failed`` of the questions failing ends the run FAILED and raises ``RunFailedError``.
    """
    from ragscale.experiments.config import RunConfig
    from ragscale.experiments.inputs import check_inputs
    from ragscale.experiments.runner import run_experiment

    if config is None:
        config = RunConfig.from_mapping(settings, source="run()", method_defaults=True)
    else:
        config = replace(config, **settings)
    corpus = check_inputs(config)  # read to check it, and searched as it was read
    return run_experiment(config, corpus=corpus, progress=progress, fresh=fresh, max_failed=max_failed,
                          parent_run_id=_callers_run(config.runs_dir))  # fmt: skip


def _callers_run(runs_dir) -> str | None:
    """The caller's active MLflow run, when it is in the store the run tracks into."""
    if "mlflow" not in sys.modules:  # no run can be active in a process that never imported MLflow
        return None
    import mlflow

    active = mlflow.active_run()
    return active.info.run_id if active is not None and mlflow.get_tracking_uri() == tracking_uri(runs_dir) else None
