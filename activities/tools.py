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

Only exceptions become results. A crashed worker is an activity failure, which Temporal retries under the tool's own
options (``tool_options``) for an ``idempotent`` tool, and never for an ``at_most_once`` one.

Once a tool returned, its outcome is what the call produced: nothing that happens after (a result that cannot be
serialized, a store that cannot take a big result) runs the tool again; it becomes an ``is_error`` result. A worker
remembers the calls it ran by idempotency key, so an attempt of the same call that reaches the same worker again
waits for (or reuses) the first one's outcome instead of running the tool twice. The tool's timeout is enforced here:
an async tool is cancelled; a sync one, whose thread cannot be stopped, is reported as timed out and never retried
(a retry would run beside it).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import importlib
import inspect
import json
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
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
from anthropic.lib.tools._toolsets._runnable import TOOLSET_CLASSES, BetaAnyRunnableToolset
from opentelemetry import trace
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from agent_runner.activities.budget_policies import BudgetPolicy
from agent_runner.activities.contained import awaited_contained, contained
from agent_runner.activities.effects import IDEMPOTENT, Effects, effect_policy
from agent_runner.activities.heartbeats import EVERY, heartbeat, heartbeat_until
from agent_runner.activities.hooks import BUILTIN_HOOKS, ResultHook
from agent_runner.activities.toolsets import is_toolset, toolset_spec
from agent_runner.content import Content
from agent_runner.contract.agents import AgentSpec
from agent_runner.contract.big_params import DESCRIBED_TOOL_FIELD_LIMIT
from agent_runner.contract.errors import ToolRegistrationError
from agent_runner.contract.run_input import TOOL_NAME
from agent_runner.contract.tool_input import input_problems
from agent_runner.contract.types import (
    CHECK_TOOL_INPUT_ACTIVITY,
    DESCRIBE_TOOLS_ACTIVITY,
    RECONCILE_TOOL_ACTIVITY,
    RUN_LOCAL_TOOL_ACTIVITY,
    RUN_TOOL_ACTIVITY,
    TOOL_NOT_STARTED_ERROR,
    TOOL_TIMEOUT_GRACE,
    TOOLS_NOT_HERE_ERROR,
    ActivityOptions,
    CheckToolInput,
    DescribeToolsInput,
    DescribeToolsOutput,
    OnUnknown,
    ReconcileOutput,
    RunToolInput,
    ToolEffects,
    ToolResult,
    ToolSpec,
    idempotency_key,
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

STORE_ATTEMPTS = 5
"""Tries at storing a big result before it is given up as an ``is_error`` result (never by running the tool again)."""

REMEMBERED_CALLS = 1024
"""Finished calls a worker remembers by idempotency key, so a repeated attempt reuses the outcome."""

_OPTIONS_ATTRIBUTE = "__agent_runner_options__"
_APPROVAL_ATTRIBUTE = "__agent_runner_requires_approval__"
_EFFECTS_ATTRIBUTE = "__agent_runner_effects__"
_LOCAL_ATTRIBUTE = "__agent_runner_local__"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

ToolT = TypeVar("ToolT", bound=Tool)


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """The ``tool_use`` a tool is running for, as ``current_tool_call()`` returns it inside the tool.

    Attributes:
        run_id: The run's workflow id.
        tool_use_id: Claude's id for this call.
        name: The tool's name.
        input: The call's input, as Claude (or the approving person) gave it.
        idempotency_key: Stable for this ``tool_use`` of this run: the same on every attempt and across
            continue-as-new, different in a fork. Pass it to the service the tool calls (a payment API's
            ``Idempotency-Key``, a unique column) so it can recognize a repeat.
        iteration: The reply that asked for the call.
        attempt: The activity attempt, from 1.
    """

    run_id: str
    tool_use_id: str
    name: str
    input: Any
    idempotency_key: str
    iteration: int
    attempt: int


Reconcile = Callable[[ToolCall], Any | Awaitable[Any]]
"""``reconcile(call)``: ``None`` if the call did not take effect (it may run again), else its result for Claude."""

_current_call: contextvars.ContextVar[ToolCall] = contextvars.ContextVar("agent_runner_tool_call")


def current_tool_call() -> ToolCall:
    """The call the running tool (or ``reconcile`` function) serves: its run, ``tool_use_id`` and idempotency key.

    Example::

        @tool_options(effects="at_most_once")
        @beta_tool
        def charge(customer: str, cents: int) -> str:
            key = current_tool_call().idempotency_key
            return payments.charge(customer, cents, idempotency_key=key).id

    Raises:
        LookupError: outside a tool's call.
    """
    try:
        return _current_call.get()
    except LookupError:
        raise LookupError(
            "current_tool_call() is only available while a tool (or its reconcile function) runs in a worker."
        ) from None


def tool_options(
    *,
    start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    maximum_attempts: int | None = None,
    initial_interval: timedelta | None = None,
    maximum_interval: timedelta | None = None,
    task_queue: str | None = None,
    requires_approval: bool = False,
    effects: ToolEffects = "idempotent",
    on_unknown: OnUnknown | None = None,
    reconcile: Reconcile | None = None,
    local: bool = False,
) -> Callable[[ToolT], ToolT]:
    """Set how a tool's calls are scheduled, retried and protected from running twice. Apply it above ``@beta_tool``.

    Example::

        @tool_options(start_to_close_timeout=timedelta(minutes=30), maximum_attempts=3)
        @beta_tool
        def build_report(quarter: str) -> str:
            ...

    Args:
        start_to_close_timeout: How long one attempt may take (default 5 minutes).
        heartbeat_timeout: How long an attempt may go silent before it is retried on another worker (default 30 s;
            the worker heartbeats for the tool while it runs).
        maximum_attempts: Attempts after worker crashes or timeouts before the run fails (default 10); 0 for no
            limit. A tool's exceptions are not retried: they become ``is_error`` results. An ``at_most_once`` tool
            is never retried after an attempt that may have started it.
        initial_interval: The first retry's delay (default 1 s).
        maximum_interval: The longest retry delay (default 60 s).
        task_queue: Run this tool only on workers polling this task queue (default: the run's queue).
        requires_approval: Each call waits for a person to approve or deny it before it runs.
        effects: ``"idempotent"`` (default): running a call again is harmless, so an attempt lost with its worker is
            retried. ``"at_most_once"``: a call is never run again blindly; an attempt lost with its worker leaves
            the call's outcome unknown, and ``on_unknown`` decides.
        on_unknown: For ``at_most_once``: ``"reconcile"`` asks ``reconcile`` whether the call took effect (default
            when ``reconcile`` is given); ``"ask"`` asks a person through the approval machinery (approve: run it
            again; deny: Claude is told); ``"tell"`` (default otherwise) tells Claude plainly that the outcome is
            unknown.
        reconcile: ``reconcile(call: ToolCall)``, sync or async: ``None`` if the call did not take effect (it then
            runs again), else the call's result for Claude (a string or content blocks). Read
            ``call.idempotency_key`` to look the call up.
        local: Run each call as a local activity, on the worker running the run, inside its workflow task: no trip
            through the server (5 fewer history events, an eighth to a fifth less worker CPU an iteration), for a quick
            idempotent tool (well under the run's workflow task timeout, 10 s by default). A call lost with its
            worker runs again once that timeout passes; while a call runs, the run answers updates and queries only
            after it. A worker running the run without the tool sends the call through the queue.

    Returns:
        A decorator that records the options on the tool and returns it unchanged.

    Raises:
        ToolRegistrationError: for options that contradict each other or are out of range.
    """
    given = {
        "start_to_close_timeout": start_to_close_timeout,
        "heartbeat_timeout": heartbeat_timeout,
        "maximum_attempts": maximum_attempts,
        "initial_interval": initial_interval,
        "maximum_interval": maximum_interval,
        "task_queue": task_queue,
    }
    try:
        options = ActivityOptions.model_validate(
            {**DEFAULT_TOOL_OPTIONS.model_dump(), **{k: v for k, v in given.items() if v is not None}}
        )
    except pydantic.ValidationError as e:
        raise ToolRegistrationError(f"tool_options() got options out of range: {e.errors()[0]['msg']}.") from None
    policy = effect_policy("tool_options", effects, on_unknown, reconcile)
    if local:
        _check_local(options, policy.effects, given)

    def apply(tool: ToolT) -> ToolT:
        if not isinstance(tool, TOOL_TYPES):
            raise ToolRegistrationError(
                f"tool_options() applies to a tool made with @beta_tool or @beta_async_tool, got "
                f"{type(tool).__name__}. Put @tool_options(...) above @beta_tool."
            )
        setattr(tool, _OPTIONS_ATTRIBUTE, options)
        setattr(tool, _APPROVAL_ATTRIBUTE, requires_approval)
        setattr(tool, _EFFECTS_ATTRIBUTE, policy)
        setattr(tool, _LOCAL_ATTRIBUTE, local)
        return tool

    return apply


def _check_local(options: ActivityOptions, effects: ToolEffects, given: dict[str, Any]) -> None:
    """Refuse options a local call cannot keep (``tool_options(local=True)``)."""
    problems = []
    if effects == "at_most_once":
        # A local call lost with its worker starts again at attempt 1 on the next: nothing tells it ran before.
        problems.append(
            "effects='at_most_once' (a local call lost with its worker runs again, so its outcome cannot be told "
            "unknown): drop local=True"
        )
    if options.task_queue is not None:
        problems.append("task_queue= (a local call runs on the worker running the run): drop one of them")
    if given["heartbeat_timeout"] is not None:
        problems.append(
            "heartbeat_timeout= (a local call sends no heartbeats; a lost worker's call runs again after the run's "
            "workflow task timeout): drop it"
        )
    if problems:
        raise ToolRegistrationError(f"tool_options(local=True) cannot take {'; nor '.join(problems)}.")


Registrable = Tool | BetaAnyRunnableToolset | AgentSpec
"""What a worker registers: tools, runnable toolsets, and agents (a run names each in its ``tools``)."""


class ToolRegistry:
    """The tools, toolsets and agents one worker offers runs, by name."""

    def __init__(
        self,
        tools: Iterable[Registrable] = (),
        hooks: Iterable[ResultHook | BudgetPolicy] = (),
        toolsets: Iterable[BetaAnyRunnableToolset] = (),
        agents: Iterable[AgentSpec] = (),
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._origins: dict[str, str] = {}
        self.toolsets: dict[str, BetaAnyRunnableToolset] = {}
        """Runnable toolsets by family (``activities/toolsets.py``); a run names one by its family."""
        self.agents: dict[str, AgentSpec] = {}
        """Agents by name: a run naming one in its ``tools`` calls it as a child run (``workflows/subagents.py``)."""
        given = list(hooks)
        self.hooks: dict[str, ResultHook] = {
            hook.name: hook for hook in [*BUILTIN_HOOKS, *given] if isinstance(hook, ResultHook)
        }
        """Result hooks by name: the built-in ones and those of the registered modules."""
        self.budget_policies: dict[str, BudgetPolicy] = {p.name: p for p in given if isinstance(p, BudgetPolicy)}
        """Budget policies by name (``activities/budget_policies.py``)."""
        for tool in [*tools, *toolsets, *agents]:
            self.add(tool)

    def add(self, tool: Registrable, *, origin: str = "") -> None:
        """Register a tool, a runnable toolset or an agent. Two under one name are refused, not silently overwritten."""
        if isinstance(tool, AgentSpec):
            self._add_agent(tool, origin)
            return
        if is_toolset(tool):
            assert isinstance(tool, TOOLSET_CLASSES)
            family = tool.toolset_name
            if self.toolsets.get(family, tool) is not tool or family in self._tools or family in self.agents:
                raise ToolRegistrationError(
                    f"Two tools or toolsets are named {family!r}: register one {family!r} toolset per worker, and no "
                    "tool of that name (the API rejects a tool named like a toolset)."
                )
            self.toolsets[family] = tool
            return
        if not isinstance(tool, TOOL_TYPES):
            raise ToolRegistrationError(
                f"{tool!r} is not a tool: define it with anthropic's @beta_tool or @beta_async_tool."
            )
        name = tool.name
        existing = self._tools.get(name)
        if not TOOL_NAME.match(name):
            raise ToolRegistrationError(
                f"Tool {name!r}{f' (from {origin})' if origin else ''} has a name the API refuses: a tool's name is 1 "
                "to 128 letters, digits, `_` or `-`. Rename it with @beta_tool(name=...)."
            )
        if name in self.toolsets:
            raise ToolRegistrationError(f"Tool {name!r} is named like a registered toolset; rename it.")
        if name in self.agents:
            raise ToolRegistrationError(
                f"Tool {name!r} is named like a registered agent; rename one of them (Claude calls both by name)."
            )
        if existing is not None and existing is not tool:
            raise ToolRegistrationError(
                f"Two tools are named {name!r} (from {self._origins[name] or 'an earlier registration'} and "
                f"{origin or 'a later one'}). Rename one with @beta_tool(name=...): Claude calls tools by name."
            )
        self._tools[name] = tool
        self._origins[name] = origin

    def _add_agent(self, agent: AgentSpec, origin: str) -> None:
        name = agent.name
        existing = self.agents.get(name)
        if name in self._tools or name in self.toolsets or (existing is not None and existing != agent):
            raise ToolRegistrationError(
                f"Agent {name!r} has the name of another registered tool, toolset or agent (from "
                f"{self._origins.get(name) or 'an earlier registration'} and {origin or 'a later one'}). Rename one: "
                "Claude calls them by name."
            )
        self.agents[name] = agent
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
                f"Tool module {module_name!r} defines no tool, agent, result hook or budget policy. Decorate its "
                "functions with anthropic's @beta_tool or @beta_async_tool (or agent_runner's @result_hook or "
                "@budget_policy), or define an "
                "agent_runner AgentSpec at its top level."
            )
        return names

    def _add_tools_of(self, module: ModuleType) -> Iterable[str]:
        for value in vars(module).values():
            if is_toolset(value):
                self.add(value, origin=module.__name__)
                yield value.toolset_name
            elif isinstance(value, TOOL_TYPES):
                self.add(value, origin=module.__name__)
                yield value.name
            elif isinstance(value, ResultHook):
                self.hooks[value.name] = value
                yield value.name
            elif isinstance(value, BudgetPolicy):
                self.budget_policies[value.name] = value
                yield value.name
            elif isinstance(value, AgentSpec):
                self.add(value, origin=module.__name__)
                yield value.name

    def has_hook(self, name: str) -> bool:
        """Whether a result hook or a budget policy is registered under ``name`` (a run names both in its lookup)."""
        return name in self.hooks or name in self.budget_policies

    def get(self, name: str) -> Tool | None:
        """The tool registered under ``name``, if any."""
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        """Every registered name (toolsets by family, and agents)."""
        return [*self._tools, *self.toolsets, *self.agents]

    def spec(self, name: str) -> ToolSpec | None:
        """The tool's definition and activity options, as a run needs them."""
        tool = self._tools.get(name)
        if tool is None and name in self.agents:
            agent = self.agents[name]
            return ToolSpec(name=name, definition=agent.definition(), agent=agent)
        if tool is None:
            toolset = self.toolsets.get(name)
            return toolset_spec(toolset) if toolset is not None else None
        effects = _effects_of(tool)
        return ToolSpec(
            name=name,
            definition=dict(tool.to_dict()),
            options=getattr(tool, _OPTIONS_ATTRIBUTE, DEFAULT_TOOL_OPTIONS),
            requires_approval=getattr(tool, _APPROVAL_ATTRIBUTE, False),
            effects=effects.effects,
            on_unknown=effects.on_unknown,
            local=getattr(tool, _LOCAL_ATTRIBUTE, False),
        )


class ToolActivities:
    """The tool activities of one worker.

    Args:
        registry: The tools this worker runs.
        heartbeat_every: Seconds between heartbeats while a tool runs.
        model_task_queue: The queue of the fleet's model calls, told to each run that starts (``None``: the run's).
        search_attributes: Tell runs that the ``AgentRun*`` search attributes are registered, so they keep them current.
        content: The content store; a result too big to carry through the run's history is stored there.
        runs_tools: Whether this worker runs tool calls (its ``tools`` role): ``run_local_tool`` refuses them if not.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        heartbeat_every: float = EVERY,
        model_task_queue: str | None = None,
        search_attributes: bool = False,
        content: Content | None = None,
        runs_tools: bool = True,
    ) -> None:
        self._registry = registry
        self._runs_tools = runs_tools
        self._content = content or Content()
        self._heartbeat_every = heartbeat_every
        self._model_task_queue = model_task_queue
        self._search_attributes = search_attributes
        self._calls: OrderedDict[str, asyncio.Future[Any]] = OrderedDict()
        """Calls this worker ran or runs, by idempotency key."""

    @activity.defn(name=DESCRIBE_TOOLS_ACTIVITY)
    async def describe_tools(self, input: DescribeToolsInput) -> DescribeToolsOutput:
        """The definitions and options of the named tools, and the names this worker does not know."""
        specs = [self._registry.spec(name) for name in input.names]
        missing = [name for name, spec in zip(input.names, specs, strict=True) if spec is None]
        missing_hooks = [name for name in input.hooks if not self._registry.has_hook(name)]
        missing += missing_hooks
        if input.hand_back and missing:
            hand_back(f"the lookup of {', '.join(map(repr, missing))}")
        return DescribeToolsOutput(
            tools=await specs_by_reference(self._content, [spec for spec in specs if spec is not None]),
            missing=[name for name, spec in zip(input.names, specs, strict=True) if spec is None],
            missing_hooks=missing_hooks,
            registered=self._registry.names,
            model_task_queue=self._model_task_queue,
            search_attributes=self._search_attributes,
        )

    @activity.defn(name=CHECK_TOOL_INPUT_ACTIVITY)
    async def check_tool_input(self, input: CheckToolInput) -> list[str]:
        """What is wrong with an edited input under its tool's ``input_schema`` (``contract/tool_input.py``)."""
        schema, value = await self._content.resolve([input.input_schema, input.input])
        return input_problems(schema, value)

    @activity.defn(name=RUN_TOOL_ACTIVITY)
    async def run_tool(self, input: RunToolInput) -> ToolResult:
        """Run one ``tool_use`` block and return its result, errors included."""
        input = own_run(input)
        tool = self._registry.get(input.name)
        if tool is None:
            # The run looked it up on a worker that has it: in a mixed fleet another worker of the queue may too.
            hand_back(f"the call of {input.name!r}")
            return ToolResult(content=f"Error: Tool '{input.name}' not found", is_error=True)
        info = activity.info()
        logger.info(
            "Running tool: run=%s iteration=%d tool=%s tool_use_id=%s attempt=%d",
            input.run_id,
            input.iteration,
            input.name,
            input.tool_use_id,
            info.attempt,
        )
        try:
            # The input as Claude wrote it: stored parts read back, placeholder-shaped data given as it was.
            input = input.model_copy(update={"input": await self._content.resolve(input.input)})
        except ApplicationError:
            raise  # a missing or corrupted blob: final, and says so
        except Exception as e:
            # The tool has not started: running this attempt again cannot repeat an effect.
            raise ApplicationError(
                f"Could not read the stored input of tool '{input.name}' ({type(e).__name__}: {e}); the tool did "
                "not start.",
                type=TOOL_NOT_STARTED_ERROR,
            ) from e
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
            result = await self._outcome(tool, input, own_deadline())
            if result.is_error:
                span.set_status(trace.StatusCode.ERROR)
                span.set_attribute("error.type", "tool_error")
        activity.metric_meter().create_counter("agent_runner_tool_calls", "Tool calls, by tool and outcome").add(
            1, {"tool": input.name, "outcome": "error" if result.is_error else "ok"}
        )
        return await self._recorded(input, result)

    @activity.defn(name=RUN_LOCAL_TOOL_ACTIVITY)
    async def run_local_tool(self, input: RunToolInput) -> ToolResult:
        """Run a ``local`` tool's call on the worker running its run, as ``run_tool`` does.

        A worker that serves no tools, or lacks this one, refuses it at once: the run then sends it through the queue.
        """
        if not self._runs_tools or self._registry.get(input.name) is None:
            raise ApplicationError(
                f"This worker runs the run but not tool '{input.name}'; the call goes through task queue "
                f"{activity.info().task_queue!r}.",
                type=TOOLS_NOT_HERE_ERROR,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,  # expected of a fleet: the SDK logs it at DEBUG
            )
        return await self.run_tool(input)

    @activity.defn(name=RECONCILE_TOOL_ACTIVITY)
    async def reconcile_tool(self, input: RunToolInput) -> ReconcileOutput:
        """Ask an ``at_most_once`` tool's ``reconcile`` function whether a call whose outcome is unknown happened."""
        input = own_run(input)
        tool = self._registry.get(input.name)
        reconcile = _effects_of(tool).reconcile if tool is not None else None
        if reconcile is None:
            raise ApplicationError(
                f"No worker on task queue {activity.info().task_queue!r} registered a reconcile function for tool "
                f"'{input.name}'. Register it with @tool_options(effects='at_most_once', reconcile=...).",
                type="ToolRegistrationError",
                non_retryable=True,
            )
        input = input.model_copy(update={"input": await self._content.resolve(input.input)})
        token = _current_call.set(_call_of(input))
        try:
            answer = contained(reconcile, _current_call.get())
            if inspect.isawaitable(answer):
                answer = await awaited_contained(answer)
        except Exception as e:
            logger.exception("Reconciling tool %s (tool_use_id=%s) failed", input.name, input.tool_use_id)
            return ReconcileOutput(
                happened=True,
                result=ToolResult(
                    content=f"Error: The outcome of this call of '{input.name}' is unknown, and checking it failed: "
                    f"{_error_text(e)}. It was not run again. Check before calling it again.",
                    is_error=True,
                ),
            )
        finally:
            _current_call.reset(token)
        if answer is None:
            return ReconcileOutput(happened=False)
        return ReconcileOutput(happened=True, result=await self._recorded(input, _safe_result(input.name, answer)))

    async def _outcome(self, tool: Tool, input: RunToolInput, deadline: float | None) -> ToolResult:
        """The call's result: the one this worker already has for the call's idempotency key, or a new call's."""
        key = input.idempotency_key or f"{input.run_id}/{input.tool_use_id}"
        call = self._calls.get(key)
        if call is not None and not call.cancelled():
            # An earlier attempt of this very call ran here (its activity failed after, or timed out while a sync
            # tool went on): its outcome is this attempt's; the tool does not run again.
            logger.warning(
                "Tool %s (tool_use_id=%s) already ran on this worker for attempt %d; reusing its outcome.",
                input.name,
                input.tool_use_id,
                activity.info().attempt,
            )
            self._calls.move_to_end(key)
        else:
            call = self._start(tool, input)
            self._calls[key] = call
            self._forget_old_calls()
        sync = not isinstance(tool, (BetaAsyncFunctionTool, BetaAsyncBuiltinFunctionTool))
        try:
            # Heartbeats at least twice per heartbeat timeout, however short the tool declared it, but not at once: a
            # quick tool sends none (`heartbeats.py`).
            if not await heartbeat_until(call, self._heartbeat_every, deadline):

                async def finished() -> ToolResult:
                    return _result_of(input, call)

                return await past_own_timeout("Tool", input.name, input.tool_use_id, call, sync=sync, finished=finished)
        except asyncio.CancelledError:
            if not sync:
                call.cancel()  # a sync tool's thread cannot be stopped; its outcome stays remembered
            raise
        return _result_of(input, call)

    def _start(self, tool: Tool, input: RunToolInput) -> asyncio.Future[Any]:
        token = _current_call.set(_call_of(input))
        try:
            if isinstance(tool, (BetaAsyncFunctionTool, BetaAsyncBuiltinFunctionTool)):
                return asyncio.ensure_future(_awaited(tool.call(input.input)))
            # A sync tool runs on a thread (which copies the context) so the worker keeps heartbeating meanwhile.
            return asyncio.ensure_future(_in_thread(tool, input.input))
        finally:
            _current_call.reset(token)

    def _forget_old_calls(self) -> None:
        while len(self._calls) > REMEMBERED_CALLS:
            key, oldest = next(iter(self._calls.items()))
            if not oldest.done():
                break  # still running: remembered until it ends
            del self._calls[key]

    async def _recorded(self, input: RunToolInput, result: ToolResult) -> ToolResult:
        """``result`` ready to leave the worker: a big one stored apart. Never raises: the tool has run."""
        return await offloaded(self._content, input.name, result)


HAND_BACK_DELAY = timedelta(seconds=1)
"""How soon work a worker handed back for lack of a tool is offered again (the retry policy's backoff is longer)."""


def hand_back(what: str, *, unlimited: int | None = 10) -> None:
    """Hand ``what`` back to the queue, for a worker that has the tools this one lacks; unless it is the last attempt.

    A retry goes through the queue (only a first attempt may run on the workflow's own worker), so a mixed fleet's
    worker that has the tools gets it within a few attempts. On the last attempt this returns: the caller answers
    with what is missing, as a fleet where no worker has them must.

    Args:
        what: What is handed back, for the message.
        unlimited: The attempts an activity with unlimited attempts is given; ``None``: every one is handed back.
    """
    info = activity.info()
    policy = info.retry_policy
    # Unlimited attempts hand back 10 times by default: a tool no worker has must not keep a run waiting for ever.
    last = (policy.maximum_attempts or unlimited) if policy is not None else 1
    if last is not None and info.attempt >= last:
        return
    logger.info("This worker lacks what %s needs: handed back to task queue %s", what, info.task_queue)
    raise ApplicationError(
        f"This worker does not have what {what} needs: it handed it back to task queue {info.task_queue!r}, for a "
        f"worker that has (attempt {info.attempt} of {last or 'unlimited'}).",
        type=TOOLS_NOT_HERE_ERROR,
        next_retry_delay=HAND_BACK_DELAY,
        category=ApplicationErrorCategory.BENIGN,  # the SDK logs it at DEBUG, with no traceback
    )


def own_run(call: RunToolInput) -> RunToolInput:
    """``call`` naming its run and its idempotency key, where the run left them out (``workflows/history_size.py``).

    Runs since issue 14 leave out what the activity knows: the run's id is its workflow id, and in a run's first
    execution the key's first run id is the activity's own ``workflow_run_id``.
    """
    if call.run_id:
        return call  # recorded before: it names its run, and its key (or none) is as it was sent
    info = activity.info()
    key = call.idempotency_key or idempotency_key(info.workflow_run_id or "", call.tool_use_id)
    return call.model_copy(update={"run_id": info.workflow_id or "", "idempotency_key": key})


async def offloaded(content: Content, name: str, result: ToolResult, *, kind: str = "Tool") -> ToolResult:
    """``result`` with big content stored apart, tried ``STORE_ATTEMPTS`` times with backoff, heartbeating between.

    Never raises, since the tool (or a toolset's action: ``kind="Action"``) has run: when every try fails, Claude is
    told the result was lost.
    """
    delay = 0.5
    for attempt in range(1, STORE_ATTEMPTS + 1):
        try:
            return result.model_copy(update={"content": await content.offload(result.content)})
        except Exception as e:
            logger.warning("Storing the result of %s %s failed (try %d): %s", kind.lower(), name, attempt, e)
            if attempt == STORE_ATTEMPTS:
                return ToolResult(
                    content=f"Error: {kind} '{name}' ran, but its result could not be stored "
                    f"({_error_text(e)}). It was not run again.",
                    is_error=True,
                )
            heartbeat()
            await asyncio.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def own_deadline() -> float | None:
    """When this attempt's tool (or action, or MCP call) passes its own timeout, on the event loop's clock."""
    own = _own_timeout(activity.info())
    return None if own is None else asyncio.get_running_loop().time() + own.total_seconds()


async def past_own_timeout(
    what: str,
    name: str,
    tool_use_id: str,
    running: asyncio.Future[Any],
    *,
    sync: bool,
    finished: Callable[[], Awaitable[ToolResult]],
) -> ToolResult:
    """The outcome of a tool (``what``: ``Tool``) or toolset action (``Action``) still ``running`` past its timeout.

    A sync one's thread goes on and cannot be stopped: a retry would run beside it, so the call ends here, its result
    saying so. An async one is cancelled, and its attempt fails (``ToolTimedOut``) unless it finished as it was
    cancelled (``finished``: its result as it leaves the worker).
    """
    own = _own_timeout(activity.info())
    took = f"within {own.total_seconds():g} s" if own else "within its timeout"
    if sync:
        logger.error("%s %s (tool_use_id=%s) did not finish %s; its thread goes on", what, name, tool_use_id, took)
        return ToolResult(
            content=f"Error: {what} '{name}' did not finish {took}. It may still be running, so it was not run again.",
            is_error=True,
        )
    running.cancel()
    await asyncio.wait({running}, timeout=5)
    if running.done() and not running.cancelled():
        return await finished()  # it finished as it was cancelled: that is its outcome
    raise ApplicationError(f"{what} '{name}' did not finish {took}; it was cancelled.", type="ToolTimedOut")


def _own_timeout(info: activity.Info) -> timedelta | None:
    """The tool's own timeout, which this worker enforces.

    The run schedules the activity with ``TOOL_TIMEOUT_GRACE`` added, so the worker reports a timeout before
    Temporal's fires (runs started before the grace existed get most of their timeout).
    """
    timeout = info.start_to_close_timeout
    if timeout is None:
        return None
    return timeout - TOOL_TIMEOUT_GRACE if timeout > TOOL_TIMEOUT_GRACE else timeout * 0.8


def _effects_of(tool: Tool) -> Effects:
    effects: Effects = getattr(tool, _EFFECTS_ATTRIBUTE, IDEMPOTENT)
    return effects


def _call_of(input: RunToolInput) -> ToolCall:
    return ToolCall(
        run_id=input.run_id,
        tool_use_id=input.tool_use_id,
        name=input.name,
        input=input.input,
        idempotency_key=input.idempotency_key or f"{input.run_id}/{input.tool_use_id}",
        iteration=input.iteration,
        attempt=activity.info().attempt,
    )


async def _awaited(value: Awaitable[Any]) -> Any:
    return await awaited_contained(value)


async def _in_thread(tool: Tool, tool_input: Any) -> Any:
    result = await asyncio.to_thread(contained, tool.call, tool_input)
    if inspect.isawaitable(result):
        result = await awaited_contained(result)
    return result


def _result_of(input: RunToolInput, call: asyncio.Future[Any]) -> ToolResult:
    """A finished call as its ``tool_result``: exceptions become ``is_error`` results, as in the SDK."""
    error = call.exception()
    if error is None:
        return _safe_result(input.name, call.result())
    if isinstance(error, ToolError):
        return ToolResult(content=_well_formed_content(error.content), is_error=True)
    if isinstance(error, ValueError) and isinstance(error.__cause__, pydantic.ValidationError):
        return ToolResult(content=_invalid_input_text(error, error.__cause__), is_error=True)
    logger.error(
        "Error occurred while calling tool: %s (run=%s iteration=%d tool_use_id=%s)",
        input.name,
        input.run_id,
        input.iteration,
        input.tool_use_id,
        exc_info=error,
    )
    return ToolResult(content=_error_text(error), is_error=True)


def _safe_result(name: str, content: Any) -> ToolResult:
    """What a tool returned as a result, or an ``is_error`` one saying why it cannot be sent: never an exception."""
    try:
        return _within_payload_limit(name, _checked_result(name, content))
    except Exception as e:
        return ToolResult(
            content=f"Error: Tool '{name}' returned content that cannot be sent to Claude ({_error_text(e)}). A "
            "tool must return a string or content blocks of JSON values (base64 text for images and documents). "
            "Nothing else was sent, and the tool was not run again.",
            is_error=True,
        )


def _within_payload_limit(name: str, result: ToolResult) -> ToolResult:
    """The result, or an ``is_error`` one if it is larger than a Messages API request may be.

    A big result is stored and carried by reference, but Claude could never be sent one over the API's request
    limit: the model gets a clear error instead, and can ask for less.
    """
    if isinstance(result.content, str) and 6 * len(result.content) + 64 <= MAX_RESULT_BYTES:
        return result  # within the limit however its characters are escaped: no need to encode it to know
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
            if not isinstance(block, dict):
                return _wrong_return(name, f"a list holding {type(block).__name__}")
            if not isinstance(block.get("type"), str):
                return _wrong_return(name, "a list holding an object without a string `type`")
            blocks.append(block)
        json.dumps(blocks, allow_nan=False)  # bytes, sets, NaN: refused here, with the reason, not in the store
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
    # Scanning is per character (0.7 ms for a 100 KB result); ASCII is known without a scan, and encoding, which
    # refuses exactly the surrogates, is five times faster than the search.
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)
    return text


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


async def specs_by_reference(content: Content, specs: list[ToolSpec]) -> list[ToolSpec]:
    """``specs`` with their definitions' big fields stored and replaced by placeholders (``big_params.py``).

    Big here is past ``DESCRIBED_TOOL_FIELD_LIMIT``: a lookup's answer is in the run's history, and so is its first
    model call's input, which carries the definitions; the model call puts the stored fields back.
    """
    slim = await content.tools_by_reference([spec.definition for spec in specs], DESCRIBED_TOOL_FIELD_LIMIT, short=True)
    return [
        spec if new == spec.definition else spec.model_copy(update={"definition": new})
        for spec, new in zip(specs, slim, strict=True)
    ]
