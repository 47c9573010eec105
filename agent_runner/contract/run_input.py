"""The run's input: plain JSON, checked once when the run starts.

A run is started with the Messages API's own create parameters plus a few runner options, so that the stock
``temporal workflow start --type AgentRun --input '{...}'`` can start one as well as our client. The workflow takes
that JSON as a dict and checks it here instead of letting the data converter decode a typed class: a decoding error
would fail the workflow *task*, which Temporal retries forever, while a failed check fails the run at once with
``InvalidRunInput`` naming every problem.

The client runs the same check before it starts a run (``check_run_input``), so a bad input fails before a run
exists. This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar, get_args, get_type_hints

from anthropic.types.beta import BetaMessageParam, BetaToolUnionParam
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from agent_runner.contract.agents import AgentLimits, AgentSpec, parse_agents
from agent_runner.contract.big_params import lookalike_problems, stored_params, stored_ref
from agent_runner.contract.budget import AutoCompact, Budget, HistoryLimits
from agent_runner.contract.continuation import ContinueFrom, continue_from_problems
from agent_runner.contract.conversation import tool_changes_in
from agent_runner.contract.errors import InvalidRunInput, validation_summary
from agent_runner.contract.forking import ForkedFrom, forked_from_problems
from agent_runner.contract.params import param_problems
from agent_runner.contract.recorded_results import RecordedResult, Unrecorded, recorded_problems
from agent_runner.contract.sleep import SleepPolicy, parse_sleep
from agent_runner.contract.steering import COMPACT_BETA, INLINE_TOOLS_BETA, ApprovalPolicy, StepPolicy
from agent_runner.contract.toolsets import toolset_family
from agent_runner.contract.transcript import is_placeholder
from agent_runner.contract.types import ActivityOptions

API_PARAMS: frozenset[str] = frozenset(
    {
        # `client.beta.messages.create`'s parameters in anthropic 2.14.0, less `messages`, `tools`, `thread` and
        # `stream`, which the runner owns, and `compaction`, which is a per-turn request (tests/test_run_input.py
        # compares this list with the installed SDK, so a new parameter is noticed).
        "max_tokens",
        "model",
        "betas",
        "billing_policy",
        "cache_control",
        "container",
        "context_management",
        "diagnostics",
        "fallback_credit_token",
        "fallbacks",
        "inference_geo",
        "mcp_servers",
        "metadata",
        "output_config",
        "service_tier",
        "speed",
        "stop_sequences",
        "system",
        "thinking",
        "tool_choice",
        "user_profile_id",
        "workspace_id",
    }
)
"""Messages API parameters a run passes through to every request unchanged."""

EXTRA_BODY_PARAMS: frozenset[str] = frozenset({"temperature", "top_k", "top_p"})
"""Sampling parameters the 2.14.0 beta ``create`` no longer types; they are sent as ``extra_body``."""

RUNNER_OPTIONS: frozenset[str] = frozenset(
    {
        "tools",
        "messages",
        "max_iterations",
        "thread",
        "model_activity",
        "approval",
        "step",
        "result_hooks",
        "budget",
        "continue_as_new",
        "auto_compact",
        "eager_tools",
        "continue_cut_replies",
        "agents",
        "agent_limits",
        "sleep",
        "held",
        "mcp",
        "refusal_fallbacks",
        "continue_from",
        "forked_from",
        "recorded_tool_results",
        "unrecorded_tool_calls",
    }
)

_MESSAGE_ADAPTERS: dict[str, TypeAdapter[list[Any]]] = {
    get_args(get_type_hints(member)["role"])[0]: TypeAdapter(list[member], config=ConfigDict(extra="forbid"))  # type: ignore[valid-type]
    for member in get_args(BetaMessageParam)
}
"""A validator per role, over the SDK's own message type for it (built once: building one takes a while).

A list of one, because the config (no unknown keys, as the API has none) cannot be given to a ``TypedDict`` itself;
it applies to every ``TypedDict`` inside."""

_BLANK = {"type": "text", "text": ""}

ROLES = tuple(_MESSAGE_ADAPTERS)
"""The roles a message can have, in the SDK's order."""

_OptionT = TypeVar("_OptionT", bound=BaseModel)


