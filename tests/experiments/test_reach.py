"""A server named by URL is tried with one GET of the path its kind answers, before any model loads
(tests/experiments/cli/test_unreachable.py runs the commands against servers that answer 200, 401 and 404)."""

import contextlib
import http.server
import time

import pytest
from servers import free_port, serving_in_thread

from ragscale.experiments.config import ConfigError
from ragscale.experiments.reach import PROBES, check_reachable, is_http


@pytest.mark.parametrize(
    ("url", "http"),
    [("http://host:8000/v1", True), ("HTTPS://host", True), ("host:8000", False), ("", False), (None, False)],
)
def test_only_an_http_or_https_url_names_a_server_to_try(url, http):
    assert is_http(url) is http


@contextlib.contextmanager
def recording():
    """A real HTTP server on localhost that answers every GET with 200 and records the paths asked."""
    asked = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    with serving_in_thread(Handler) as url:
        yield url, asked


def test_each_kind_of_server_is_asked_the_paths_it_answers_under_its_base_url():
    with recording() as (url, asked):
        for kind in sorted(PROBES):
            check_reachable(f"{url}/base/", "--flag", kind)
    assert asked == [f"/base{path}" for kind in sorted(PROBES) for path in PROBES[kind]]


def test_a_url_where_nothing_listens_is_refused_at_once_naming_the_flag_the_url_and_the_probe():
    url = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    with pytest.raises(ConfigError, match=rf"--api-base {url}: no server answered \(tried GET {url}/models"):
        check_reachable(url, "--api-base", "openai")
    assert time.monotonic() - started < 2  # a refused connection, not a timeout
