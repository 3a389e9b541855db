"""A tracked run from Python: what ``ragscale run`` does, from a ``RunConfig`` or its fields as keywords."""

from __future__ import annotations

from typing import Any


def run(config=None, /, *, progress: bool = True, fresh: bool = False, **settings: Any) -> dict[str, Any]:
    """One tracked run, as ``ragscale run`` makes it: compile ``method`` on ``dataset``'s train split, evaluate it on
    its dev split, log everything to MLflow (the compiled program as the model ``model`` too); returns the summary
    (EM, F1, tokens per question, ``mlflow_run_id``, ``model_uri``, ...).

    ``config`` is a ``RunConfig``, or give its fields as keywords (``run(method="drag", dataset="hotpotqa",
    optimizer="bootstrap", limit=20)``); keywords given with a config replace its fields. Inputs are checked before
    the model loads; an unfinished run of the same configuration is resumed unless ``fresh``.
    """
    from dataclasses import replace

    from ragscale.experiments.config import RunConfig
    from ragscale.experiments.inputs import check_inputs
    from ragscale.experiments.runner import run_experiment

    config = RunConfig.from_mapping(settings, source="run()") if config is None else replace(config, **settings)
    check_inputs(config)
    return run_experiment(config, progress=progress, fresh=fresh)