class RunSpec(BaseModel):
    """A run's input after its check: what the workflow runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    params: dict[str, Any]
    """Messages API parameters sent with every request (``model``, ``max_tokens``, ``system``, ...)."""

    messages: list[dict[str, Any]]
    """The conversation so far, in the Messages API's wire shape."""

    tools: list[str | dict[str, Any]] = []
    """Registered tool names and raw tool definitions, in the order Claude sees them."""

    max_iterations: int | None = None
    """The most replies the run asks for; ``None`` for no limit."""

    thread: bool = True
    """Whether turns go on a server-side message thread (the SDK's default) or resend the full history."""

    model_activity: ActivityOptions = ActivityOptions()
    """How the model call's activity is scheduled and retried."""

    approval: ApprovalPolicy = ApprovalPolicy()
    """Which tool calls wait for a person's approval (besides tools registered with ``requires_approval``)."""

    step: StepPolicy | None = None
    """Step mode: pause after each reply until a client advances the run; ``None`` runs freely."""

    result_hooks: list[str] = []
    """Registered result hooks to run, in order, over each reply's tool results before Claude sees them."""

    budget: Budget = Budget()
    """Token, cost and time limits the run ends at, gracefully."""

    continue_as_new: HistoryLimits = HistoryLimits()
    """When the run starts a fresh history, carrying its state."""

    auto_compact: AutoCompact | None = None
    """Compact the history when a turn's input grows past a threshold."""
    eager_tools: bool = False
    """Start each tool as soon as its ``tool_use`` block has streamed, before the reply ends (the SDK's
    ``run_tools_eagerly``). A tool started so runs even when the reply then turns out not to run tools (its stop
    reason, a retry, a failed attempt): its result is dropped, as in the SDK's eager mode. Tools that need approval
    start with the reply, as usual; ``eager_tools`` is ignored in step mode."""
    continue_cut_replies: bool = False
    """When a reply's stream is cut off (a dropped connection, a read timeout, an overload mid-stream, a worker
    killed), the retried attempt sends the text that had come as the start of Claude's turn, so Claude goes on from
    there instead of writing the reply again (``activities/cut_replies.py``)."""

    agents: list[AgentSpec] = []
    """Agents Claude can call as tools, each run as a child run (``workflows/subagents.py``); their definitions follow
    ``tools``."""

    agent_limits: AgentLimits = AgentLimits()
    """How deep and wide the tree of agents may grow, and this run's depth in it."""

    sleep: SleepPolicy | None = None
    """The built-in ``sleep`` tool, offered after ``tools`` and ``agents`` (``workflows/sleep.py``); ``None``: not
    offered."""

    held: bool = False
    """Whether ``messages`` came in the held form (the Python client's marker); plain JSON is escaped by the run
    (``workflows/plain_json.py``)."""

    mcp: list[str] = []
    """MCP servers the workers are configured with whose tools the run uses (``workflows/mcp.py``); their
    definitions follow the agents'."""
    refusal_fallbacks: list[dict[str, Any]] = []
    """Models to retry a refused turn on, in order, as ``fallbacks`` entries (``workflows/fallbacks.py``)."""

    continue_from: ContinueFrom | None = None
    """The ended run whose conversation this run goes on with (``workflows/continuation.py``)."""

    forked_from: ForkedFrom | None = None
    """The run and reply this run was forked from, and the tools it runs (``workflows/forking.py``)."""

    recorded_tool_results: list[RecordedResult] = []
    """Tool calls another run made, with their results: a call made the same way is answered with its result, and
    its tool does not run (a what-if run; ``contract/recorded_results.py``)."""

    unrecorded_tool_calls: Unrecorded = "run"
    """What a call no recorded result answers gets: run, as usual, or ``refuse``d with an error (a dry run)."""


