"""Request parameters checked against the Messages API's own types, as the installed ``anthropic`` SDK declares them.

A run's parameters go into every request: one the API would refuse (``max_tokens="4k"``) must be refused when it is
given, at start (``InvalidRunInput``) or by ``update_params`` (a rejected update), never at the next request where it
would fail the whole run. The SDK's ``MessageCreateParams`` TypedDict is the single source of truth, so a parameter
the SDK learns is checked after a version bump, with no code change here.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import math
from typing import Any

from anthropic.types.beta import BetaCompactionConfigParam
from anthropic.types.beta.message_create_params import MessageCreateParamsBase
from pydantic import ConfigDict, TypeAdapter, ValidationError

_PARAMS = TypeAdapter(MessageCreateParamsBase)
"""Built once per process: building it takes about 0.1 s."""

_COMPACTION = TypeAdapter(list[BetaCompactionConfigParam], config=ConfigDict(extra="forbid"))
"""The ``compaction`` parameter of a compaction request; a list of one, so that no unknown key is taken (the config
cannot be given to a ``TypedDict`` itself)."""

_RUNNER_OWNED: dict[str, Any] = {"messages": []}
"""Fields the runner fills itself; given placeholder values so that only the run's parameters are judged."""

_SAMPLING = {"temperature": (0.0, 1.0), "top_p": (0.0, 1.0), "top_k": (0, None)}
"""The sampling parameters the 2.14.0 beta types no longer declare (they go as ``extra_body``), with their ranges."""


MCP_TOKEN_ENV_PREFIX = "AGENT_RUNNER_MCP_TOKEN_"
"""A worker adds ``authorization_token`` to an MCP server of a request from ``AGENT_RUNNER_MCP_TOKEN_<NAME>``."""


def mcp_token_env(server_name: str) -> str:
    """The worker's environment variable holding the token of the MCP server ``server_name``."""
    return MCP_TOKEN_ENV_PREFIX + "".join(c if c.isalnum() else "_" for c in server_name.upper())


def credential_problems(params: dict[str, Any]) -> list[str]:
    """Credentials in request parameters: they would rest in workflow history, so each one is refused.

    An MCP server's ``authorization_token`` stays in the worker's environment instead (``mcp_token_env``).
    """
    problems = []
    servers = params.get("mcp_servers")
    for i, server in enumerate(servers if isinstance(servers, list) else []):
        if isinstance(server, dict) and "authorization_token" in server:
            name = str(server.get("name") or "")
            problems.append(
                f"`mcp_servers[{i}].authorization_token` would be stored in the run's history. Leave it out and set "
                f"{mcp_token_env(name or '<name>')} in the workers' environment: they add it to each request."
            )
    return problems


def param_problems(params: dict[str, Any]) -> list[str]:
    """What is wrong with ``params`` (Messages API parameters, without ``messages`` and ``tools``), one line each.

    Args:
        params: The parameters as the request will carry them; ``model`` and ``max_tokens`` included.

    Returns:
        One problem per parameter that does not have the type the API takes, naming it; empty when all are fine.
    """
    problems = [_sampling_problem(key, params[key]) for key in _SAMPLING if key in params]
    problems.extend(credential_problems(params))
    typed = {k: v for k, v in params.items() if k not in _SAMPLING}
    try:
        # Strict: the API takes JSON as typed, so "5" is no integer for `max_tokens`.
        _PARAMS.validate_python({**typed, **_RUNNER_OWNED}, strict=True)
    except ValidationError as e:
        by_param: dict[str, list[str]] = {}
        for error in e.errors(include_url=False):
            key = str(error["loc"][0]) if error["loc"] else "parameters"
            where = ".".join(str(part) for part in error["loc"][1:])
            by_param.setdefault(key, []).append(f"{where + ': ' if where else ''}{error['msg']}")
        for key, details in by_param.items():
            shown = "; ".join(details[:3]) + (f"; and {len(details) - 3} more" if len(details) > 3 else "")
            problems.append(
                f"`{key}` is not what the Messages API takes ({shown}). See the API reference for `{key}`."
                if key in params or key not in MessageCreateParamsBase.__annotations__
                else f"`{key}` is required ({shown})."
            )
    return [p for p in problems if p]


def compaction_problems(compaction: object) -> list[str]:
    """What the SDK's type for a compaction request's ``compaction`` parameter finds wrong with ``compaction``.

    The runner sends it only on the compaction request (``compact``), which a value the API refuses would fail, and
    with it the run.
    """
    try:
        _COMPACTION.validate_python([compaction], strict=True)
    except ValidationError as e:
        details = [f"{'.'.join(map(str, error['loc'][1:])) or 'value'}: {error['msg']}" for error in e.errors()]
        return [
            f"`compaction` is not what the Messages API takes ({'; '.join(details)}). Give "
            '{"type": "summarize"}, with `instructions` to replace the server\'s summarization prompt.'
        ]
    return []


def _sampling_problem(key: str, value: Any) -> str:
    low, high = _SAMPLING[key]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if key == "top_k":
        number = number and isinstance(value, int)
    if not number or math.isnan(value) or value < low or (high is not None and value > high):
        kind = "an integer" if key == "top_k" else "a number"
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        return f"`{key}` must be {kind} {bounds}; got {value!r}."
    return ""
