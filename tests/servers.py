"""Real servers for the tests: a free port, a command run until the test is done (the opt-in ``-m server`` tests),
and a minimal OpenAI-compatible chat server run in a thread."""

import contextlib
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
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


class ChatCompletions(BaseHTTPRequestHandler):
    """A minimal /v1/chat/completions: answers with the capital named in the prompt, in DSPy's chat format when the
    prompt asks for it."""

    received: list[dict] = []  # noqa: RUF012 -- the requests this server saw, for the test to inspect

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).received.append({"path": self.path, **body})
        prompt = " ".join(str(m.get("content")) for m in body["messages"])
        answer = "Paris" if "France" in prompt else "unknown"
        chat_format = "[[ ## completed ## ]]" in prompt  # DSPy's ChatAdapter; ragscale's adapter asks for the value
        content = f"[[ ## answer ## ]]\n{answer}\n\n[[ ## completed ## ]]" if chat_format else answer
        n_prompt = len(prompt.split())
        reply = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": 7, "total_tokens": n_prompt + 7},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass
