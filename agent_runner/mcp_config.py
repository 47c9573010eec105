"""The MCP servers a worker connects to, from its configuration file (``--mcp-config``, ``AGENT_RUNNER_MCP_CONFIG``).

JSON or TOML (by the file's suffix), in the shape most MCP clients use, plus each server's call policy::

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]},
        "linear": {"url": "https://mcp.linear.app/mcp", "headers": {"Authorization": "Bearer ${LINEAR_TOKEN}"},
                   "maximum_attempts": 3, "tools": {"create_issue": {"effects": "at_most_once"}}}}}

A server has a ``command`` (with ``args``, ``env``, ``cwd``: stdio) or a ``url`` (with ``headers``: streamable
HTTP). ``${NAME}`` in ``env``, ``headers``, ``url``, ``args`` and ``cwd`` is read from the worker's environment when the
file is loaded, so credentials stay in the workers' configuration: a run's history holds the tools' definitions and
calls, never how the worker reached the server. The policy fields (``tool_options``' own: ``start_to_close_timeout``,
``heartbeat_timeout``, ``maximum_attempts``, ``initial_interval``, ``maximum_interval``, ``task_queue``,
``requires_approval``, ``effects``, ``on_unknown``) apply to every tool of the server, and ``tools`` overrides them
per tool. Durations are seconds or ISO 8601 (``"PT2M"``).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_runner.activities.tools import DEFAULT_TOOL_OPTIONS
from agent_runner.contract.errors import ConfigurationError
from agent_runner.contract.types import MCP_CONFIG_ENV, ActivityOptions, OnUnknown, ToolEffects

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_OPTION_FIELDS = (
    "start_to_close_timeout",
    "heartbeat_timeout",
    "maximum_attempts",
    "initial_interval",
    "maximum_interval",
    "task_queue",
)


class McpPolicy(BaseModel):
    """How the calls of a server's tools are run: ``tool_options``' fields, each left to the default when unset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start_to_close_timeout: timedelta | None = None
    heartbeat_timeout: timedelta | None = None
    maximum_attempts: int | None = Field(default=None, ge=0)
    initial_interval: timedelta | None = None
    maximum_interval: timedelta | None = None
    task_queue: str | None = None
    requires_approval: bool | None = None
    effects: ToolEffects | None = None
    on_unknown: Literal["ask", "tell"] | None = None
    """``reconcile`` needs a function, which an MCP tool has not: ``ask`` a person, or ``tell`` Claude."""

    def over(self, base: McpPolicy) -> McpPolicy:
        """This policy, its unset fields taken from ``base``."""
        return base.model_copy(update=self.model_dump(exclude_none=True))


class McpServer(McpPolicy):
    """One MCP server: how to reach it, and the policy of its tools' calls."""

    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    tools: dict[str, McpPolicy] = {}
    """Per-tool policies, over the server's."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (a stdio server) or `url` (a streamable HTTP server), not both")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("`args`, `env` and `cwd` are for a stdio server (`command`); this one has a `url`")
        if self.command is not None and self.headers:
            raise ValueError("`headers` are for a streamable HTTP server (`url`); this one has a `command`")
        return self

    def policy(self, tool: str) -> tuple[ActivityOptions, bool, ToolEffects, OnUnknown]:
        """The activity options, approval, effects and ``on_unknown`` of a call of ``tool``.

        Raises:
            ConfigurationError: the options are out of range (a maximum interval below the initial one, ...).
        """
        policy = self.tools.get(tool, McpPolicy()).over(self)
        given = {f: getattr(policy, f) for f in _OPTION_FIELDS if getattr(policy, f) is not None}
        try:
            options = ActivityOptions.model_validate({**DEFAULT_TOOL_OPTIONS.model_dump(), **given})
        except pydantic.ValidationError as e:
            raise ConfigurationError(f"MCP tool {tool!r}: {e.errors()[0]['msg']}.") from None
        return options, bool(policy.requires_approval), policy.effects or "idempotent", policy.on_unknown or "tell"


class McpConfig(BaseModel):
    """The MCP servers of one worker, by name (the name runs give in ``"mcp": [...]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: dict[str, McpServer] = {}


def load_mcp_config(path: str | Path, environ: Mapping[str, str] | None = None) -> McpConfig:
    """Read a worker's MCP configuration file (JSON, or TOML when it ends in ``.toml``).

    The servers sit under ``mcpServers`` (or ``mcp_servers``). ``${NAME}`` is replaced with the environment's
    ``NAME``.

    Raises:
        ConfigurationError: the file cannot be read or parsed, a variable it names is not set, or a server is
            described wrongly; the message names the file, the server and what to fix.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigurationError(
            f"Cannot read the MCP configuration {str(path)!r}: {e.strerror or e}. Pass an existing file to "
            f"--mcp-config (or {MCP_CONFIG_ENV})."
        ) from None
    try:
        raw: Any = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        kind = "TOML" if path.suffix == ".toml" else "JSON (name it *.toml for TOML)"
        raise ConfigurationError(f"The MCP configuration {str(path)!r} is not valid {kind}: {e}.") from None
    return parse_mcp_config(raw, environ, where=str(path))


def parse_mcp_config(
    raw: Any, environ: Mapping[str, str] | None = None, *, where: str = "MCP configuration"
) -> McpConfig:
    """A worker's MCP configuration from decoded JSON or TOML (see ``load_mcp_config``).

    Raises:
        ConfigurationError: naming every problem found.
    """
    environ = os.environ if environ is None else environ
    servers = raw.get("mcpServers", raw.get("mcp_servers")) if isinstance(raw, dict) else None
    extra = sorted(set(raw) - {"mcpServers", "mcp_servers"}) if isinstance(raw, dict) else []
    if not isinstance(servers, dict) or extra:
        raise ConfigurationError(
            f"{where}: expected an object with one key, `mcpServers` (or `mcp_servers`), mapping each server's name to "
            '{"command": ..., "args": [...]} or {"url": ...}' + (f"; unknown keys {extra}" if extra else "") + "."
        )
    problems: list[str] = []
    parsed: dict[str, McpServer] = {}
    for name, server in servers.items():
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            problems.append(f"server {name!r}: name it with letters, digits, `_` and `-` only (runs name it)")
            continue
        missing: list[str] = []
        expanded = _expand(server, environ, missing)
        if missing:
            problems.append(
                f"server {name!r} reads {', '.join(sorted(set(missing)))} from the environment, which is not set: set "
                "it in the worker's environment"
            )
            continue
        try:
            parsed[name] = McpServer.model_validate(expanded)
        except pydantic.ValidationError as e:
            for error in e.errors(include_url=False):
                at = ".".join(str(p) for p in error["loc"])
                problems.append(f"server {name!r}{f' `{at}`' if at else ''}: {error['msg']}")
    if problems:
        raise ConfigurationError(f"{where} was rejected:\n- " + "\n- ".join(problems))
    return McpConfig(servers=parsed)


def _expand(value: Any, environ: Mapping[str, str], missing: list[str]) -> Any:
    """``value`` with each ``${NAME}`` in its strings replaced by the environment's value; unset names noted."""
    if isinstance(value, str):

        def variable(match: re.Match[str]) -> str:
            if match.group(1) not in environ:
                missing.append(match.group(1))
                return ""
            return environ[match.group(1)]

        return _VARIABLE.sub(variable, value)
    if isinstance(value, list):
        return [_expand(v, environ, missing) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, environ, missing) for k, v in value.items()}
    return value
