"""Continue-as-new: when a run starts a fresh history, and what it hands to its continuation.

A run continues as new at an iteration boundary, so nothing is in flight: no model or tool call, no approval or
step waiting. Everything else a client can observe or has sent goes across, so following and steering clients do not
notice: the conversation (by reference), queued edits and the outcomes of recent ones, usage, the iteration count,
the live events' offsets, recent replies and fork points: the whole ``RunState``, as one object. Older replies and
fork points stay readable through the store (``replies_head``).

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState

from agent_runner.contract.big_params import (
    TOOL_FIELD_LIMIT,
    big_params,
    big_values,
    by_reference,
    read_by_fallbacks,
    settings_refs,
    slim_params,
    slim_tool,
    slim_tools,
    stored_ref,
)
from agent_runner.contract.budget import HistoryLimits
from agent_runner.contract.conversation import Conversation
from agent_runner.contract.run_input import API_PARAMS, EXTRA_BODY_PARAMS
from agent_runner.contract.transcript import canonical, escape, ref_for
from agent_runner.contract.types import ToolSpec
from agent_runner.workflows.forking import carried_tools_from
from agent_runner.workflows.patches import implied
from agent_runner.workflows.state import RunState

STREAM_OFFSET_QUERY = "__temporal_workflow_stream_offset"

CARRIED_REPLIES = 8
"""Recent replies carried whole, for followers a poll or two behind."""

CARRIED_REPLY_BYTES = 256_000
"""At most this much of them (but always the last one)."""

CARRIED_OUTCOMES = 256
"""Outcomes of recent edits carried, for clients waiting on them."""

CARRIED_FORK_POINTS = 1024

CARRIED_EVENTS = 256
"""Live events kept in the stream's log across a continuation, for subscribers a poll or two behind."""

CARRIED_BYTES = 1_000_000
"""Above this, a continuation drops the carried events: its input must stay well under the 2 MiB payload limit."""

PARAMS_BY_REFERENCE_PATCH = "params-by-reference"
"""``workflow.patched`` id of carrying a big ``system`` by reference into a continuation (``big_params.py``). Asked
only where a big parameter is held by value, so other runs carry no marker."""

BIG_VALUES_PATCH = "big-values-by-reference"
"""``workflow.patched`` id of carrying every big value by reference into a continuation: any parameter the workflow
does not read and the big fields of tool definitions, in the conversation, the tool specs and a trimmed input
(``big_params.py``). Asked only where a big value is held by value, so other runs carry no marker."""

CARRIED_INPUT_MESSAGES_BYTES = 64_000
"""The run's first messages are repeated in a continuation's input only up to this size (the transcript has them)."""


class Carried(RunState):
    """A run's state across continue-as-new (the ``continued`` field of the next run's input).

    All of ``RunState``, flat as before it existed (so a continuation that older code started still loads), and what
    the next execution needs to pick up where this one stopped.
    """

    conversation: Conversation
    model_task_queue: str | None = None
    """The queue the fleet routes model calls to (``describe_tools`` said it when the run began)."""
    stream: WorkflowStreamState | None = None
    """The live events' log, kept for subscribers a poll or two behind."""

    def state(self) -> RunState:
        """The run's state, to go on with."""
        return RunState.model_construct(**{name: getattr(self, name) for name in RunState.model_fields})


def should_continue_as_new(limits: HistoryLimits, updates: int, signals: int) -> bool:
    """Whether this execution's history is big enough to start a fresh one (checked at the iteration boundary).

    Args:
        limits: The run's ``continue_as_new`` limits.
        updates: Updates this execution took (Temporal allows 2,000 per execution).
        signals: Signals this execution took.
    """
    info = workflow.info()
    return (
        info.is_continue_as_new_suggested()
        or info.get_current_history_length() >= limits.events
        or info.get_current_history_size() >= limits.history_bytes
        or updates >= limits.updates
        or signals >= limits.signals
    )


