"""What a run hands to its continuation when it continues as new.

A run continues as new at an iteration boundary, so nothing is in flight: no model or tool call, no approval or
step waiting. Everything else a client can observe or has sent goes across, so following and steering clients do not
notice: the conversation (by reference), queued edits and the outcomes of recent ones, usage, the iteration count,
the live events' offsets, recent replies and fork points. Older replies and fork points stay readable through the
store (``replies_head``).

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel
from temporalio.contrib.workflow_streams import WorkflowStreamState

from agent_runner.contract.steering import EditOutcome, QueuedEdit
from agent_runner.contract.types import ToolSpec, Usage
from agent_runner.workflows.conversation import Conversation

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

CARRIED_INPUT_MESSAGES_BYTES = 64_000
"""The run's first messages are repeated in a continuation's input only up to this size (the transcript has them)."""


class Carried(BaseModel):
    """A run's state across continue-as-new (the ``continued`` field of the next run's input)."""

    conversation: Conversation
    settings_stored: str | None = None
    stored: bool = True
    replies: list[dict[str, Any]]
    reply_offset: int
    """Replies before ``replies``, over the whole run."""
    replies_head: str | None = None
    """The chain of every reply in the store."""
    compactions: int = 0
    usage: Usage = Usage()
    tools: dict[str, ToolSpec] = {}
    registered: list[str] | None = None
    search_attributes: bool = False
    published: dict[str, Any] = {}
    model_task_queue: str | None = None
    version: int = 0
    queue: list[QueuedEdit] = []
    next_seq: int = 0
    outcomes: dict[int, EditOutcome] = {}
    stop: str | None = None
    fork_points: list[str | None] = []
    fork_offset: int = 0
    started_at: datetime
    """When the first run of the chain started: the wall-clock budget counts from there."""
    continuations: int = 0
    turn_input_tokens: int = 0
    edits_applied: int = 0
    input_trimmed: bool = False
    """The continuation's input leaves the run's parameters to ``conversation`` (they were big)."""
    stream: WorkflowStreamState | None = None
