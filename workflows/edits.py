"""Accepted edits waiting for the iteration boundary: one tagged union, parsed once when the update is accepted.

An edit's update only checks it (the ``check_*`` functions here) and queues it (``contract/steering.py`` holds the
update names and payloads): Temporal allows 10 updates in flight per run, so an update must not stay open until the
boundary. The queue is part of the run's state (``RunState.queue``), so an accepted edit survives crashes and
continue-as-new; the boundary applies it and records its ``EditOutcome``, which the client reads with the
``edit_outcome`` query.

A queued edit keeps the JSON shape it always had (``{"seq", "kind", "payload", "edits_applied"}``), so queues that
runs carried across continue-as-new before this union existed still load: ``kind`` picks the payload's model.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError
from temporalio import workflow

from agent_runner.contract.big_params import by_reference, lookalike_problems, read_by_fallbacks, stored_params
from agent_runner.contract.conversation import Conversation, tool_changes_in
from agent_runner.contract.errors import validation_summary
from agent_runner.contract.params import compaction_problems, param_problems
from agent_runner.contract.run_input import (
    API_PARAMS,
    EXTRA_BODY_PARAMS,
    RunSpec,
    message_problems,
    required_param_problems,
    run_tool_names,
    tool_choice_problems,
    tool_problems,
)
from agent_runner.contract.steering import (
    TO_GO_ON,
    AddTools,
    Compact,
    InjectMessage,
    RemoveTools,
    ReplaceHistory,
    RetryTurn,
    UpdateParams,
)
from agent_runner.contract.toolsets import toolset_family
from agent_runner.contract.transcript import is_placeholder
from agent_runner.contract.types import ToolSpec
from agent_runner.workflows.start_input import decoded, first_line

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView

_ModelT = TypeVar("_ModelT", bound=BaseModel)


class _Queued(BaseModel):
    seq: int
    """Its place in the order of acceptance, from 1."""
    edits_applied: int | None = None
    """How many edits the run had applied when it accepted this one (``None`` in runs from before it was kept)."""
    # Left out of the JSON while unset, so queues carry what they carried before it.
    replies: int | None = Field(default=None, exclude_if=lambda replies: replies is None)
    """How many replies the run had when it accepted this edit, which names an ``expected_version`` (its iterations:
    a compaction's reply changes no version): a reply that came after it the sender had not seen, so the edit is stale
    (``None``: not kept, ``EDIT_SEES_REPLIES_PATCH``)."""


class QueuedInject(_Queued):
    """A queued ``inject_message``."""

    kind: Literal["inject_message"] = "inject_message"
    payload: InjectMessage


class QueuedRetry(_Queued):
    """A queued ``retry_turn``."""

    kind: Literal["retry_turn"] = "retry_turn"
    payload: RetryTurn


class QueuedReplace(_Queued):
    """A queued ``replace_history``."""

    kind: Literal["replace_history"] = "replace_history"
    payload: ReplaceHistory


class QueuedParams(_Queued):
    """A queued ``update_params``."""

    kind: Literal["update_params"] = "update_params"
    payload: UpdateParams


class QueuedAddTools(_Queued):
    """A queued ``add_tools``."""

    kind: Literal["add_tools"] = "add_tools"
    payload: AddTools


class QueuedRemoveTools(_Queued):
    """A queued ``remove_tools``."""

    kind: Literal["remove_tools"] = "remove_tools"
    payload: RemoveTools


class QueuedCompact(_Queued):
    """A queued ``compact``."""

    kind: Literal["compact"] = "compact"
    payload: Compact


QueuedEdit = Annotated[
    QueuedInject | QueuedRetry | QueuedReplace | QueuedParams | QueuedAddTools | QueuedRemoveTools | QueuedCompact,
    Field(discriminator="kind"),
]
"""An accepted edit waiting for the boundary; ``kind`` is the update that carried it."""

Edit = InjectMessage | RetryTurn | ReplaceHistory | UpdateParams | AddTools | RemoveTools | Compact


EDIT_SEES_REPLIES_PATCH = "edit-version-counts-replies"
"""``workflow.patched`` id: an edit that names an ``expected_version`` keeps the run's reply count as it is accepted,
and fails at the boundary if a reply came since (``_Queued.replies``)."""


def queued(seq: int, edit: Edit, edits_applied: int, replies: int | None = None) -> QueuedEdit:
    """``edit``, accepted as the ``seq``-th edit of the run (``replies``: the run's reply count then, if kept)."""
    match edit:
        case InjectMessage():
            return QueuedInject(seq=seq, payload=edit, edits_applied=edits_applied, replies=replies)
        case RetryTurn():
            return QueuedRetry(seq=seq, payload=edit, edits_applied=edits_applied, replies=replies)
        case ReplaceHistory():
            return QueuedReplace(seq=seq, payload=edit, edits_applied=edits_applied, replies=replies)
        case UpdateParams():
            return QueuedParams(seq=seq, payload=edit, edits_applied=edits_applied, replies=replies)
        case AddTools():
            return QueuedAddTools(seq=seq, payload=edit, edits_applied=edits_applied, replies=replies)
        case RemoveTools():
            return QueuedRemoveTools(seq=seq, payload=edit, edits_applied=edits_applied, replies=replies)
        case Compact():
            return QueuedCompact(seq=seq, payload=edit, edits_applied=edits_applied, replies=replies)


def expected_version(edit: Edit) -> int | None:
    """The transcript version the sender saw, for the edits that name one."""
    return edit.expected_version if isinstance(edit, InjectMessage | RetryTurn | ReplaceHistory) else None


def adds_to_conversation(edit: Edit) -> bool:
    """Whether the edit gives Claude something new to answer, which keeps a finished turn going."""
    return isinstance(edit, InjectMessage | RetryTurn | ReplaceHistory)


# --- Checks before an edit is accepted (its update's validator): each raises ValueError saying what is wrong. ---------


def check_inject(edit: InjectMessage) -> None:
    """Injected content is the user's: content blocks a user message takes, never a tool's result or call."""
    if isinstance(edit.content, list):
        for i, block in enumerate(edit.content):
            if is_placeholder(block):
                continue  # content the client stored
            if not isinstance(block.get("type"), str):
                raise ValueError(f"content[{i}] must be a content block with a string `type`.")
            if block["type"] in ("tool_result", "tool_use"):
                raise ValueError(
                    f"content[{i}] is a `{block['type']}` block: tool results come from the run's tools (or "
                    "from `advance` in step mode), never from an injected message."
                )
    if edit.content in ("", []):
        raise ValueError("There is nothing to inject: give text or content blocks.")
    # As a run's first messages are checked: content the API would refuse must not reach every later request.
    problems = [
        problem.replace("`messages[0]`.content", "content").replace("`messages[0]`", "The content")
        for problem in message_problems([{"role": "user", "content": edit.content}])
    ]
    if problems:
        raise ValueError("The injected content was rejected:\n- " + "\n- ".join(problems))


def check_history(edit: ReplaceHistory) -> None:
    """A new history must be one the Messages API takes."""
    problems = message_problems(edit.messages)
    if problems:
        raise ValueError("The new history was rejected:\n- " + "\n- ".join(problems))


def check_params(
    edit: UpdateParams,
    conversation: Conversation | None,
    refusal_fallbacks: list[dict[str, Any]] | None = None,
    run: RunView | None = None,
) -> None:
    """New parameters must be known, valid together with the run's, and keep what a thread fixed.

    ``run``: the run, for the tools its queued edits add (``None``: only the conversation's and the edit's own).
    """
    allowed = API_PARAMS | EXTRA_BODY_PARAMS
    unknown = sorted(set(edit.params) - allowed)
    if unknown:
        raise ValueError(f"Unknown parameters {unknown}; allowed: {', '.join(sorted(allowed))}.")
    for required in ("model", "max_tokens"):
        if required in edit.params and edit.params[required] is None:
            raise ValueError(f"`{required}` cannot be removed.")
    invalid = required_param_problems(edit.params)  # as a run's input is checked
    if invalid:
        raise ValueError("The new parameters were rejected:\n- " + "\n- ".join(invalid))
    current = conversation.params if conversation is not None else {}
    merged = {**current, **{k: v for k, v in edit.params.items() if v is not None}}
    merged = {**merged, "model": str(merged.get("model") or "m"), "max_tokens": merged.get("max_tokens", 1)}
    if edit.held:  # the client stored the big ones: only the store has them (``big_params.py``)
        merged = {k: v for k, v in merged.items() if k not in stored_params(edit.params)}
    kept = sorted(read_by_fallbacks(refusal_fallbacks) & set(stored_params(edit.params) if edit.held else ()))
    if kept:  # a fallback hop merges into these key by key, which the workflow cannot do to a stored value
        raise ValueError(
            f"`{kept[0]}` is over 64 KB, and this run's refusal_fallbacks patch it, which needs it held by value: "
            f"keep it under 64 KB, or start a new run without refusal_fallbacks entries that patch `{kept[0]}`."
        )
    lookalikes = [] if edit.held else lookalike_problems(edit.params, [])
    problems = [*lookalikes, *(p for p in param_problems(merged) if any(f"`{key}" in p for key in edit.params))]
    if "tool_choice" in edit.params:  # as a run's input is checked: it must name a tool the run has
        names = tool_choice_names(conversation, run.spec if run else None, run.state.queue if run else ())
        problems.extend(tool_choice_problems(edit.params["tool_choice"], names))
    if problems:
        raise ValueError("The new parameters were rejected:\n- " + "\n- ".join(problems))
    if (
        conversation is not None
        and conversation.threading
        and "system" in edit.params
        and by_reference({"system": edit.params["system"]}) != by_reference(conversation.params).get("system")
    ):
        raise ValueError(
            "Cannot change `system` on a thread: the server keeps the one the thread was created with. To change "
            "it, start a new run with `thread: false` or from this run's transcript."
        )


def check_add_tools(edit: AddTools, registered: list[str] | None) -> None:
    """A tool added is a name the workers registered (when they said which) or a definition, as in a run's input."""
    lookalikes = [] if edit.held else lookalike_problems({}, edit.tools)
    shapes = tool_problems(edit.tools)
    if lookalikes or shapes:  # plain JSON: a reference-shaped field is data no tool definition takes, never a reference
        raise ValueError("The tools were rejected:\n- " + "\n- ".join([*shapes, *lookalikes]))
    unknown = [t for t in edit.tools if isinstance(t, str) and registered is not None and t not in registered]
    if unknown:
        raise ValueError(
            f"No worker registered {unknown}; registered: {sorted(registered or [])}. Register the tool with "
            "`python worker.py --tools <module>`, or add its definition as a JSON object."
        )


def tool_choice_names(
    conversation: Conversation | None, spec: RunSpec | None, queue: Iterable[QueuedEdit]
) -> set[str] | None:
    """Every tool a ``tool_choice`` set now may name; ``None`` when only the API knows them all.

    The tools the run's requests declare, its history's ``tool_addition`` blocks and the queued edits' (which apply
    before it). A tool withdrawn since counts still: a ``tool_removal`` is a hint to Claude, and its definition stays
    sent.
    """
    if conversation is not None:
        names = run_tool_names(conversation.tools)
        if names is not None:
            names.update(change.name for change in conversation.tool_changes if change.available)
    elif spec is not None and not (spec.mcp or spec.continue_from or spec.forked_from):
        names = run_tool_names(spec.tools, spec.messages)
    else:
        return None  # before the run has read its input, or one that goes on from a history it has not read yet
    for edit in queue:
        if names is None:
            return None
        if isinstance(edit, QueuedAddTools):
            added = run_tool_names(edit.payload.tools)
            names = None if added is None else names | added
        elif isinstance(edit, QueuedReplace):
            names.update(change.name for change in tool_changes_in(edit.payload.messages) if change.available)
    return names


def check_compaction(edit: Compact) -> None:
    """A compaction's ``compaction`` parameter must be one the API takes, as a run's parameters must."""
    problems = compaction_problems(edit.compaction)
    if problems:
        raise ValueError("The compaction was rejected:\n- " + "\n- ".join(problems))


_PAYLOAD_CHECKS: dict[type[BaseModel], Callable[[Any], None]] = {Compact: check_compaction}
"""Checks of an update's payload beyond its model, which ``parse_update`` makes (for an update whose validator takes
no other look at it) except while a history is replayed: an update accepted before its check existed applies as it
did then."""


def check_remove_tools(edit: RemoveTools, tools: Iterable[str], definitions: list[Any]) -> None:
    """A tool removed must be one the run has: a registered one or a definition it sends."""
    current = set(tools) | {str(d.get("name")) if isinstance(d, dict) else str(d) for d in definitions}
    unknown = [n for n in edit.names if n not in current]
    if unknown:
        raise ValueError(f"The run has no tools named {unknown}; it has {sorted(current)}.")


def check_toolsets_fixed(edit: AddTools | RemoveTools, tools: Mapping[str, ToolSpec]) -> None:
    """No edit adds a run's toolset again, replaces it with a definition, or takes it away (``ToolsetsFixedError``).

    A run's toolsets are fixed when it starts, as an SDK tool runner's are when it is created.
    """
    toolsets = {name for name, spec in tools.items() if toolset_family(spec.definition) == name}
    instead = "start a new run with the toolsets it needs"
    if isinstance(edit, RemoveTools):
        for name in edit.names:
            if name in toolsets:
                raise ValueError(
                    f"remove_tools can't remove the {name!r} toolset: a run's toolsets are fixed; {instead}."
                )
        return
    for tool in edit.tools:
        if isinstance(tool, str) and tool in toolsets:
            raise ValueError(f"add_tools can't add the {tool!r} toolset: the run has it; its toolsets are fixed.")
        if not isinstance(tool, dict):
            continue
        family, named = toolset_family(tool), tool.get("name")
        if family is not None and family in toolsets:
            raise ValueError(f"add_tools can't replace the {family!r} toolset: a run's toolsets are fixed; {instead}.")
        if isinstance(named, str) and named in toolsets:
            raise ValueError(
                f"add_tools can't add a tool named {named!r}: the run's {named!r} toolset has that name; give the "
                "tool another name."
            )


TOOLSETS_FIXED_PATCH = "toolsets-are-fixed"
"""``workflow.patched`` id: ``add_tools`` naming a registered toolset fails at the boundary (``added_toolsets``)."""


def added_toolsets(specs: Mapping[str, ToolSpec]) -> str | None:
    """Why ``add_tools`` cannot add these tools, as the workers described them: one is a toolset; else ``None``."""
    for name, spec in specs.items():
        if toolset_family(spec.definition) == name:
            return (
                f"add_tools can't add the {name!r} toolset: a run's toolsets are fixed when it starts; start a new "
                "run with the toolsets it needs."
            )
    return None


class EditFailed(Exception):
    """An accepted edit that cannot apply at the boundary (a stale version, an unregistered tool, ...)."""


def parse_update(model: type[_ModelT], raw: object, more: tuple[object, ...] = ()) -> _ModelT:
    """An update's input checked as ``model``, or a ``ValueError`` saying what is wrong (the update is then rejected).

    Every update takes its input undecoded (``start_input.one_raw_input``), as a run takes its start input: input
    Temporal cannot decode, or a second input, would otherwise be refused with a Python error marked retryable. No
    input at all is an empty object: the updates whose fields are all optional need none (the stock CLI's
    ``temporal workflow update execute --name advance``).

    Args:
        model: The update's input model.
        raw: The update's first argument: a ``RawValue`` (or, if Temporal decoded it, the value).
        more: Any further arguments the update was sent with.
    """
    if more:
        raise ValueError(
            f"An update takes one input, a JSON object, and this one was sent {1 + len(more)}: send them as one object."
        )
    try:
        value = decoded(raw)
    except Exception as e:  # whatever the converter raises: nothing this update was sent can be read
        raise ValueError(
            f"The update's input cannot be read ({first_line(e)}): send one JSON object (encoding `json/plain`)."
        ) from None
    try:
        parsed = model.model_validate({} if value is None else value)
    except ValidationError as e:
        raise ValueError(f"Invalid {model.__name__} update: {validation_summary(e, 'input')}.") from None
    check = _PAYLOAD_CHECKS.get(model)
    if check is not None and not (workflow.in_workflow() and workflow.unsafe.is_replaying()):
        check(parsed)
    return parsed


def check_open(ended: bool, status: str) -> None:
    """An edit needs a run that has not ended."""
    # An edit sent before the run set up its conversation is queued like any other: it applies at the first
    # boundary, before the first request.
    if ended:
        raise ValueError(f"The run has ended ({status}); it takes no edits. {TO_GO_ON}")


def check_first_in_line(expected: int | None, queue: list[QueuedEdit], what: str) -> None:
    """Refuse a retry or a message that names its version while edits accepted before it wait to apply.

    The loop acts on such an edit as the turn ends (a queued retry keeps the reply's tools from running, a queued
    message keeps a finished turn going), but the edits before it, applied first, move the transcript past the
    version it names, so it would then fail as stale: a reply's calls left without results (a request the API
    refuses), or the same conversation sent again.
    """
    if expected is not None and queue:
        raise ValueError(
            f"{len(queue)} edit(s) accepted before this {what} have not applied yet, and they will move the "
            f"transcript past version {expected}. Send it once they have applied (with the version they produce), "
            "or without expected_version."
        )


def check_version(expected: int | None, version: int) -> None:
    """An edit that names the transcript version it was made against needs the transcript still at it."""
    if expected is not None and expected != version:
        raise ValueError(
            f"The transcript changed since version {expected} (it is now at {version}). Read "
            "the transcript again and resend the edit with its version."
        )