def continuation_input(
    state: RunState, stream: WorkflowStream, run_input: dict[str, Any], model_task_queue: str | None
) -> dict[str, Any]:
    """The next execution's input: the run's own input, and everything ``state`` holds as ``continued``.

    Live events are trimmed to the last ``CARRIED_EVENTS`` (older ones are dropped from the log; the transcript keeps
    what they said), replies, fork points and edit outcomes to the last few (older ones stay readable in the store),
    and the input's big parts are left to the carried conversation, so the input stays far below Temporal's 2 MiB
    payload limit. Called with every handler finished, so nothing changes the state meanwhile.
    """
    conversation = state.conversation
    assert conversation is not None
    # The stream's own offset query is the public way to read its length from workflow code.
    offset_query = workflow.get_query_handler(STREAM_OFFSET_QUERY)
    assert offset_query is not None
    offset = offset_query()
    stream.truncate(max(0, offset - CARRIED_EVENTS))
    workflow.logger.info(
        "Continuing as new after %d iterations: history has %d events, %d bytes",
        state.iterations,
        workflow.info().get_current_history_length(),
        workflow.info().get_current_history_size(),
    )
    kept_outcomes = sorted(state.outcomes)[-CARRIED_OUTCOMES:]
    dropped_forks = max(0, len(state.fork_points) - CARRIED_FORK_POINTS)
    dropped_replies = _replies_to_drop(state.replies)
    # Every field of the state goes across (a new one cannot be forgotten); only these are trimmed on the way.
    params, tools, specs = _carried_settings(state, read_by_fallbacks(run_input.get("refusal_fallbacks")))
    trimmed = {
        "conversation": conversation.model_copy(
            update={"transcript": conversation.transcript.carry(), "params": params, "tools": tools}
        ),
        "tools": specs,
        "replies": state.replies[dropped_replies:],
        "reply_offset": state.reply_offset + dropped_replies,
        "outcomes": {seq: state.outcomes[seq] for seq in kept_outcomes},
        "fork_points": state.fork_points[dropped_forks:],
        "fork_offset": state.fork_offset + dropped_forks,
        "tools_from": carried_tools_from(state, state.fork_offset + dropped_forks),
        "continuations": state.continuations + 1,
    }
    carried = Carried.model_construct(
        **{**{name: getattr(state, name) for name in RunState.model_fields}, **trimmed},
        model_task_queue=model_task_queue,
        stream=stream.get_state(),
    )
    if len(canonical(carried.model_dump(mode="json"))) > CARRIED_BYTES:
        # Big events (a long reply, whole tool results) must not push the input past Temporal's payload limit.
        stream.truncate(offset)
        carried.stream = stream.get_state()
    run_input = dict(run_input)
    if len(canonical(run_input.get("messages"))) > CARRIED_INPUT_MESSAGES_BYTES:
        # The conversation travels by reference; the first messages only have to stay a valid input.
        run_input["messages"] = [{"role": "user", "content": "(the conversation continues from `continued`)"}]
    if len(canonical(run_input)) > CARRIED_INPUT_MESSAGES_BYTES:
        # A big parameter (a long `system`) is in the carried conversation already: never carry it twice, or a
        # prompt that fit at start would push the continuation past Temporal's payload limit.
        run_input = {k: v for k, v in run_input.items() if k not in API_PARAMS | EXTRA_BODY_PARAMS}
        run_input.update(model=conversation.params["model"], max_tokens=conversation.params["max_tokens"])
        carried.input_trimmed = True
        run_input = _slim_input_tools(run_input, tools, conversation.tools)
    return {**run_input, "continued": carried.model_dump(mode="json")}


def _replies_to_drop(replies: list[dict[str, Any]]) -> int:
    """How many of the oldest replies a continuation leaves to the store: it carries the last few, within a budget.

    The last reply is always carried (the loop reads it); a continuation's input must stay far below Temporal's
    2 MiB payload limit.
    """
    kept, size = 0, 0
    for reply in reversed(replies[-CARRIED_REPLIES:]):
        size += len(canonical(reply))
        if kept and size > CARRIED_REPLY_BYTES:
            break
        kept += 1
    return len(replies) - kept


