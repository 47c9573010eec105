"""Tools: the SDK's own ``beta_tool`` / ``beta_async_tool`` functions, each call run as one activity.

A tool module written for ``client.beta.messages.tool_runner`` registers unchanged: the worker finds every tool the
module defines. A tool's call becomes a ``tool_result`` exactly as the SDK builds it (``anthropic/lib/tools/
_tool_dispatch.py``), except where the SDK loses information the model needs:

- an exception gives ``repr(exc)`` cut at 4096 characters with ``is_error``, and its traceback goes to the worker's
  log; a ``ToolError`` gives its own content;
- invalid input gives the SDK's ``ValueError`` text *plus* pydantic's per-field details, so Claude can correct
  itself (the SDK keeps them only in ``__cause__``);
- a return value other than a string, a list of content blocks or ``None`` gives a clear ``is_error`` result (the
  SDK would send a dict's keys, or an ``int``'s ``TypeError``).

Only exceptions become results. A crashed worker or a timed-out attempt is an activity failure, which Temporal
retries under the tool's own options (``tool_options``).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import re
from collections.abc import Callable, Iterable
from datetime import timedelta
from types import ModuleType
from typing import Any, TypeVar

import pydantic
from anthropic.lib.tools import (
    BetaAsyncBuiltinFunctionTool,
    BetaAsyncFunctionTool,
    BetaBuiltinFunctionTool,
    BetaFunctionTool,
    ToolError,
)
from opentelemetry import trace
from temporalio import activity

from activities.content import Content
from activities.hooks import BUILTIN_HOOKS, ResultHook
from workflows.errors import ToolRegistrationError
from workflows.types import (
    DESCRIBE_TOOLS_ACTIVITY,
    RUN_TOOL_ACTIVITY,
    ActivityOptions,
    DescribeToolsInput,
    DescribeToolsOutput,
    RunToolInput,
    ToolResult,
    ToolSpec,
)

logger = logging.getLogger(__name__)
_tracer = trace.get_tracer("agent_runner")

Tool = BetaFunctionTool[Any] | BetaAsyncFunctionTool[Any] | BetaBuiltinFunctionTool | BetaAsyncBuiltinFunctionTool
"""Anything the SDK's tool runner can run by itself."""

TOOL_TYPES = (BetaFunctionTool, BetaAsyncFunctionTool, BetaBuiltinFunctionTool, BetaAsyncBuiltinFunctionTool)

DEFAULT_TOOL_OPTIONS = ActivityOptions(
    start_to_close_timeout=timedelta(minutes=5),
    heartbeat_timeout=timedelta(seconds=30),
)
"""A tool's activity options unless ``tool_options`` says otherwise."""

ERROR_TEXT_MAX = 4096
"""The most of an exception's text an ``is_error`` result carries (the SDK's ``FIELD_MAX``)."""

MAX_RESULT_BYTES = 32_000_000
"""The largest tool result a run takes: the Messages API's request limit (32 MB), which no turn could exceed."""

_OPTIONS_ATTRIBUTE = "__agent_runner_options__"
_APPROVAL_ATTRIBUTE = "__agent_runner_requires_approval__"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

ToolT = TypeVar("ToolT", bound=Tool)


