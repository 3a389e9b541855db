"""Real servers for the opt-in ``-m server`` tests: a free port, and a command run until the test is done."""

import contextlib
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(port: int, ready: str) -> bool:
    """Something listens on ``port`` and, given a ``ready`` URL, answers it with 200."""
    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", port)) != 0:
            return False
    if not ready:
        return True
    try:
        with urllib.request.urlopen(ready, timeout=5) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def served(
    command: list[str], port: int, log_path: Path, timeout_s: float = 60, env: dict | None = None, ready: str = ""
):
    """Run ``command`` (a server listening on ``port``, in environment ``env``, else this one's) until the block
    ends; fail with its log if it does not listen within ``timeout_s`` or, given a ``ready`` URL, answer a GET of
    it with 200 (a server that loads a model listens before it can serve)."""
    with log_path.open("w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if answers(port, ready):
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


@contextlib.contextmanager
def serving_in_thread(handler: type):
    """A real HTTP server on localhost whose requests ``handler`` (an ``http.server`` handler class) answers, in a
    thread of this process; yields its base URL."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
