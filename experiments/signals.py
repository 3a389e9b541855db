"""SIGTERM handled like Ctrl-C: a scheduler's stop ends a run as KILLED with what finished kept, and the process soon.

``terminate_on_sigterm()`` makes SIGTERM raise ``Terminated`` in the main thread, a ``BaseException`` (as
``KeyboardInterrupt`` is) so that no ``except Exception`` on the way swallows it; the runner marks the run KILLED and
logs its partial predictions and program, and the command line exits 143 (128 + SIGTERM), as a process stopped by
the signal would. The ``ragscale`` command ends within ``TERMINATE_GRACE_S`` of the signal whatever its threads wait
on (``end_process_within``): a question's request to a server that never answers would otherwise hold its exit, since
the interpreter waits for every worker thread before it exits.

A stop that another thread decides (a sweep's time limit) reaches a wait through ``stop_when``: inside its block,
``check_stop()`` raises what the check raises, and the evaluation calls it while it waits for its questions, so a run
ends at once, not when a hung request gives up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

TERMINATED_EXIT = 128 + signal.SIGTERM
INTERRUPTED_EXIT = 128 + signal.SIGINT

TERMINATE_GRACE_S = 8.0
"""How long a process stopped by SIGTERM may take to end (its run marked KILLED and what finished logged) before it
is ended regardless: schedulers follow SIGTERM with SIGKILL after 10 s or more."""

EXIT_GRACE_S = 2.0
"""How long the interpreter's own exit may take once a command has returned before the process is ended regardless:
all that is left then is to join threads, and one may wait on a hung server."""

_STOP_CHECKS: ContextVar[tuple[Callable[[], None], ...]] = ContextVar("ragscale_stop_checks", default=())


class Terminated(BaseException):
    """The process received SIGTERM."""


class Stopped(BaseException):
    """The caller stopped the run: a sweep's time limit passed. A ``BaseException`` for the reason ``Terminated`` is
    one: DSPy's callbacks and a question's answer catch every ``Exception`` and would let the run go on."""


def end_process_within(seconds: float, code: int) -> None:
    """End the process with exit status ``code`` ``seconds`` from now unless it has ended by then, its output
    flushed first. A thread still waiting on a server (a request that a stopped run left behind) would otherwise hold
    the interpreter's exit until the request gives up."""

    def end() -> None:
        time.sleep(seconds)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a stream already closed has nothing left to write
                stream.flush()
        os._exit(code)

    threading.Thread(target=end, name="ragscale-exit", daemon=True).start()


@contextmanager
def terminate_on_sigterm(*, end_process: bool = False) -> Iterator[None]:
    """Within the block SIGTERM raises ``Terminated`` in the main thread; the previous handler comes back after (enter
    it from the main thread). With ``end_process`` (a command's entry point, never a library's) the process also
    ends ``TERMINATE_GRACE_S`` after the signal, whatever it still waits on."""

    def raise_terminated(signum, frame) -> None:
        if end_process:
            end_process_within(TERMINATE_GRACE_S, TERMINATED_EXIT)
        raise Terminated(f"received {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def stop_when(check: Callable[[], None]) -> Iterator[None]:
    """Within the block (this thread and contexts copied from it), ``check_stop()`` calls ``check``, which raises
    to stop the work in hand (``Stopped``, ``Terminated``) and returns otherwise."""
    token = _STOP_CHECKS.set((*_STOP_CHECKS.get(), check))
    try:
        yield
    finally:
        _STOP_CHECKS.reset(token)


def check_stop() -> None:
    """Raise what a ``stop_when`` check of this context raises; nothing outside one."""
    for check in _STOP_CHECKS.get():
        check()


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` stopped a run from outside (Ctrl-C, SIGTERM or its caller) rather than a failure of the run."""
    return isinstance(exc, KeyboardInterrupt | Terminated | Stopped)
