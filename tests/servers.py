"""Real servers for the opt-in ``-m server`` tests: a free port, and a command run until the test is done."""

import contextlib
import socket
import subprocess
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def served(command: list[str], port: int, log_path: Path, timeout_s: float = 60):
    """Run ``command`` (a server listening on ``port``) until the block ends; fail with its log if it does not
    listen within ``timeout_s``."""
    with log_path.open("w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"{command[0]} did not start: {log_path.read_text()}")
                time.sleep(0.2)
            yield
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
