"""Accepted edits waiting for the iteration boundary: one tagged union, parsed once when the update is accepted.

An edit's update only checks it and queues it (``contract/steering.py`` holds the update names and payloads): Temporal
allows 10 updates in flight per run, so an update must not stay open until the boundary. The queue is part of the
run's state (``RunState.queue``), so an accepted edit survives crashes and continue-as-new; the boundary applies it
and records its ``EditOutcome``, which the client reads with the ``edit_outcome`` query.

A queued edit keeps the JSON shape it always had (``{"seq", "kind", "payload", "edits_applied"}``), so queues that
runs carried across continue-as-new before this union existed still load: ``kind`` picks the payload's model.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from agent_runner.contract.steering import (
    AddTools,
    Compact,
    InjectMessage,
    RemoveTools,
    ReplaceHistory,
    RetryTurn,
    UpdateParams,
)

_ModelT = TypeVar("_ModelT", bound=BaseModel)


class _Queued(BaseModel):
    seq: int
    """Its place in the order of acceptance, from 1."""
    edits_applied: int | None = None
    """How many edits the run had applied when it accepted this one (``None`` in runs from before it was kept)."""


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


def queued(seq: int, edit: Edit, edits_applied: int) -> QueuedEdit:
    """``edit``, accepted as the ``seq``-th edit of the run."""
    match edit:
        case InjectMessage():
            return QueuedInject(seq=seq, payload=edit, edits_applied=edits_applied)
        case RetryTurn():
            return QueuedRetry(seq=seq, payload=edit, edits_applied=edits_applied)
        case ReplaceHistory():
            return QueuedReplace(seq=seq, payload=edit, edits_applied=edits_applied)
        case UpdateParams():
            return QueuedParams(seq=seq, payload=edit, edits_applied=edits_applied)
        case AddTools():
            return QueuedAddTools(seq=seq, payload=edit, edits_applied=edits_applied)
        case RemoveTools():
            return QueuedRemoveTools(seq=seq, payload=edit, edits_applied=edits_applied)
        case Compact():
            return QueuedCompact(seq=seq, payload=edit, edits_applied=edits_applied)


def expected_version(edit: Edit) -> int | None:
    """The transcript version the sender saw, for the edits that name one."""
    return edit.expected_version if isinstance(edit, InjectMessage | RetryTurn | ReplaceHistory) else None


def adds_to_conversation(edit: Edit) -> bool:
    """Whether the edit gives Claude something new to answer, which keeps a finished turn going."""
    return isinstance(edit, InjectMessage | RetryTurn | ReplaceHistory)


class EditFailed(Exception):
    """An accepted edit that cannot apply at the boundary (a stale version, an unregistered tool, ...)."""


def parse_update(model: type[_ModelT], raw: object) -> _ModelT:
    """``raw`` checked as ``model``, or a ``ValueError`` that names each problem (the update is then rejected)."""
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'input'}: {err['msg']}" for err in e.errors())
        raise ValueError(f"Invalid {model.__name__} update: {problems}.") from None
