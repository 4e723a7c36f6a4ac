"""The local server serves this machine's programs only: no web page, no other name, no CORS.

``aiokpl.testing._guard`` in front of the WSGI application of ``aiokpl local`` (and of the
servers the tests and the demo start): pure checks of the ``Origin`` and ``Host`` headers, and
the application itself with a stand-in behind it. The real server is driven in
``tests/integration/test_cli_local.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest

from aiokpl.testing._guard import LocalOnly, refusal

PORT = 4567


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:4567",
        "localhost:4567",
        "LOCALHOST:4567",
        "[::1]:4567",
        "10.1.2.3:4567",  # --host 0.0.0.0, reached from another machine by its address
    ],
)
def test_local_names_and_addresses_with_the_port_are_served(host: str) -> None:
    assert refusal(None, host, PORT) is None


@pytest.mark.parametrize(
    "host",
    [
        "rebind.evil.example:4567",  # a DNS rebinding: the page's own name, now 127.0.0.1
        "localhost.:4567",
        "127.0.0.1:80",
        "127.0.0.1",  # port 80
        "localhost",
        "[::1]",
        "[::1:4567",
        "localhost:x",
        "",
    ],
)
def test_other_names_and_ports_are_refused(host: str) -> None:
    reason = refusal(None, host, PORT)
    assert reason is not None
    assert f"host {host!r} is refused" in reason


def test_a_request_without_host_is_refused() -> None:
    assert refusal(None, None, PORT) == "a request without a Host header is refused"


def test_any_origin_is_refused_even_a_local_one() -> None:
    for origin in ("https://evil.example", "http://127.0.0.1:4567", "null"):
        reason = refusal(origin, "127.0.0.1:4567", PORT)
        assert reason is not None
        assert f"a request from a web page (Origin: {origin!r}) is refused" in reason


def test_allowed_hosts_add_names() -> None:
    allowed = frozenset({"host.docker.internal"})
    assert refusal(None, "host.docker.internal:4567", PORT, allowed) is None
    assert refusal(None, "host.docker.internal:4567", PORT) is not None
    assert refusal(None, "host.docker.internal:80", PORT, allowed) is not None


class _Called:
    """What a WSGI application answered: status, headers, body."""

    def __init__(self) -> None:
        self.status = ""
        self.headers: list[tuple[str, str]] = []

    def start_response(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Any:
        self.status, self.headers = status, headers
        return lambda data: None


def _cors_app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    """moto's application: CORS headers on every answer, reflecting the origin."""
    start_response(
        "200 OK",
        [
            ("Content-Type", "application/x-amz-json-1.1"),
            ("Access-Control-Allow-Origin", environ.get("HTTP_ORIGIN", "*")),
            ("access-control-allow-credentials", "true"),
            ("Vary", "Origin"),
        ],
    )
    return [b"{}"]


def _call(app: LocalOnly, **headers: str) -> tuple[_Called, bytes]:
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/", **headers}
    called = _Called()
    body = b"".join(app(environ, called.start_response))
    return called, body


def test_the_application_refuses_with_403_and_a_json_error() -> None:
    app = LocalOnly(_cors_app, PORT)
    called, body = _call(app, HTTP_HOST="127.0.0.1:4567", HTTP_ORIGIN="https://evil.example")
    assert called.status == "403 Forbidden"
    assert ("x-amzn-ErrorType", "AccessDeniedException") in called.headers
    document = json.loads(body)
    assert document["__type"] == "AccessDeniedException"
    assert "Origin: 'https://evil.example'" in document["message"]
    called, body = _call(app, HTTP_HOST=f"rebind.evil.example:{PORT}")
    assert called.status == "403 Forbidden"
    assert "rebind.evil.example" in json.loads(body)["message"]


def test_the_application_serves_the_rest_without_cors_headers() -> None:
    app = LocalOnly(_cors_app, PORT, ["Host.Docker.Internal"])
    for host in ("127.0.0.1:4567", "host.docker.internal:4567"):
        called, body = _call(app, HTTP_HOST=host)
        assert (called.status, body) == ("200 OK", b"{}")
        assert called.headers == [
            ("Content-Type", "application/x-amz-json-1.1"),
            ("Vary", "Origin"),
        ]