def parse_run_input(raw: object, *, late_checks: bool = True) -> RunSpec:
    """Check a run's JSON input and split it into API parameters and runner options.

    Args:
        raw: The workflow's input as decoded JSON.
        late_checks: Whether to make the checks added after runs could start without them (``late_problems``);
            the workflow makes them itself, for new runs only, since a run in flight must go on with the input it
            was given.

    Returns:
        The checked run.

    Raises:
        InvalidRunInput: naming every problem found, and what to do about each.
    """
    if not isinstance(raw, dict):
        raise InvalidRunInput(
            f"A run's input must be a JSON object with at least `model`, `max_tokens` and `messages`; "
            f"got {type(raw).__name__}."
        )
    problems: list[str] = []
    unknown = sorted(k for k in raw if k not in API_PARAMS | EXTRA_BODY_PARAMS | RUNNER_OPTIONS)
    for key in unknown:
        hint = (
            " Ask for compaction between turns instead of in the run's input."
            if key == "compaction"
            else " `stream` is not a run option: follow a run with the client or `agent-runner follow`."
            if key == "stream"
            else ""
        )
        problems.append(
            f"Unknown field `{key}`.{hint} Allowed: the Messages API parameters "
            f"({', '.join(sorted(API_PARAMS | EXTRA_BODY_PARAMS))}) and the runner options "
            f"({', '.join(sorted(RUNNER_OPTIONS))})."
        )
    for key in ("model", "max_tokens", "messages"):
        if key not in raw:
            problems.append(f"Missing required field `{key}`.")
    problems.extend(required_param_problems(raw))
    if not problems or all("`model`" not in p and "`max_tokens`" not in p for p in problems):
        params = {k: v for k, v in raw.items() if k in API_PARAMS | EXTRA_BODY_PARAMS}
        if raw.get("held") is True:  # the client stored the big ones (``big_params.py``): only the store has them
            params = {k: v for k, v in params.items() if k not in stored_params(params)}
        else:  # plain JSON: a reference-shaped value is data no parameter takes, never a reference
            problems.extend(lookalike_problems(params, raw.get("tools")))
        problems.extend(param_problems({**params, "model": str(raw.get("model")), "max_tokens": 1}))
    messages = raw.get("messages")
    if "messages" in raw:
        problems.extend(message_problems(messages))
    tools = raw.get("tools", [])
    problems.extend(tool_problems(tools))
    max_iterations = raw.get("max_iterations")
    if max_iterations is not None and (
        not isinstance(max_iterations, int) or isinstance(max_iterations, bool) or max_iterations < 1
    ):
        problems.append("`max_iterations` must be a positive integer, or null for no limit.")
    thread = raw.get("thread", True)
    if not isinstance(thread, bool):
        problems.append("`thread` must be true (server-side message threads) or false (full history every turn).")
    model_activity = _option(raw, "model_activity", ActivityOptions, problems) or ActivityOptions()
    approval = _option(raw, "approval", ApprovalPolicy, problems) or ApprovalPolicy()
    step = _option({"step": {} if raw.get("step") is True else raw.get("step")}, "step", StepPolicy, problems)
    budget = _option(raw, "budget", Budget, problems) or Budget()
    continue_as_new = _option(raw, "continue_as_new", HistoryLimits, problems) or HistoryLimits()
    auto_compact = _option(raw, "auto_compact", AutoCompact, problems)
    eager_tools = raw.get("eager_tools", False)
    if not isinstance(eager_tools, bool):
        problems.append("`eager_tools` must be true (start tools while the reply streams) or false.")
    continue_cut_replies = raw.get("continue_cut_replies", False)
    if not isinstance(continue_cut_replies, bool):
        problems.append(
            "`continue_cut_replies` must be true (a retry goes on from the text a cut-off stream had sent) or false."
        )
    result_hooks = raw.get("result_hooks", [])
    if not isinstance(result_hooks, list) or not all(isinstance(h, str) and h for h in result_hooks):
        problems.append("`result_hooks` must be a list of registered result hook names.")
    names = (
        [t if isinstance(t, str) else t.get("name") for t in tools if isinstance(t, str | dict)]
        if isinstance(tools, list)
        else []
    )
    tool_names = [n for n in names if isinstance(n, str)]
    agents, agent_limits = parse_agents(raw, tool_names, problems)
    sleep = parse_sleep(raw, [*tool_names, *(agent.name for agent in agents)], problems)
    held = raw.get("held", False)
    if not isinstance(held, bool):
        problems.append(
            "`held` must be true (the content is in the held form, as the Python client sends it) or false."
        )
    mcp = raw.get("mcp", [])
    if not isinstance(mcp, list) or not all(isinstance(s, str) and s for s in mcp) or len(set(mcp)) != len(mcp):
        problems.append(
            '`mcp` must be a list of distinct names of MCP servers the workers are configured with, such as ["files"].'
        )
    if isinstance(tools, list):
        problems.extend(duplicate_tool_problems(tools))
        # A run that goes on from another's history, or uses an MCP server's tools, has tools only the API can name.
        offered = [*tools, *(agent.name for agent in agents), *([sleep.definition()] if sleep else [])]
        known = None if mcp or raw.get("continue_from") or raw.get("forked_from") else run_tool_names(offered, messages)
        problems.extend(tool_choice_problems(raw.get("tool_choice"), known))
    refusal_fallbacks = raw.get("refusal_fallbacks")
    problems.extend(fallback_problems(refusal_fallbacks, raw))
    problems.extend(continue_from_problems(raw.get("continue_from"), messages))
    problems.extend(forked_from_problems(raw.get("forked_from")))
    problems.extend(recorded_problems(raw.get("recorded_tool_results"), raw.get("unrecorded_tool_calls")))
    if late_checks:
        problems.extend(late_problems(raw))
    if problems:
        raise InvalidRunInput("The run's input was rejected:\n- " + "\n- ".join(problems))
    return RunSpec(
        params={k: v for k, v in raw.items() if k in API_PARAMS | EXTRA_BODY_PARAMS},
        messages=list(messages),  # type: ignore[arg-type]  # checked by message_problems
        # Claude sees an agent, and the built-in sleep, as tools.
        tools=[*tools, *(agent.definition() for agent in agents), *([sleep.definition()] if sleep else [])],
        max_iterations=max_iterations,
        thread=thread,
        model_activity=model_activity,
        approval=approval,
        step=step,
        result_hooks=result_hooks,
        budget=budget,
        continue_as_new=continue_as_new,
        auto_compact=auto_compact,
        eager_tools=eager_tools,
        continue_cut_replies=continue_cut_replies,
        agents=agents,
        agent_limits=agent_limits,
        sleep=sleep,
        held=held,
        mcp=mcp,
        refusal_fallbacks=entries(refusal_fallbacks or []),
        continue_from=ContinueFrom.model_validate(raw["continue_from"]) if raw.get("continue_from") else None,
        forked_from=ForkedFrom.model_validate(raw["forked_from"]) if raw.get("forked_from") else None,
        recorded_tool_results=[RecordedResult.model_validate(e) for e in raw.get("recorded_tool_results") or []],
        unrecorded_tool_calls=raw.get("unrecorded_tool_calls") or "run",
    )


