"""Registering tools: whole modules, the environment variable, per-tool options, and clear refusals."""

from __future__ import annotations

from datetime import timedelta

import pytest
from anthropic import beta_tool

from agent_runner.activities.tools import DEFAULT_TOOL_OPTIONS, ToolRegistry, tool_options
from agent_runner.contract.errors import ToolRegistrationError
from agent_runner.worker import build_registry, tool_modules


def test_a_module_registers_every_tool_it_defines() -> None:
    registry = build_registry(["tests.tools_for_tests"])
    assert registry.names == [
        "get_weather",
        "get_time",
        "fail_disk",
        "refuse",
        "returns_dict",
        "image_tool",
        "slow_step",
        "pay",
        "pay_reconciled",
        "count_local",
        "parse_count",
        "quit_async",
        "interrupted",
    ]


def test_modules_come_from_flags_and_the_environment_once_each() -> None:
    env = {"AGENT_RUNNER_TOOLS": "pkg.b, pkg.a,,pkg.c"}
    assert tool_modules(["pkg.a", "pkg.x"], env) == ["pkg.a", "pkg.x", "pkg.b", "pkg.c"]


def test_tool_options_travel_with_the_tools_spec() -> None:
    registry = build_registry(["tests.tools_for_tests"])
    slow = registry.spec("slow_step")
    assert slow is not None
    assert slow.options.heartbeat_timeout == timedelta(seconds=2)
    assert slow.options.start_to_close_timeout == timedelta(seconds=60)
    weather = registry.spec("get_weather")
    assert weather is not None and weather.options == DEFAULT_TOOL_OPTIONS
    assert weather.definition["name"] == "get_weather"
    assert not weather.local and "local" not in weather.model_dump(mode="json")  # as specs were before `local`
    counted = registry.spec("count_local")
    assert counted is not None and counted.local and counted.model_dump(mode="json")["local"] is True


def test_two_tools_with_one_name_are_refused() -> None:
    @beta_tool(name="get_weather")
    def other(city: str) -> str:
        """Another weather tool."""
        return city

    registry = build_registry(["tests.tools_for_tests"])
    with pytest.raises(ToolRegistrationError, match="Two tools are named 'get_weather'"):
        registry.add(other, origin="tests.other")


def test_a_tool_named_as_the_api_refuses_is_refused_when_registered() -> None:
    """Registered, every run naming it failed at its first request with the API's 400."""

    @beta_tool(name="bad name with spaces")
    def bad(city: str) -> str:
        """Bad."""
        return city

    with pytest.raises(ToolRegistrationError) as refused:
        ToolRegistry().add(bad, origin="tests.other")
    assert str(refused.value) == (
        "Tool 'bad name with spaces' (from tests.other) has a name the API refuses: a tool's name is 1 to 128 "
        "letters, digits, `_` or `-`. Rename it with @beta_tool(name=...)."
    )


def test_a_module_that_cannot_be_imported_says_how_to_fix_it() -> None:
    with pytest.raises(ToolRegistrationError, match="Cannot import tool module 'no.such.module'"):
        ToolRegistry().add_module("no.such.module")


def test_a_module_without_tools_is_refused() -> None:
    with pytest.raises(ToolRegistrationError, match="defines no tool"):
        ToolRegistry().add_module("json")


def test_tool_options_on_a_plain_function_says_where_it_goes() -> None:
    with pytest.raises(ToolRegistrationError, match="Put @tool_options"):
        tool_options(maximum_attempts=2)(lambda: "x")  # type: ignore[type-var]


def test_json_log_lines_carry_the_traceback() -> None:
    import json
    import logging

    from agent_runner.worker_command import JsonFormatter

    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "agent_runner.activities.tools", logging.ERROR, __file__, 1, "tool %s failed", ("x",), None
        )
        import sys

        record.exc_info = sys.exc_info()
    entry = json.loads(JsonFormatter().format(record))
    assert (entry["level"], entry["logger"], entry["message"]) == (
        "ERROR",
        "agent_runner.activities.tools",
        "tool x failed",
    )
    assert entry["exception"].endswith("ValueError: boom")