def tool_options(
    *,
    start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    maximum_attempts: int | None = None,
    initial_interval: timedelta | None = None,
    maximum_interval: timedelta | None = None,
    task_queue: str | None = None,
    requires_approval: bool = False,
) -> Callable[[ToolT], ToolT]:
    """Set how a tool's calls are scheduled and retried. Apply it above ``@beta_tool``.

    Example::

        @tool_options(start_to_close_timeout=timedelta(minutes=30), maximum_attempts=3)
        @beta_tool
        def build_report(quarter: str) -> str:
            ...

    Args:
        start_to_close_timeout: How long one attempt may take (default 5 minutes).
        heartbeat_timeout: How long an attempt may go silent before it is retried on another worker (default 30 s;
            the worker heartbeats for the tool while it runs).
        maximum_attempts: Attempts after worker crashes or timeouts before the run fails; 0 for no limit (default).
            A tool's exceptions are not retried: they become ``is_error`` results.
        initial_interval: The first retry's delay (default 1 s).
        maximum_interval: The longest retry delay (default 60 s).
        task_queue: Run this tool only on workers polling this task queue (default: the run's queue).
        requires_approval: Each call waits for a person to approve or deny it before it runs.

    Returns:
        A decorator that records the options on the tool and returns it unchanged.
    """
    given = {
        "start_to_close_timeout": start_to_close_timeout,
        "heartbeat_timeout": heartbeat_timeout,
        "maximum_attempts": maximum_attempts,
        "initial_interval": initial_interval,
        "maximum_interval": maximum_interval,
        "task_queue": task_queue,
    }
    options = DEFAULT_TOOL_OPTIONS.model_copy(update={k: v for k, v in given.items() if v is not None})

    def apply(tool: ToolT) -> ToolT:
        if not isinstance(tool, TOOL_TYPES):
            raise ToolRegistrationError(
                f"tool_options() applies to a tool made with @beta_tool or @beta_async_tool, got "
                f"{type(tool).__name__}. Put @tool_options(...) above @beta_tool."
            )
        setattr(tool, _OPTIONS_ATTRIBUTE, ActivityOptions.model_validate(options.model_dump()))
        setattr(tool, _APPROVAL_ATTRIBUTE, requires_approval)
        return tool

    return apply


class ToolRegistry:
    """The tools one worker can run, by name."""

    def __init__(self, tools: Iterable[Tool] = (), hooks: Iterable[ResultHook] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._origins: dict[str, str] = {}
        self.hooks: dict[str, ResultHook] = {hook.name: hook for hook in [*BUILTIN_HOOKS, *hooks]}
        """Result hooks by name: the built-in ones and those of the registered modules."""
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool, *, origin: str = "") -> None:
        """Register ``tool``. Two different tools under one name are refused, not silently overwritten."""
        if not isinstance(tool, TOOL_TYPES):
            raise ToolRegistrationError(
                f"{tool!r} is not a tool: define it with anthropic's @beta_tool or @beta_async_tool."
            )
        name = tool.name
        existing = self._tools.get(name)
        if existing is not None and existing is not tool:
            raise ToolRegistrationError(
                f"Two tools are named {name!r} (from {self._origins[name] or 'an earlier registration'} and "
                f"{origin or 'a later one'}). Rename one with @beta_tool(name=...): Claude calls tools by name."
            )
        self._tools[name] = tool
        self._origins[name] = origin

    def add_module(self, module_name: str) -> list[str]:
        """Register every tool that the module ``module_name`` defines at its top level.

        Returns:
            The names registered, in definition order.
        """
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ToolRegistrationError(
                f"Cannot import tool module {module_name!r}: {e}. Pass a module importable from the worker's "
                "working directory or PYTHONPATH, such as `my_package.tools`."
            ) from e
        names = list(self._add_tools_of(module))
        if not names:
            raise ToolRegistrationError(
                f"Tool module {module_name!r} defines no tool or result hook. Decorate its functions with "
                "anthropic's @beta_tool or @beta_async_tool (or agent_runner's @result_hook)."
            )
        return names

    def _add_tools_of(self, module: ModuleType) -> Iterable[str]:
        for value in vars(module).values():
            if isinstance(value, TOOL_TYPES):
                self.add(value, origin=module.__name__)
                yield value.name
            elif isinstance(value, ResultHook):
                self.hooks[value.name] = value
                yield value.name

    def get(self, name: str) -> Tool | None:
        """The tool registered under ``name``, if any."""
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        """Every registered name."""
        return list(self._tools)

    def spec(self, name: str) -> ToolSpec | None:
        """The tool's definition and activity options, as a run needs them."""
        tool = self._tools.get(name)
        if tool is None:
            return None
        return ToolSpec(
            name=name,
            definition=dict(tool.to_dict()),
            options=getattr(tool, _OPTIONS_ATTRIBUTE, DEFAULT_TOOL_OPTIONS),
            requires_approval=getattr(tool, _APPROVAL_ATTRIBUTE, False),
        )


