"""How a sweep stops: at its time limit (``stop_after``), on Ctrl-C or SIGTERM, or on an error. The runs in flight
end at their next LM or module call, or, while they wait for their questions (a request to a hung server among them),
within the evaluation's ``STOP_POLL_S``; each ends KILLED with its finished questions kept, as a run stopped alone
is. A request in flight is left to give up on its own (``--request-timeout``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import dspy
from dspy.utils.callback import BaseCallback

from ragscale.experiments.signals import Stopped, interrupted, stop_when


class TimeLimitError(Exception):
    """The sweep's time limit (``stop_after``) passed: the configurations running end, those not started do not
    start, and the sweep reports what finished."""


class Stopper(BaseCallback):
    """A DSPy callback that ends the sweep's runs in flight once the sweep is stopped: their next module or LM call
    raises what stopped it (a copy of the Ctrl-C or SIGTERM, else ``Stopped`` saying why: the time limit, or an error
    that stopped the sweep), and so does the wait of its evaluation for its questions (``signals.check_stop``), so
    each run ends KILLED with what it finished kept, as a run stopped alone does. It rides in ``dspy.context``
    (``stoppable``), so it reaches the threads that answer a run's questions. What it raises is a ``BaseException``:
    DSPy logs and drops an ``Exception`` raised by a callback."""

    def __init__(self):
        super().__init__()
        self.reason: BaseException | None = None
        self._timer: threading.Timer | None = None

    def stop_at(self, began: float, stop_after: float | None) -> None:
        """Stop the sweep (``TimeLimitError``) ``stop_after`` seconds after ``began`` (``time.monotonic``); never
        when it is None."""
        if stop_after is None:
            return
        reason = TimeLimitError(f"the time limit of {stop_after:.0f} s passed")
        left = max(0.0, began + stop_after - time.monotonic())
        self._timer = threading.Timer(left, setattr, (self, "reason", reason))
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        """No time limit any more: the sweep is over."""
        if self._timer is not None:
            self._timer.cancel()

    def time_up(self) -> bool:
        """Whether the sweep's time limit has passed."""
        return isinstance(self.reason, TimeLimitError)

    @contextmanager
    def stoppable(self) -> Iterator[None]:
        """A block in which the runs started end once the sweep is stopped: at their next call (a ``dspy.context``
        with this callback) or while they wait for their questions (``signals.stop_when``)."""
        with dspy.context(callbacks=[*dspy.settings.get("callbacks", []), self]), stop_when(self._check):
            yield

    def _check(self) -> None:
        reason = self.reason
        if reason is not None:
            if interrupted(reason):
                raise type(reason)(*reason.args)
            if isinstance(reason, TimeLimitError):
                raise Stopped(str(reason))
            raise Stopped(f"the sweep stopped: {type(reason).__name__}: {reason}")

    def on_module_start(self, call_id, instance, inputs) -> None:
        self._check()

    def on_lm_start(self, call_id, instance, inputs) -> None:
        self._check()
