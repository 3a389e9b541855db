"""How a sweep stops: at its time limit (``stop_after``), on Ctrl-C or SIGTERM, or on an error. The runs in flight
end at their next LM or module call, each KILLED with its finished questions kept, as a run stopped alone is."""

from __future__ import annotations

import threading
import time

import dspy
from dspy.utils.callback import BaseCallback

from ragscale.experiments.signals import Stopped, interrupted


class TimeLimitError(Exception):
    """The sweep's time limit (``stop_after``) passed: the configurations running end, those not started do not
    start, and the sweep reports what finished."""


class Stopper(BaseCallback):
    """A DSPy callback that ends the sweep's runs in flight once the sweep is stopped: their next module or LM call
    raises what stopped it (a copy of the Ctrl-C or SIGTERM, else ``Stopped`` saying why: the time limit, or an error
    that stopped the sweep), so each run ends KILLED with what it finished kept, as a run stopped alone does. It rides
    in ``dspy.context`` (``stoppable``), so it reaches the threads that answer a run's questions. What it raises is a
    ``BaseException``: DSPy logs and drops an ``Exception`` raised by a callback."""

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

    def stoppable(self):
        """A ``dspy.context`` in which the runs started end at their next call once the sweep is stopped."""
        return dspy.context(callbacks=[*dspy.settings.get("callbacks", []), self])

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
