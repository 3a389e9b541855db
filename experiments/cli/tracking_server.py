"""``ragscale mlflow``: MLflow's own command line (``ui``, ``server``, ...) in ragscale's offline environment.

``mlflow ui`` and ``mlflow server`` import LiteLLM, which on a machine without internet tries to fetch its model
price map and then hangs on an import lock: no port, no message. ``ragscale mlflow ARGS`` runs ``mlflow ARGS`` with
this Python and the environment of ``ragscale.process`` set (``LITELLM_LOCAL_MODEL_COST_MAP`` among it), which the
server's worker processes inherit. Every argument goes to MLflow unchanged.

MLflow's server is many processes: uvicorn's workers and the job runner's huey consumers, which outlive the
``mlflow`` process when only it is stopped. So MLflow runs in a process group of its own, and SIGTERM or SIGINT
(Ctrl-C) to ``ragscale`` goes to the whole group; what is left of it ``STOP_GRACE_S`` seconds later is killed.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

STOP_GRACE_S = 5.0
"""How long MLflow's processes have to end after SIGTERM or SIGINT before what is left of them is killed."""

FORWARDED = (signal.SIGTERM, signal.SIGINT)


def add_parsers(subparsers) -> None:
    command = subparsers.add_parser(
        "mlflow",
        help="MLflow's command line, offline: e.g. `ragscale mlflow ui --backend-store-uri sqlite:///$PWD/runs/mlflow.db`",
        description="Runs `mlflow ARGS` with the offline environment set (LiteLLM's price map, the model hub, "
        "telemetry). `ragscale mlflow server --backend-store-uri sqlite:///DIR/mlflow.db --artifacts-destination "
        "DIR/artifacts --port 5000` starts a tracking server for --tracking-uri http://127.0.0.1:5000. SIGTERM or "
        "Ctrl-C stops every process MLflow started.",
    )
    command.add_argument("mlflow_args", nargs=argparse.REMAINDER, metavar="ARGS", help="mlflow's arguments")
    command.set_defaults(func=cmd_mlflow)


def cmd_mlflow(args: argparse.Namespace) -> int:
    """Run ``python -m mlflow ARGS`` in a process group of its own (the CLI set the environment:
    ``process.prepare_process``) until it ends; SIGTERM or SIGINT is passed to the whole group, which then has
    ``STOP_GRACE_S`` seconds before what is left of it is killed. Returns MLflow's exit code, or 128 + the signal
    that stopped it."""
    sys.stdout.flush()
    sys.stderr.flush()
    child = subprocess.Popen([sys.executable, "-m", "mlflow", *args.mlflow_args], process_group=0)
    received: list[int] = []

    previous = {signum: signal.signal(signum, lambda signum, frame: received.append(signum)) for signum in FORWARDED}
    try:
        while child.poll() is None and not received:
            time.sleep(0.1)
    finally:  # a second Ctrl-C while the group ends is recorded, not raised
        end_group(child, received[0] if received else signal.SIGTERM)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        return 128 + received[0]
    return 128 - child.returncode if child.returncode < 0 else child.returncode


def end_group(child: subprocess.Popen, signum: int) -> None:
    """End ``child``'s process group: ``signum`` to all of it (after MLflow ended by itself, to what it left
    running), ``STOP_GRACE_S`` seconds for it to go, then SIGKILL to what is left; ``child`` itself is reaped."""
    _signal_group(child.pid, signum)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and (child.poll() is None or _group_alive(child.pid)):
        time.sleep(0.1)
    _signal_group(child.pid, signal.SIGKILL)
    child.wait()


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:  # the group has ended
        pass


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True