class ToolActivities:
    """The tool activities of one worker.

    Args:
        registry: The tools this worker runs.
        heartbeat_every: Seconds between heartbeats while a tool runs.
        model_task_queue: The queue of the fleet's model calls, told to each run that starts (``None``: the run's).
        search_attributes: Tell runs that the ``AgentRun*`` search attributes are registered, so they keep them current.
        content: The content store; a result too big to carry through the run's history is stored there.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        heartbeat_every: float = 1.0,
        model_task_queue: str | None = None,
        search_attributes: bool = False,
        content: Content | None = None,
    ) -> None:
        self._registry = registry
        self._content = content or Content()
        self._heartbeat_every = heartbeat_every
        self._model_task_queue = model_task_queue
        self._search_attributes = search_attributes

    @activity.defn(name=DESCRIBE_TOOLS_ACTIVITY)
    async def describe_tools(self, input: DescribeToolsInput) -> DescribeToolsOutput:
        """The definitions and options of the named tools, and the names this worker does not know."""
        specs = [self._registry.spec(name) for name in input.names]
        return DescribeToolsOutput(
            tools=[spec for spec in specs if spec is not None],
            missing=[name for name, spec in zip(input.names, specs, strict=True) if spec is None],
            missing_hooks=[name for name in input.hooks if name not in self._registry.hooks],
            registered=self._registry.names,
            model_task_queue=self._model_task_queue,
            search_attributes=self._search_attributes,
        )

    @activity.defn(name=RUN_TOOL_ACTIVITY)
    async def run_tool(self, input: RunToolInput) -> ToolResult:
        """Run one ``tool_use`` block and return its result, errors included."""
        tool = self._registry.get(input.name)
        if tool is None:
            return ToolResult(content=f"Error: Tool '{input.name}' not found", is_error=True)
        logger.info(
            "Running tool: run=%s iteration=%d tool=%s tool_use_id=%s attempt=%d",
            input.run_id,
            input.iteration,
            input.name,
            input.tool_use_id,
            activity.info().attempt,
        )
        # The SDK's span for a tool call, so traces read the same as for its in-process runner.
        with _tracer.start_as_current_span(
            f"anthropic.custom_tool_use {input.name}",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": input.name,
                "gen_ai.tool.call.id": input.tool_use_id,
                "agent_runner.run_id": input.run_id,
                "agent_runner.iteration": input.iteration,
            },
        ) as span:
            # The input as Claude wrote it: stored parts read back, placeholder-shaped data given as it was.
            input = input.model_copy(update={"input": await self._content.resolve(input.input)})
            result = await self._result(tool, input)
            if result.is_error:
                span.set_status(trace.StatusCode.ERROR)
                span.set_attribute("error.type", "tool_error")
        activity.metric_meter().create_counter("agent_runner_tool_calls", "Tool calls, by tool and outcome").add(
            1, {"tool": input.name, "outcome": "error" if result.is_error else "ok"}
        )
        if not result.is_error:
            # A big result (an image, a PDF) goes to the store; the run carries a placeholder.
            result = result.model_copy(update={"content": await self._content.offload(result.content)})
        return result

    async def _result(self, tool: Tool, input: RunToolInput) -> ToolResult:
        try:
            content = await self._call(tool, input.input)
        except ToolError as e:
            return ToolResult(content=_well_formed_content(e.content), is_error=True)
        except ValueError as e:
            if isinstance(e.__cause__, pydantic.ValidationError):
                return ToolResult(content=_invalid_input_text(e, e.__cause__), is_error=True)
            return self._error_result(input, e)
        except Exception as e:
            return self._error_result(input, e)
        return _within_payload_limit(input.name, _checked_result(input.name, content))

    async def _call(self, tool: Tool, tool_input: Any) -> Any:
        if isinstance(tool, (BetaAsyncFunctionTool, BetaAsyncBuiltinFunctionTool)):
            call: asyncio.Future[Any] = asyncio.ensure_future(tool.call(tool_input))
        else:
            # A sync tool runs on a thread so the worker keeps heartbeating (and polling) while it works.
            call = asyncio.ensure_future(asyncio.to_thread(tool.call, tool_input))
        try:
            while not call.done():
                activity.heartbeat()
                await asyncio.wait({call}, timeout=self._heartbeat_every)
            result = call.result()
        finally:
            call.cancel()
        if inspect.isawaitable(result):
            result = await result
        return result

    @staticmethod
    def _error_result(input: RunToolInput, error: Exception) -> ToolResult:
        logger.exception(
            "Error occurred while calling tool: %s (run=%s iteration=%d tool_use_id=%s)",
            input.name,
            input.run_id,
            input.iteration,
            input.tool_use_id,
            exc_info=error,
        )
        return ToolResult(content=_error_text(error), is_error=True)


def _within_payload_limit(name: str, result: ToolResult) -> ToolResult:
    """The result, or an ``is_error`` one if it is larger than a Messages API request may be.

    A big result is stored and carried by reference, but Claude could never be sent one over the API's request
    limit: the model gets a clear error instead, and can ask for less.
    """
    size = len(result.model_dump_json())
    if size <= MAX_RESULT_BYTES:
        return result
    return ToolResult(
        content=f"Error: Tool '{name}' returned {size / 1_000_000:.1f} MB, more than one request to Claude may carry "
        f"({MAX_RESULT_BYTES / 1_000_000:.1f} MB). Ask for a smaller part of the data.",
        is_error=True,
    )


def _error_text(error: BaseException) -> str:
    return _well_formed(repr(error))[:ERROR_TEXT_MAX]


def _invalid_input_text(error: ValueError, validation: pydantic.ValidationError) -> str:
    """The SDK's text for invalid input, then what exactly was wrong, so the model can send a corrected call."""
    lines = [repr(error)]
    for detail in validation.errors(include_url=False):
        where = ".".join(str(part) for part in detail["loc"]) or "input"
        missing = detail["type"] in ("missing", "missing_argument", "missing_keyword_only_argument")
        lines.append(f"- {where}: {detail['msg']}" + ("" if missing else f" (got {detail.get('input')!r})"))
    return _well_formed("\n".join(lines))[:ERROR_TEXT_MAX]


def _checked_result(name: str, content: Any) -> ToolResult:
    if content is None or isinstance(content, str):
        return ToolResult(content=_well_formed_content(content))
    if isinstance(content, (list, tuple)):
        blocks: list[dict[str, Any]] = []
        for block in content:
            if isinstance(block, pydantic.BaseModel):
                block = block.model_dump(mode="json", exclude_unset=True, by_alias=True)
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                return _wrong_return(name, f"a list holding {type(block).__name__}")
            blocks.append(block)
        return ToolResult(content=_well_formed_content(blocks))
    return _wrong_return(name, type(content).__name__)


def _wrong_return(name: str, what: str) -> ToolResult:
    return ToolResult(
        content=f"Error: Tool '{name}' returned {what}; a tool must return a string or a list of content blocks "
        "(text, image, document). Nothing else was sent.",
        is_error=True,
    )


def _well_formed(text: str) -> str:
    """``text`` with each unpaired surrogate replaced by U+FFFD, since UTF-8 cannot encode it."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def _well_formed_content(content: Any) -> Any:
    if content is None:
        return None
    if isinstance(content, str):
        return _well_formed(content)
    blocks = [dict(block) for block in content]
    for block in blocks:
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            block["text"] = _well_formed(block["text"])
    return blocks