def _carried_settings(
    state: RunState, keep: frozenset[str]
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, ToolSpec]]:
    """The parameters, tool definitions and tool specs a continuation carries: big values by reference once stored.

    The model call stores every big value it is sent (``activities/claude.py``), so a run that got a long ``system``,
    a big ``output_config`` or megabytes of tool schemas by value (plain JSON, an MCP server's tools) has them in the
    store once its current settings went out; carried by value, they would be in every later continuation's input
    and could push it past Temporal's payload limit. ``keep`` are parameters the workflow reads after all.
    """
    conversation = state.conversation
    assert conversation is not None
    params, tools = conversation.params, conversation.tools
    big = big_values(params, tools)
    if not big or not _settings_stored(state):
        return params, tools, state.tools  # nothing big, or not stored yet: carried as before
    if implied(BIG_VALUES_PATCH):
        known = {ref_for(canonical(value)) for value in big}
        specs = {
            name: spec.model_copy(update={"definition": _slim_known(spec.definition, known)})
            for name, spec in state.tools.items()
        }
        return slim_params(params, keep=keep), slim_tools(tools), specs
    if big_params(params) and implied(PARAMS_BY_REFERENCE_PATCH):
        return by_reference(params), tools, state.tools
    return params, tools, state.tools


def _settings_stored(state: RunState) -> bool:
    """Whether a model call stored the big values of the run's current settings (``RunState.own_settings_stored``)."""
    assert state.conversation is not None
    return state.conversation.turn().settings_ref in (state.settings_stored, state.own_settings_stored)


def sent_conversation(state: RunState, keep: frozenset[str]) -> Conversation:
    """The run's conversation as a new run is sent it (``Run.send``): by reference, as a continuation carries it.

    Its big parameters and tool fields go by reference too once a model call stored them (``keep``: those read by
    value), so a run started with a prompt near Temporal's payload limit can be continued: the query that answers
    with it holds the run's input as well.
    """
    conversation = state.conversation
    assert conversation is not None
    carried = conversation.model_copy(update={"transcript": conversation.transcript.carry()})
    if not big_values(conversation.params, conversation.tools) or not _settings_stored(state):
        return carried
    return carried.model_copy(
        update={"params": slim_params(conversation.params, keep=keep), "tools": slim_tools(conversation.tools)}
    )


def held_definition(tool: dict[str, Any], held: bool) -> dict[str, Any]:
    """A raw definition ``add_tools`` adds, as the conversation holds it (its ``tool_addition`` block is content).

    Plain JSON is escaped (``plain_json.py``) behind ``BIG_VALUES_PATCH``, asked only where there is something to
    escape: an object in it shaped like a reference is data, never looked up.
    """
    if held:
        return tool
    escaped: dict[str, Any] = escape(tool)
    if escaped is tool or not implied(BIG_VALUES_PATCH):
        return tool
    return escaped


def _slim_known(tool: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """``tool`` with the big fields whose values are stored (their refs in ``known``) replaced by placeholders."""
    slim = slim_tool(tool, TOOL_FIELD_LIMIT)  # the smallest limit: only what is known to be stored is replaced
    return {key: value if stored_ref(value) in known else tool[key] for key, value in slim.items()}


def _slim_input_tools(run_input: dict[str, Any], carried: list[Any], current: list[Any]) -> dict[str, Any]:
    """A trimmed continuation input whose raw tool definitions name their stored big fields by reference.

    Only once the carried definitions do (``carried`` differs from ``current``): the input then says ``held``, as the
    Python client's does, for its placeholders to be taken as references (its messages are the trimmed stand-in).
    """
    tools = run_input.get("tools")
    if carried is current or not isinstance(tools, list):
        return run_input
    known = set(settings_refs({}, carried))
    slim = [_slim_known(t, known) if isinstance(t, dict) else t for t in tools]
    if slim == tools:
        return run_input
    return {**run_input, "tools": slim, "held": True}
