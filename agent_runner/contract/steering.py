"""Steering a live run: the updates a client sends, and how each is checked before it is accepted.

Each update carries plain JSON (so the stock ``temporal workflow update execute --input '{...}'`` can send it) and is
checked by the update's validator: a rejected update never reaches the run's history, and the client is told why.
An accepted edit applies at the next iteration boundary (before the next model call), in the order the run
accepted it, and returns the transcript version it produced.

These are the SDK tool runner's loop-body controls (``append_messages``, ``set_messages_params``, ``add_tools``,
``remove_tools``, ``close``), without its pitfalls: a reply that a retry discards never has its tools run; a denied
tool never runs; an injected message joins the next user message instead of making a ``[user, user]`` history; a
``tool_result`` without its ``tool_use`` is refused.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TO_GO_ON = (
    "To go on with its conversation, send it a message (`Run.send`, `agent-runner send`: a new run that starts "
    "where it ended), or start a new run from its transcript."
)
"""What an edit refused because its run ended says to do instead."""

INJECT_MESSAGE_UPDATE = "inject_message"
RETRY_TURN_UPDATE = "retry_turn"
REPLACE_HISTORY_UPDATE = "replace_history"
UPDATE_PARAMS_UPDATE = "update_params"
ADD_TOOLS_UPDATE = "add_tools"
REMOVE_TOOLS_UPDATE = "remove_tools"
STOP_UPDATE = "stop"
COMPACT_UPDATE = "compact"
APPROVE_TOOL_UPDATE = "approve_tool"
DENY_TOOL_UPDATE = "deny_tool"
ADVANCE_UPDATE = "advance"
WAKE_UPDATE = "wake"
PENDING_APPROVALS_QUERY = "pending_approvals"
EDIT_OUTCOME_QUERY = "edit_outcome"

INLINE_TOOLS_BETA = "inline-tools-2026-09-15"
"""The beta that ``tool_addition`` / ``tool_removal`` system messages need. As in the SDK, the run does not add it:
give it in the run's ``betas``."""

