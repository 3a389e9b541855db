"""Real servers for the tests: a free port, a command run until the test is done (the opt-in ``-m server`` tests),
and a minimal OpenAI-compatible chat server run in a thread, well or failing as a broken server does."""

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
        release = getattr(handler, "release", None)  # a hung request of ``faulty_chat("hang")`` ends
        if release is not None:
            release.set()
        server.shutdown()
        server.server_close()


def send_json(handler: BaseHTTPRequestHandler, body) -> None:
    """Answer ``handler``'s request 200 with ``body`` as JSON (bytes are sent as they are: a body that only claims to
    be JSON)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class ChatCompletions(BaseHTTPRequestHandler):
    """A minimal /v1/chat/completions: answers with the capital named in the prompt, in DSPy's chat format when the
    prompt asks for it; a GET lists its models, as a live server does."""

    received: list[dict] = []  # noqa: RUF012 -- the requests this server saw, for the test to inspect

    def do_GET(self):  # /v1/models, as a live server lists them (what the check before a run asks)
        send_json(self, {"object": "list", "data": [{"id": "x", "object": "model"}]})

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
        send_json(self, reply)

    def log_message(self, *args):
        pass


FAULTS = ("500", "alternate", "hang", "garbage", "dies")


def faulty_chat(fault: str, *, after: int = 0) -> type:
    """A ``ChatCompletions`` server class (its own, so each test counts its own calls) that lists its models, as a
    live server does, and then fails its completions the way a broken OpenAI-compatible server fails: ``"500"``
    answers every one HTTP 500; ``"alternate"`` every other one (the first fails); ``"hang"`` answers ``after``
    completions and then accepts each request and never answers until the server is shut down; ``"garbage"`` answers
    200 with a body that is not JSON; ``"dies"`` answers ``after`` completions and then closes every connection
    without a reply, as a crashed server's port does.
    ``serving_in_thread`` releases a hung request when its block ends."""
    if fault not in FAULTS:
        raise ValueError(f"fault {fault!r}: one of {', '.join(FAULTS)}")
    import threading

    class Faulty(ChatCompletions):
        received: list[dict] = []  # noqa: RUF012
        calls = 0
        release = threading.Event()

        def do_POST(self):
            cls = type(self)
            cls.calls += 1
            if fault == "hang" and cls.calls > after:
                cls.release.wait(timeout=600)
                return
            if fault == "dies" and cls.calls > after:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault == "500" or (fault == "alternate" and cls.calls % 2 == 1):
                self.send_error(500, "internal error")
                return
            if fault == "garbage":
                send_json(self, b"<html>not json")
                return
            super().do_POST()

    Faulty.__name__ = f"Faulty{fault.capitalize()}"
    return Faulty
