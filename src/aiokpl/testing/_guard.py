"""What a local server refuses: requests from web pages, and requests made under another name.

A server on 127.0.0.1 without authentication is within reach of every web page its developer
opens. A page may send it requests (``fetch``, a form), and read the answers when the server
says it may (moto's application answers ``Access-Control-Allow-Origin`` for any origin); with
DNS rebinding (a name of the page's that first resolves to the page's server, then to
127.0.0.1) the page reads the answers anyway, as the same origin. The dev servers of the web
(webpack-dev-server's host and origin checks, CVE-2018-14732; Vite's, CVE-2025-24010) closed
both the same way, and :class:`LocalOnly` does what they do, in front of the application:

* a request with an ``Origin`` header is refused: a browser sends one with every request a
  page makes across origins and with every ``POST`` (Kinesis' API is ``POST``\\s only); the AWS
  SDKs and CLI send none;
* a request whose ``Host`` is not this server's port under a name it answers to is refused: a
  rebinding request carries the page's name. The names are ``localhost`` and IP addresses
  (an address cannot be rebound: there is no name to resolve again), and those given as
  ``allowed_hosts`` (``aiokpl local --allow-host``, for a container that reaches the machine
  as ``host.docker.internal``);
* nothing is ever allowed across origins: ``Access-Control-*`` headers are removed from every
  answer.

A refusal is ``403`` with the service's JSON error shape (``AccessDeniedException``), whose
message says which rule refused it, so an SDK or ``curl`` shows why.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._moto_extras import error

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = ("LocalOnly", "refusal")

_CORS_PREFIX = "access-control-"


def _name_and_port(host: str) -> tuple[str, int | None]:
    """``(name, port)`` of a ``Host`` header: ``[::1]:4567``, ``localhost:4567``, ``h``
    (port ``80``); the port is ``None`` when it is not a number."""
    if host.startswith("["):
        name, bracket, rest = host[1:].partition("]")
        if not bracket:
            return host, None
        port_text = rest[1:] if rest.startswith(":") else ("80" if not rest else "")
    else:
        name, colon, port_text = host.rpartition(":")
        if not colon:
            name, port_text = host, "80"
    return name.lower(), int(port_text) if port_text.isdigit() else None


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def refusal(
    origin: str | None, host: str | None, port: int, allowed_hosts: Iterable[str] = ()
) -> str | None:
    """Why a request with these ``Origin`` and ``Host`` headers is refused by a server on
    ``port``, or ``None`` when it is served."""
    if origin is not None:
        return (
            f"a request from a web page (Origin: {origin!r}) is refused: this local server "
            "serves programs on this machine, not web pages"
        )
    if host is None:
        return "a request without a Host header is refused"
    name, host_port = _name_and_port(host)
    known = name == "localhost" or _is_address(name) or name in allowed_hosts
    if not known or host_port != port:
        return (
            f"a request for host {host!r} is refused: this server answers to localhost:{port} "
            f"and IP addresses with port {port} (a name pointed at it is a DNS rebinding; "
            "`aiokpl local --allow-host NAME` allows a name of yours)"
        )
    return None


class LocalOnly:
    """``app``, served only to requests that are neither from a web page nor for another
    name than ``localhost``, an IP address or ``allowed_hosts``, with ``port``; without CORS.

    Args:
        app: the WSGI application served.
        port: the port the server listens on.
        allowed_hosts: more names (lower case) the server answers to.
    """

    def __init__(self, app: WSGIApplication, port: int, allowed_hosts: Iterable[str] = ()) -> None:
        self._app = app
        self.port = port
        self.allowed_hosts = frozenset(name.lower() for name in allowed_hosts)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        reason = refusal(
            environ.get("HTTP_ORIGIN"), environ.get("HTTP_HOST"), self.port, self.allowed_hosts
        )
        if reason is not None:
            return error(start_response, 403, "AccessDeniedException", reason)

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            kept = [(k, v) for k, v in headers if not k.lower().startswith(_CORS_PREFIX)]
            return start_response(status, kept, exc_info)

        return self._app(environ, start)