def fallback_problems(raw: object, params: dict[str, Any]) -> list[str]:
    """What is wrong with a run's ``refusal_fallbacks`` (empty when nothing is)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(
        (isinstance(e, str) and e) or (isinstance(e, dict) and isinstance(e.get("model"), str) and e["model"])
        for e in raw
    ):
        return [
            '`refusal_fallbacks` must be a list of model names (e.g. ["claude-opus-4-8"]), or of `fallbacks` '
            'entries with a `model` (e.g. {"model": "claude-opus-4-8", "thinking": null}).'
        ]
    if raw and params.get("fallbacks") is not None:
        return [
            "`refusal_fallbacks` (client-side, as the SDK's BetaRefusalFallbackMiddleware) cannot be used with "
            "`fallbacks` (server-side): give one of them."
        ]
    return []


def late_problems(raw: Mapping[str, Any]) -> list[str]:
    """What the checks added after runs could start without them find wrong with a run's input ``raw``.

    A run in flight that was started with such input goes on with it (``parse_run_input``'s ``late_checks``).
    """
    problems: list[str] = []
    chain = raw.get("refusal_fallbacks")
    for number, entry in enumerate(chain if isinstance(chain, list) else [], start=1):
        # An entry patches the run's request parameters (the SDK's middleware: a value sets one, null unsets it):
        # any other key fails its hop (the SDK's call takes no such keyword), and the refusal then stands.
        unknown = sorted(set(entry) - API_PARAMS - EXTRA_BODY_PARAMS) if isinstance(entry, dict) else []
        if unknown:
            problems.append(
                f"`refusal_fallbacks` entry {number} sets {', '.join(f'`{key}`' for key in unknown)}, which is no "
                "Messages API parameter: an entry patches the run's parameters (a value sets one, null unsets it), "
                'as in {"model": "claude-opus-4-8", "thinking": null}.'
            )
    betas = raw.get("betas")
    carried = raw.get("continue_from") is not None  # a `send` goes on with its conversation's parameters
    if not carried:
        problems.extend(inline_tools_problems(raw.get("messages"), betas))
    if raw.get("auto_compact") is not None and not carried and not (isinstance(betas, list) and COMPACT_BETA in betas):
        # Its first compaction request would be refused with a 400, failing the run hours in.
        problems.append(
            f'`auto_compact` needs the `{COMPACT_BETA}` beta: add it to `betas` (`"betas": ["{COMPACT_BETA}"]`).'
        )
    return problems


_INLINE_TOOL_CHANGES = ("tool_addition", "tool_removal")


def inline_tools_problems(messages: Any, betas: Any) -> list[str]:
    """What the API would refuse in ``messages`` without its beta: a `system` message with a tool change."""
    if isinstance(betas, list) and INLINE_TOOLS_BETA in betas:
        return []
    for number, message in enumerate(messages if isinstance(messages, list) else [], start=1):
        content = message.get("content") if isinstance(message, dict) and message.get("role") == "system" else None
        blocks = content if isinstance(content, list) else []
        kind = next((b["type"] for b in blocks if isinstance(b, dict) and b.get("type") in _INLINE_TOOL_CHANGES), None)
        if kind is not None:
            return [
                f"Message {number} is a `system` message with a `{kind}` block, which needs the `{INLINE_TOOLS_BETA}` "
                f'beta: add it to `betas` (`"betas": ["{INLINE_TOOLS_BETA}"]`).'
            ]
    return []


def entries(raw: list[str | dict[str, Any]]) -> list[dict[str, Any]]:
    """The chain as ``fallbacks`` entries: a model name is ``{"model": name}``."""
    return [{"model": e} if isinstance(e, str) else dict(e) for e in raw]


def required_param_problems(params: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``model`` and ``max_tokens``, where ``params`` gives them: a run's input or an edit's."""
    problems: list[str] = []
    if "model" in params and (not isinstance(params["model"], str) or not params["model"]):
        problems.append('`model` must be a non-empty string such as "claude-sonnet-5-5".')
    max_tokens = params.get("max_tokens")
    if "max_tokens" in params and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        problems.append("`max_tokens` must be a positive integer.")
    return problems


def message_problems(messages: object) -> list[str]:
    """What makes ``messages`` a conversation the Messages API would reject, or the runner could not continue.

    Each message is checked against the SDK's own type for its role (``BetaMessageParam``'s members), so every
    shape the installed SDK accepts is accepted, and a new one arrives with an SDK upgrade. On top come the rules the
    types cannot express and the API enforces: a ``tool_result`` only in a user message, answering a ``tool_use``
    of the assistant message before it, and a system message with ``content`` or ``output_config``.
    """
    if not isinstance(messages, list) or not messages:
        return ['`messages` must be a non-empty list of messages such as {"role": "user", "content": "Hi"}.']
    problems: list[str] = []
    previous_tool_use_ids: set[str] = set()
    for i, message in enumerate(messages):
        where = f"`messages[{i}]`"
        if not isinstance(message, dict):
            problems.append(f"{where} must be an object with `role` and `content`.")
            previous_tool_use_ids = set()
            continue
        role = message.get("role")
        if role not in _MESSAGE_ADAPTERS:
            problems.append(f"{where}.role must be one of {list(ROLES)}, got {role!r}.")
            continue
        problems.extend(_shape_problems(where, role, message))
        content = message.get("content")
        if role == "system" and content is None and not message.get("output_config"):
            problems.append(
                f"{where} is a system message with neither `content` nor an `output_config` field; the API rejects "
                "it. Give it one."
            )
        blocks = content if isinstance(content, list) else []
        prefill = role == "assistant" and i == len(messages) - 1  # the API takes an empty final assistant turn
        if content in ("", []) and not prefill:
            problems.append(
                f"{where} has empty content; the API takes that only in a last assistant message (a prefill). Give "
                "it text or content blocks, or leave the message out."
            )
        tool_use_ids: set[str] = set()
        for j, block in enumerate(blocks):
            if not isinstance(block, dict) or is_placeholder(block):
                continue
            text = block.get("text")
            if block.get("type") == "text" and isinstance(text, str) and not text.strip() and not prefill:
                problems.append(
                    f"{where}.content[{j}] is a text block with no text but whitespace; the API rejects it. Leave "
                    "the block out."
                )
            if block.get("type") == "tool_use":
                tool_use_ids.add(str(block.get("id")))
            if block.get("type") == "tool_result":
                if role != "user":
                    problems.append(
                        f"{where}.content[{j}] is a `tool_result` in a {role!r} message; only user "
                        "messages carry tool results."
                    )
                elif block.get("tool_use_id") not in previous_tool_use_ids:
                    problems.append(
                        f"{where}.content[{j}] answers `tool_use_id` {block.get('tool_use_id')!r}, which is not a "
                        "`tool_use` of the assistant message right before it; Claude's API rejects such a history."
                    )
        if role != "system":
            previous_tool_use_ids = tool_use_ids
    last = messages[-1]
    if isinstance(last, dict) and last.get("role") == "assistant" and previous_tool_use_ids:
        problems.append(
            f"`messages[{len(messages) - 1}]` ends the conversation with tool calls that have no results "
            f"({', '.join(sorted(previous_tool_use_ids))}); the API refuses that. End it with the user message that "
            "holds their `tool_result` blocks, or leave the calls out (a run's own calls get their results from its "
            "tools: let them run, then read the transcript again)."
        )
    return problems


def _shape_problems(where: str, role: str, message: dict[str, Any]) -> list[str]:
    """What the SDK's type for ``role`` messages finds wrong with ``message``, one line per field."""
    content = message.get("content")
    if is_placeholder(content):
        message = {**message, "content": ""}  # content a client stored: only the store can check it
        content = ""
    if content is not None and not isinstance(content, str | list):
        # The types take any iterable, which JSON has only as a list: an object would be read as its keys.
        return [f"{where}.content must be a string or a list of content blocks."]
    lines: dict[str, None] = {}
    if isinstance(content, list):
        # A block without a `type` fails every member of the union at once: say what it lacks, once.
        untyped = [j for j, b in enumerate(content) if not (isinstance(b, dict) and isinstance(b.get("type"), str))]
        stored = [j for j in untyped if is_placeholder(content[j])]  # blocks a client stored: the store has them
        for j in untyped:
            if j not in stored:
                lines[f"{where}.content[{j}] must be a content block object with a string `type`."] = None
        # Checked in place of them: a text block, which every role takes, keeps the other blocks' places.
        message = {**message, "content": [_BLANK if j in untyped else b for j, b in enumerate(content)]}
    errors: list[ErrorDetails] = []
    try:
        validated = _MESSAGE_ADAPTERS[role].validate_python([message])[0]
    except ValidationError as e:
        errors.extend(e.errors(include_url=False))
    else:
        # `Iterable` fields validate lazily, item by item, as they are read: read them all.
        errors.extend(_drain(validated, (0,)))
    kept, unmatched = _relevant(errors, message)
    failures: dict[str, list[str]] = {}
    for error in kept:
        path = _path(message, error["loc"][1:], error["type"])
        if path is None:
            continue
        if error["type"] == "extra_forbidden":
            lines[f"{where}{path} is not a field the SDK's types allow here; remove it."] = None
        elif error["msg"] not in failures.setdefault(path, []):
            failures[path].append(error["msg"])
    for path, messages in failures.items():
        # A value that is none of a union's members fails each of them: one line lists what would do.
        lines[f"{where}{path}: {'; or '.join(messages)}."] = None
    for path, expected in unmatched.items():
        if expected:
            lines[
                f"{where}{path}.type is {_value_at(message, path).get('type')!r}, not a content block type that goes "
                f"here; use one of {', '.join(sorted(set(expected)))}."
            ] = None
        else:
            lines[f"{where}{path} must be a content block object with a string `type`."] = None
    return list(lines)


def _drain(value: Any, loc: tuple[int | str, ...]) -> list[ErrorDetails]:
    """Read every lazily validated iterable in ``value``; the errors found, located from the message list."""
    errors: list[ErrorDetails] = []
    if isinstance(value, dict):
        for key, item in value.items():
            errors.extend(_drain(item, (*loc, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            errors.extend(_drain(item, (*loc, index)))
    elif isinstance(value, Iterator):
        index = 0
        while True:
            try:
                item = next(value)
            except StopIteration:
                break
            except ValidationError as e:
                errors.extend({**error, "loc": (*loc, *error["loc"])} for error in e.errors(include_url=False))
            else:
                errors.extend(_drain(item, (*loc, index)))
            index += 1
    return errors


def _relevant(errors: list[ErrorDetails], message: dict[str, Any]) -> tuple[list[ErrorDetails], dict[str, list[str]]]:
    """Sort a union's errors: a block's ``type`` says which member it is meant to be.

    Returns:
        The errors of the members whose ``type`` a block has, and the blocks that have no member's ``type`` (by
        path, with the types there are), deepest only: a block is no member when one inside it is none.
    """
    on_type = [e for e in errors if e["loc"] and e["loc"][-1] == "type" and e["type"] in ("literal_error", "missing")]
    mismatched = {e["loc"][:-1] for e in on_type}  # the members a block was tried as and is not
    expected: dict[str, list[str]] = {}
    for error in on_type:
        member = error["loc"][:-1]
        if any(len(m) < len(member) and member[: len(m)] == m for m in mismatched):
            continue  # inside a member the block is not: says nothing about the block
        block = _path(message, member[1:], "")
        if block is None:
            continue  # content a client stored
        ctx = error.get("ctx") or {}
        types = expected.setdefault(block, [])
        types.extend(t for t in str(ctx.get("expected", "")).split(" or ") if t and error["type"] == "literal_error")
    kept = [e for e in errors if not any(e["loc"][: len(m)] == m for m in mismatched)]
    kept_paths = [_path(message, e["loc"][1:], e["type"]) or "" for e in kept]

    def within(path: str, block: str) -> bool:
        return path.startswith(block) and path[len(block) : len(block) + 1] in ("", ".", "[")

    # A block some member's `type` matched has that member's errors; the others matched no member.
    unmatched = {b: t for b, t in expected.items() if not any(within(p, b) for p in kept_paths)}
    deepest = {b: t for b, t in unmatched.items() if not any(o != b and within(o, b) for o in unmatched)}
    return kept, deepest


def _path(message: dict[str, Any], loc: tuple[int | str, ...], error_type: str) -> str | None:
    """``loc`` as a path into ``message`` (``.content[0].text``), without the union members' tags.

    Returns ``None`` for an error inside content a client stored (a placeholder): only the store has it.
    """
    path = ""
    value: Any = message
    for position, step in enumerate(loc):
        if is_placeholder(value):
            return None
        last = position == len(loc) - 1
        if isinstance(value, dict) and isinstance(step, str) and (step in value or (last and error_type == "missing")):
            path += f".{step}"
            value = value.get(step)
        elif isinstance(value, list) and isinstance(step, int) and 0 <= step < len(value):
            path += f"[{step}]"
            value = value[step]
        # Anything else names the union member the value was tried as.
    return path


def _value_at(message: dict[str, Any], path: str) -> Any:
    """The value at ``path`` (as ``_path`` writes it) in ``message``."""
    value: Any = message
    for step in re.findall(r"\.(\w+)|\[(\d+)\]", path):
        value = value.get(step[0]) if step[0] else value[int(step[1])]
    return value


TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
"""The names the Messages API takes for a custom tool (and the runner for an agent or a registered tool)."""


def _literals(hint: Any) -> list[str]:
    """The string values a ``Literal`` (inside ``Optional`` or a union) allows."""
    return [a for a in get_args(hint) if isinstance(a, str)] + [
        s for a in get_args(hint) if not isinstance(a, str) for s in _literals(a)
    ]


_TOOL_MEMBERS: dict[str, Any] = {
    kind: member for member in get_args(BetaToolUnionParam) for kind in _literals(get_type_hints(member)["type"])
}
"""The SDK's type for each ``type`` a tool definition can have (``BetaToolUnionParam``'s members; a custom tool's
``type`` is ``"custom"`` or absent)."""


_TOOL_ADAPTERS: dict[str, TypeAdapter[list[Any]]] = {
    kind: TypeAdapter(list[member], config=ConfigDict(extra="forbid"))  # type: ignore[valid-type]
    for kind, member in _TOOL_MEMBERS.items()
}
"""A validator over the SDK's type for tool definitions of each ``type``; a list of one, as for messages, so the
config (no unknown keys, as the API has none) applies to the ``TypedDict`` inside. Built when this module is imported
(about 50 ms for all of them), as the message validators are, not on first use: built inside Temporal's workflow
sandbox (where the replay tests run ``AgentRun``), a ``TypeAdapter`` cannot resolve the SDK's annotations ("not fully
defined"), so the replay failed unless something outside the sandbox had used it first."""


def tool_problems(tools: object, where: str = "tools") -> list[str]:
    """What makes ``tools`` not a list of registered tools' names and raw tool definitions the API takes, one line each.

    Each definition is checked against the SDK's own type for it (``BetaToolUnionParam``'s members), as a message is,
    so a server tool the installed SDK knows is taken as it declares it.
    """
    if not isinstance(tools, list):
        return [f"`{where}` must be a list of registered tool names and/or raw tool definitions."]
    problems: list[str] = []
    for i, tool in enumerate(tools):
        if isinstance(tool, str):
            if not tool:
                problems.append(f"`{where}[{i}]` is an empty name.")
        elif isinstance(tool, dict):
            if not isinstance(tool.get("name"), str) and not isinstance(tool.get("type"), str):
                problems.append(f"`{where}[{i}]` is a tool definition without a `name` or `type`.")
            else:
                problems.extend(definition_problems(f"`{where}[{i}]`", tool))
        else:
            problems.append(f"`{where}[{i}]` must be a registered tool's name or a tool definition object.")
    return problems


def definition_problems(where: str, tool: dict[str, Any]) -> list[str]:
    """What the SDK's type for a raw tool definition finds wrong with ``tool``, one line per field.

    A field held by reference (a placeholder, ``big_params.py``) is taken as given: only the store has its value.
    """
    kind = tool.get("type")
    kind = "custom" if kind is None else kind
    if not isinstance(kind, str) or kind not in _TOOL_MEMBERS:
        kinds = ", ".join(sorted(set(_TOOL_MEMBERS) - {"custom"}))
        return [
            f"{where}.type is {kind!r}, not a tool type the SDK's types know; leave it out for a custom tool (with "
            f"`name`, `description` and `input_schema`), or use one of {kinds}."
        ]
    if kind == "custom" and "input_schema" not in tool:
        return [
            f"{where} is a custom tool without an `input_schema`; the API refuses it. Give the JSON schema of its "
            'input, such as {"type": "object", "properties": {}}, or the `type` of a server tool.'
        ]
    name = tool.get("name")
    if kind == "custom" and isinstance(name, str) and not TOOL_NAME.match(name):
        return [f"{where}.name {name!r} is not a tool name the API takes: use 1 to 128 letters, digits, `_` or `-`."]
    held = {key for key, value in tool.items() if stored_ref(value) is not None and key not in ("name", "type")}
    errors: list[ErrorDetails] = []
    try:
        validated = _TOOL_ADAPTERS[kind].validate_python([tool], strict=True)[0]
    except ValidationError as e:
        errors.extend(e.errors(include_url=False))
    else:
        errors.extend(_drain(validated, (0,)))
    lines: dict[str, None] = {}
    failures: dict[str, list[str]] = {}
    for error in errors:
        loc = error["loc"][1:]
        if loc and loc[0] in held:
            continue  # a field a client stored: only the store has it
        path = _path(tool, loc, error["type"]) or ""
        if error["type"] == "extra_forbidden":
            lines[f"{where}{path} is not a field the SDK's types allow in a {kind!r} tool; remove it."] = None
        elif error["msg"] not in failures.setdefault(path, []):
            failures[path].append(error["msg"])
    for path, messages in failures.items():
        lines[f"{where}{path}: {'; or '.join(messages)}."] = None
    return list(lines)


def run_tool_names(tools: list[Any], messages: object = ()) -> set[str] | None:
    """The names of the tools a run with ``tools`` (and the history ``messages``) has, for a ``tool_choice``.

    Registered names, the definitions' names (a toolset's family, which has no name), and the tools added by the
    history's ``tool_addition`` blocks; ``None`` when only the API knows them all (an ``mcp_toolset``'s tools).
    """
    names: set[str] = set()
    for tool in tools:
        if isinstance(tool, str):
            names.add(tool)
        elif isinstance(tool, dict):
            name = tool.get("name")
            family = toolset_family(tool)
            if isinstance(name, str):
                names.add(name)
            elif family is not None:
                names.add(family)
            else:
                return None
    if isinstance(messages, list):
        names.update(change.name for change in tool_changes_in(messages) if change.available)
    return names


def duplicate_tool_problems(tools: object, where: str = "tools") -> list[str]:
    """Tools of ``tools`` named as an earlier one is: the API takes each tool name of a request once."""
    problems: list[str] = []
    first: dict[str, int] = {}
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        name = tool if isinstance(tool, str) else tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not name:
            continue
        if name in first:
            problems.append(
                f"`{where}[{i}]` is named `{name}`, as `{where}[{first[name]}]` is; the API refuses two tools of one "
                "name. Leave one of them out."
            )
        else:
            first[name] = i
    return problems


def tool_choice_problems(tool_choice: object, names: set[str] | None) -> list[str]:
    """A ``tool_choice`` that names a tool the run does not have (``names``; ``None``: only the API knows them)."""
    if names is None or not isinstance(tool_choice, dict) or tool_choice.get("type") != "tool":
        return []
    name = tool_choice.get("name")
    if not isinstance(name, str) or name in names:
        return []  # a name of the wrong type is the parameter check's to report
    has = f"its tools are {', '.join(f'`{n}`' for n in sorted(names))}" if names else "it has no tools"
    return [
        f"`tool_choice` names the tool `{name}`, which the run does not have ({has}); the API refuses a "
        'request that forces a tool it was not given. Name one of its tools, or give {"type": "auto"}.'
    ]


def _option(raw: dict[str, Any], key: str, model: type[_OptionT], problems: list[str]) -> _OptionT | None:
    """``raw[key]`` checked as ``model``; ``None`` when absent (or ``null``/``false``), or a problem noted."""
    if raw.get(key) in (None, False):
        return None
    try:
        return model.model_validate(raw[key])
    except ValidationError as e:
        problems.append(f"`{key}` is invalid: {validation_summary(e)}")
        return None
