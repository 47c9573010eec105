"""Who may use the console: the address rule, the token, and the checks that keep other web pages out.

The console can approve tool calls and read every transcript, so:

- It binds to 127.0.0.1 unless told otherwise. On any other address it refuses to start without a token
  (``AGENT_RUNNER_CONSOLE_TOKEN`` or ``--token``), and with a token every request must carry it: as
  ``Authorization: Bearer <token>`` (scripts), or as the console's cookie, which the browser gets by opening the
  console once with ``?token=<token>`` (the answer redirects to the same page without it, so the token does not stay
  in the address bar or the history).
- A web page from elsewhere, open in the operator's browser, must not act through it (cross-site request forgery):
  the cookie is ``SameSite=Strict`` (the browser sends it only from the console's own pages); a request that says
  where it comes from (``Origin``, or ``Sec-Fetch-Site`` when a browser omits ``Origin``) must come from the console
  itself; and every ``POST`` must be ``application/json``, a content type no plain form or ``no-cors`` request can
  send, so a browser asks first (a CORS preflight) and the console, which answers none, is never reached.
- On a loopback address without a token, the ``Host`` must be a loopback name: a page whose own name an attacker
  points at 127.0.0.1 (DNS rebinding) would otherwise be "same-origin" with the console and could read it.
- Every answer forbids framing (so the approve button cannot be overlaid by another page) and inline scripts.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from agent_runner.contract.errors import ConfigurationError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8234
"""Beside the Temporal dev server's UI (8233)."""

TOKEN_ENV = "AGENT_RUNNER_CONSOLE_TOKEN"
"""The secret every request must carry, when set (required on a non-loopback address)."""

TOKEN_MIN_LENGTH = 16
COOKIE = "agent_runner_console"
TOKEN_PARAM = "token"

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name to bind to) reaches this machine only."""
    host = host.strip("[]")
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name, or "" (every interface): anyone on its network may reach it


def check_binding(host: str, token: str | None) -> None:
    """Refuse an address the console must not serve on as configured.

    Raises:
        ConfigurationError: A non-loopback address without a token, or a token too short to be a secret.
    """
    make = 'python -c "import secrets; print(secrets.token_urlsafe())"'
    if token is not None and len(token) < TOKEN_MIN_LENGTH:
        raise ConfigurationError(
            f"The console token must be {TOKEN_MIN_LENGTH} characters or more; make one with: {make}"
        )
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"The console serves on {host or 'every interface'}, beyond this machine, only with a token: anyone who "
            f"reaches it could read every transcript and approve tool calls. Set {TOKEN_ENV} or pass --token (make "
            f"one with: {make}), or bind to {DEFAULT_HOST}."
        )


def _refuse(request: web.Request, status: int, message: str) -> web.Response:
    if request.path.startswith("/api/"):
        return web.json_response({"error": message}, status=status)
    return web.Response(status=status, text=message + "\n")


def _host_name(request: web.Request) -> str:
    host = request.host
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _foreign_origin(request: web.Request) -> str | None:
    """Where a browser request came from when that is not the console's own pages; else ``None`` (or if unsaid)."""
    origin = request.headers.get("Origin")
    if origin is not None:
        own = f"{request.scheme}://{request.host}"
        return None if origin == own else origin
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return f"a {site} page"
    return None


def guard(token: str | None, *, loopback: bool) -> Middleware:
    """The middleware that applies the rules of this module to every request.

    Args:
        token: The secret every request must show, or ``None`` (only on a loopback address).
        loopback: The console is bound to a loopback address.
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await _check(request, handler)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is None and loopback and not is_loopback(_host_name(request)):
            return _refuse(
                request, 403, f"Host {request.host!r} is not this machine: open the console at http://{DEFAULT_HOST}"
            )
        foreign = _foreign_origin(request)
        if foreign is not None:
            return _refuse(request, 403, f"Requests from {foreign} are refused: use the console's own page.")
        if request.method not in ("GET", "HEAD") and request.content_type != "application/json":
            # Checked before the token too: a form another page posts is refused whatever cookie it carried.
            return _refuse(request, 415, "Send the request body as JSON (Content-Type: application/json).")
        if token is None:
            return await handler(request)
        given = request.query.get(TOKEN_PARAM)
        if given is not None and request.method == "GET":
            if not hmac.compare_digest(given.encode(), token.encode()):
                return _refuse(request, 403, "Wrong token.")
            # Hand the browser the cookie, and take the token out of the address bar and the history.
            location = request.rel_url.with_query(
                [(k, v) for k, v in request.rel_url.query.items() if k != TOKEN_PARAM]
            )
            response = web.Response(status=303, headers={"Location": str(location)})
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
            return response
        authorization = request.headers.get("Authorization", "")
        given = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None
        if given is None:
            given = request.cookies.get(COOKIE)
        if given is None:
            return _refuse(
                request,
                401,
                f"This console needs its token: open it once as {request.scheme}://{request.host}/?token=<token>, "
                "or send Authorization: Bearer <token>.",
            )
        if not hmac.compare_digest(given.encode(), token.encode()):
            return _refuse(request, 403, "Wrong token.")
        return await handler(request)

    return middleware
