"""``ragscale mlflow``: MLflow's own command line (``ui``, ``server``, ...) in ragscale's offline environment.

``mlflow ui`` and ``mlflow server`` import LiteLLM, which on a machine without internet tries to fetch its model
price map and then hangs on an import lock: no port, no message. ``ragscale mlflow ARGS`` is ``mlflow ARGS`` run
by this Python with the environment of ``ragscale.process`` set (``LITELLM_LOCAL_MODEL_COST_MAP`` among it), which the
server's worker processes inherit. Every argument goes to MLflow unchanged.
"""

from __future__ import annotations

import argparse
import os
import sys


def add_parsers(subparsers) -> None:
    command = subparsers.add_parser(
        "mlflow",
        help="MLflow's command line, offline: e.g. `ragscale mlflow ui --backend-store-uri sqlite:///$PWD/runs/mlflow.db`",
        description="Runs `mlflow ARGS` with the offline environment set (LiteLLM's price map, the model hub, "
        "telemetry). `ragscale mlflow server --backend-store-uri sqlite:///DIR/mlflow.db --artifacts-destination "
        "DIR/artifacts --port 5000` starts a tracking server for --tracking-uri http://127.0.0.1:5000.",
    )
    command.add_argument("mlflow_args", nargs=argparse.REMAINDER, metavar="ARGS", help="mlflow's arguments")
    command.set_defaults(func=cmd_mlflow)


def cmd_mlflow(args: argparse.Namespace) -> int:
    """Replace this process by ``python -m mlflow ARGS`` (the CLI set the environment: ``process.prepare_process``)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "mlflow", *args.mlflow_args])
    return 0  # not reached: execv does not return
