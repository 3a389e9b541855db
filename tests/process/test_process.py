"""A process set up by ``ragscale.process``: offline unless the user said otherwise, its C heap in few arenas and
trimmed on demand, a torch thread's OpenMP helpers given back, and logging configured by the entry point.

What changes the process (the heap's settings, OpenMP's pools, logging's root handler) is checked in a fresh
interpreter, so neither the other tests' threads nor their settings count.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ragscale import process
from ragscale.process import OFFLINE_ENV, go_offline, release_openmp_threads

ON_GLIBC = process._glibc() is not None
ON_LINUX = sys.platform.startswith("linux")


def run_python(code: str, **env: str) -> str:
    """Run ``code`` in a fresh interpreter with ``env`` added to this environment; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_go_offline_sets_every_offline_variable_that_is_not_set(monkeypatch):
    for key in OFFLINE_ENV:
        monkeypatch.delenv(key, raising=False)
    go_offline()
    assert {key: os.environ[key] for key in OFFLINE_ENV} == OFFLINE_ENV


def test_go_offline_keeps_a_value_the_user_set(monkeypatch):
    for key in OFFLINE_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    go_offline()
    assert os.environ["HF_HUB_OFFLINE"] == "0"
    assert os.environ["HF_DATASETS_OFFLINE"] == OFFLINE_ENV["HF_DATASETS_OFFLINE"]


def test_prepare_process_sets_the_environment_and_logging_an_entry_point_needs():
    report = run_python(
        """
        import json, logging, os
        from ragscale.process import OFFLINE_ENV, QUIET_LOGGERS, prepare_process

        for key in OFFLINE_ENV:
            os.environ.pop(key, None)
        prepare_process()
        print(json.dumps({
            "env": {key: os.environ.get(key) for key in OFFLINE_ENV},
            "root": logging.getLogger().level,
            "handlers": len(logging.getLogger().handlers),
            "quiet": [logging.getLogger(name).level for name in QUIET_LOGGERS],
        }))
        """
    )
    report = json.loads(report)
    assert report["env"] == OFFLINE_ENV
    assert report["root"] == 20  # logging.INFO
    assert report["handlers"] == 1
    assert set(report["quiet"]) == {30}  # logging.WARNING


ARENAS = """
import sys, threading
from ragscale.process import _glibc, limit_heap

limit_heap()
start = threading.Barrier(8)
held = []

def allocate():
    start.wait()  # all eight threads allocate at once: glibc would give each an arena
    held.append(bytearray(1 << 20))
    start.wait()

threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
_glibc().malloc_stats()  # one "Arena N:" block per arena, on stderr
sys.stderr.flush()
"""


def count_arenas(**env: str) -> int:
    """The malloc arenas of a fresh interpreter that ran ``ARENAS``, with no ``MALLOC_*`` variable but ``env``."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}, **env}
    done = subprocess.run([sys.executable, "-c", ARENAS], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return sum(line.startswith("Arena ") for line in done.stderr.splitlines())


@pytest.mark.skipif(not ON_GLIBC, reason="the heap's settings are glibc's")
def test_limit_heap_keeps_eight_allocating_threads_in_two_arenas():
    assert count_arenas() == process.ARENAS


@pytest.mark.skipif(not ON_GLIBC, reason="the heap's settings are glibc's")
def test_limit_heap_leaves_an_arena_cap_the_user_set():
    assert count_arenas(MALLOC_ARENA_MAX="4") == 4


@pytest.mark.skipif(not ON_GLIBC or not ON_LINUX, reason="glibc's heap, resident memory read from /proc")
def test_trim_heap_gives_freed_pages_back_to_the_system():
    report = run_python(
        """
        import json
        from ragscale.process import limit_heap, trim_heap

        def resident_mib():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 >> 20

        limit_heap()  # 1 MiB blocks come from the heap, not mmap
        blocks = [bytearray(1 << 20) for _ in range(200)]
        held = resident_mib()
        del blocks
        freed = resident_mib()
        trim_heap()
        print(json.dumps({"held": held, "freed": freed, "trimmed": resident_mib()}))
        """
    )
    report = json.loads(report)
    if report["freed"] < report["held"] - 100:
        pytest.skip(f"this C library gave the pages back when they were freed: {report}")
    assert report["trimmed"] < report["held"] - 150, report


@pytest.mark.skipif(not ON_LINUX, reason="threads counted in /proc; torch's libgomp is Linux's")
def test_release_openmp_threads_ends_the_calling_threads_openmp_helpers():
    report = run_python(
        """
        import json, os
        import torch
        from ragscale.process import release_openmp_threads

        def threads():
            return len(os.listdir("/proc/self/task"))

        torch.set_num_threads(4)
        before = threads()
        torch.randn(512, 512) @ torch.randn(512, 512)  # a parallel region: libgomp starts 3 helpers
        running = threads()
        released = release_openmp_threads()
        print(json.dumps({"before": before, "running": running, "released": released, "after": threads()}))
        """
    )
    report = json.loads(report)
    assert report["released"] is True
    assert report["running"] > report["before"], "the op started no helper threads: nothing to check"
    assert report["after"] == report["before"], report


def test_release_openmp_threads_does_nothing_without_a_libgomp_that_has_the_call(monkeypatch):
    monkeypatch.setattr(process, "_pause", lambda: None)
    assert release_openmp_threads() is False
