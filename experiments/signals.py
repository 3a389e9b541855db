"""SIGTERM handled like Ctrl-C: a scheduler's stop ends a run as KILLED with what finished kept.

``terminate_on_sigterm()`` makes SIGTERM raise ``Terminated`` in the main thread, a ``BaseException`` (as
``KeyboardInterrupt`` is) so that no ``except Exception`` on the way swallows it; the runner marks the run KILLED and
logs its partial predictions and program, and the command line exits 143 (128 + SIGTERM), as a process stopped by
the signal would.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

TERMINATED_EXIT = 128 + signal.SIGTERM
INTERRUPTED_EXIT = 128 + signal.SIGINT


class Terminated(BaseException):
    """The process received SIGTERM."""


class Stopped(BaseException):
    """The caller stopped the run: a sweep's time limit passed. A ``BaseException`` for the reason ``Terminated`` is
    one: DSPy's callbacks and a question's answer catch every ``Exception`` and would let the run go on."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated(f"received {signal.Signals(signum).name}")


@contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """Within the block SIGTERM raises ``Terminated`` in the main thread; the previous handler comes back after
    (enter it from the main thread)."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` stopped a run from outside (Ctrl-C, SIGTERM or its caller) rather than a failure of the run."""
    return isinstance(exc, KeyboardInterrupt | Terminated | Stopped)
