"""The environment that keeps the libraries ragscale uses off the network, set by ragscale itself.

Each library reads its switch from the environment, most of them once, when they are first imported: Hugging Face
``datasets`` (``load_dataset("json", ...)`` of a local file still makes a request without it) and the model hub,
DSPy's and LiteLLM's model price map (fetched from GitHub on first use), MLflow's telemetry. Every module of
ragscale that uses one of those libraries calls :func:`go_offline` just before importing it, so the Python API is
offline without the CLI. A variable already set wins: ``HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0`` in the
environment (before ragscale or the library is first used) lets ``load_hub`` reach the hub. The variables stay set
for the whole process, so other code in it that uses these libraries is offline too.

Every folder may import this module (``tests/test_layout.py``): it is the one place the process environment is
decided, and it imports nothing of ragscale.
"""

from __future__ import annotations

import os

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}
"""What keeps the libraries off the network: the model hub, ``datasets``, the price map, MLflow's telemetry."""


def go_offline() -> None:
    """Set every variable of ``OFFLINE_ENV`` that is not set yet (one the user set is kept).

    Call it before the library that reads a variable is imported: ``datasets``, ``huggingface_hub`` and MLflow read
    theirs then, and a later change is not seen.
    """
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
