"""SIGTERM handled like Ctrl-C: it raises ``Terminated`` inside the block, which no ``except Exception`` swallows."""

import os
import signal
import time

import pytest

from ragscale.experiments.signals import (
    INTERRUPTED_EXIT,
    TERMINATED_EXIT,
    Stopped,
    Terminated,
    interrupted,
    terminate_on_sigterm,
)


def test_sigterm_raises_terminated_inside_the_block_and_the_previous_handler_comes_back():
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated, match="SIGTERM"), terminate_on_sigterm():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at once; reaching the end of the sleep fails the test
    assert signal.getsignal(signal.SIGTERM) is previous


def test_a_stop_from_outside_is_told_from_a_failure_and_escapes_except_exception():
    assert interrupted(KeyboardInterrupt()) and interrupted(Terminated("received SIGTERM"))
    assert interrupted(Stopped("the sweep's time limit passed"))
    assert not interrupted(RuntimeError("the run failed"))
    assert not issubclass(Terminated, Exception) and not issubclass(Stopped, Exception)


def test_the_exit_codes_are_those_of_a_process_stopped_by_the_signal():
    assert (TERMINATED_EXIT, INTERRUPTED_EXIT) == (143, 130)


def test_a_process_ends_within_its_grace_with_its_status_while_a_thread_still_waits():
    """What ``ragscale`` does once a command returned, or after SIGTERM: a thread waiting on a hung server would
    otherwise hold the interpreter's exit until its request gave up."""
    import subprocess
    import sys

    code = (
        "import threading, time\n"
        "from ragscale.experiments.signals import end_process_within\n"
        "threading.Thread(target=time.sleep, args=(120,)).start()\n"
        "print('done', flush=False)\n"
        "end_process_within(0.5, 3)\n"
    )
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - began < 30
    assert done.returncode == 3
    assert done.stdout == "done\n"  # written before the end, and flushed by it