COMPACT_BETA = "compact-2026-09-04"
"""The beta a compaction request (its ``compaction`` field) needs. As in the SDK, the run does not add it: give it in
the run's ``betas``."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InjectMessage(_Strict):
    """Add user content to the conversation: it joins the next user message, beside any tool results."""

    content: str | list[dict[str, Any]]
    """Text, or content blocks (text, image, document, ...)."""

    expected_version: int | None = None
    """The transcript version the sender saw; if the run has moved on since, the edit is rejected."""

    held: bool = Field(default=False, exclude_if=lambda held: not held)
    """Whether the content is already in the held form (``contract/transcript.py``), as the Python client sends it.
    Without it the content is plain JSON, and the run escapes anything in it shaped like a stored reference."""


class RetryTurn(_Strict):
    """Discard Claude's last reply (and its tool results) and send the turn again.

    Its tools never run; what edits added after it (an injected message, tool changes) is kept, after the messages
    before it.
    """

    expected_version: int | None = None


class ReplaceHistory(_Strict):
    """Replace the whole conversation (the SDK's ``set_messages_params`` with new ``messages``)."""

    messages: list[dict[str, Any]]
    expected_version: int
    """Required: the version of the transcript the new history was made from, so a concurrent change is rejected
    instead of silently lost."""

    held: bool = Field(default=False, exclude_if=lambda held: not held)
    """Whether the content is already in the held form (``contract/transcript.py``), as the Python client sends it.
    Without it the content is plain JSON, and the run escapes anything in it shaped like a stored reference."""


class UpdateParams(_Strict):
    """Change request parameters for every later turn (``max_tokens``, ``tool_choice``, ``system``, ...)."""

    params: dict[str, Any]
    """Parameters to set; a ``null`` value removes the parameter."""

    held: bool = Field(default=False, exclude_if=lambda held: not held)
    """Whether big parameters are stored apart, as the Python client sends them (``contract/big_params.py``)."""


class AddTools(_Strict):
    """Make tools available from the next turn on: registered names and/or raw definitions."""

    tools: list[str | dict[str, Any]] = Field(min_length=1)

    held: bool = Field(default=False, exclude_if=lambda held: not held)
    """Whether big fields of the definitions are stored apart, as the Python client sends them
    (``contract/big_params.py``)."""


class RemoveTools(_Strict):
    """Take tools away: Claude is told in a ``tool_removal`` system message and calls to them are not executed."""

    names: list[str] = Field(min_length=1)


class Compact(_Strict):
    """Summarize the history before the next turn (the SDK's ``compact_before_next_turn``)."""

    compaction: dict[str, Any] = {"type": "summarize"}
    """The ``compaction`` parameter of the summarizing request. Give the compaction beta in the run's ``betas``."""

    keep_recent_turns: int = Field(default=0, ge=0, strict=True)
    """Keep the last this many turns verbatim: only the history before them is summarized, and they follow the
    summary (``0``, the default, summarizes the whole history, as the SDK does). A turn starts with a reply of
    Claude's that follows a user or system message, and holds everything up to the next one. While the history has no
    turn older than those, the compaction is skipped and the edit says so."""

    # Left out of the dumped (and carried) edit while off, so an edit dumps as it did before the option.
    background: bool = Field(default=False, exclude_if=lambda background: not background)
    """Let the run go on while the summary is written; it replaces what it summarized at the first iteration boundary
    after it arrived, every later message kept after it (``workflows/background.py``)."""


class Stop(_Strict):
    """End the run (the SDK's ``close``): the current reply's tools do not run."""

    reason: str = "stopped by a client"


class ApproveTool(_Strict):
    """Let a tool call that waits for approval run, optionally with edited input."""

    tool_use_id: str
    input: dict[str, Any] | None = None
    """Input to run the tool with instead of Claude's; ``None`` keeps Claude's."""

    held: bool = Field(default=False, exclude_if=lambda held: not held)
    """Whether the content is already in the held form (``contract/transcript.py``), as the Python client sends it.
    Without it the content is plain JSON, and the run escapes anything in it shaped like a stored reference."""


class DenyTool(_Strict):
    """Refuse a tool call that waits for approval: it never runs, and Claude sees the reason as an error result."""

    tool_use_id: str
    reason: str = "The user denied this tool call."


class Advance(_Strict):
    """In step mode, let the run go on past the reply it paused after."""

    tool_results: list[dict[str, Any]] | None = None
    """``tool_result`` blocks the client built itself for the reply's ``tool_use`` blocks; then no tool runs. Each
    ``tool_use`` block of the reply needs exactly one result."""

    iteration: int | None = None
    """The iteration the client saw the run paused after (``status().iterations``). With it, an ``advance`` that
    reaches the run together with the reply it pauses on (as a worker replaying the run can hand it over) waits for
    that pause instead of being refused; a stale one (the run moved on) is refused."""

    held: bool = Field(default=False, exclude_if=lambda held: not held)
    """Whether the content is already in the held form (``contract/transcript.py``), as the Python client sends it.
    Without it the content is plain JSON, and the run escapes anything in it shaped like a stored reference."""


class Wake(_Strict):
    """Cut short the sleep Claude asked for with the built-in ``sleep`` tool; Claude reads that a person woke it."""

    reason: str | None = None
    """Why, passed on to Claude in the sleep's result."""


class ApprovalPolicy(_Strict):
    """Which tool calls wait for a person's approval, and what happens if nobody answers."""

    tools: list[str] | Literal["all"] = []
    """Tool names whose calls need approval, or ``"all"``."""

    timeout: timedelta | None = None
    """How long a call waits; ``None`` waits for ever (the run holds no worker while it waits)."""

    on_timeout: Literal["deny", "approve"] = "deny"
    """What an unanswered call becomes when the timeout passes."""


class StepPolicy(_Strict):
    """Step mode: the run pauses after each reply until a client advances it."""

    timeout: timedelta | None = None
    """How long the run waits for a client; ``None`` waits for ever."""

    on_timeout: Literal["continue", "stop"] = "stop"
    """What the run does when nobody advanced it in time."""

    review_results: bool = False
    """Also pause after the tools ran, so a client can read and change their results before Claude sees them
    (the SDK's "modify tool results")."""


class PendingApproval(BaseModel):
    """A tool call waiting for a person."""

    tool_use_id: str
    name: str
    input: Any
    iteration: int
    requested_at: str
    """When the call started waiting (ISO 8601, workflow time)."""
    note: str | None = None
    """Why a person is asked, when it is not the tool's own approval rule (an at-most-once call's unknown outcome)."""


class EditOutcome(BaseModel):
    """What became of an accepted edit: the version it produced, or why it could not apply (``edit_outcome``)."""

    seq: int
    version: int | None = None
    error: str | None = None
    kind: str | None = Field(default=None, exclude_if=lambda kind: kind is None)
    """The update that carried it (``inject_message``, ...); ``None`` in outcomes recorded before this field."""
