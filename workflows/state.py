"""``RunState``: everything a run keeps, in one model that continue-as-new carries whole.

What is not here lives only as long as one execution and is empty at every iteration boundary, where a run continues
as new: the waits for people (``approvals.py``), eager tool calls (``eager.py``), the call under way, and the
execution's own counters of updates and signals.

Two counts, one meaning each:

- an **iteration** is one turn of the SDK's runner loop, a reply Claude wrote for the conversation
  (``_beta_runner.py`` counts ``_iteration_count`` there and nowhere else): a compaction reply is not one. Limits,
  status, results, search attributes and step mode use ``iterations``.
- a **reply number** is a reply's place among all the run's replies, compactions included: ``replies``,
  ``fork_points`` and the live events are indexed by it (their wire fields say ``iteration`` for it).

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from agent_runner.contract.budget import Budget
from agent_runner.contract.steering import EditOutcome
from agent_runner.contract.types import ToolSpec, Usage
from agent_runner.workflows.conversation import Conversation
from agent_runner.workflows.edits import QueuedEdit, adds_to_conversation
from agent_runner.workflows.subagents import ChildRun


class RunState(BaseModel):
    """A run's durable state: what a client can observe or has sent, across crashes and continue-as-new."""

    conversation: Conversation | None = None
    """The history (by reference) and request parameters; ``None`` until the run has looked up its tools."""
    settings_stored: str | None = None
    """The ref of the request settings (parameters and tools) last stored, so unchanged ones are not resent."""
    own_settings_stored: str | None = Field(default=None, exclude_if=lambda ref: ref is None)
    """The ref of the run's own settings when the last model call that stored its settings sent their big values as
    they are: ``settings_stored``, or, in a run with ``refusal_fallbacks``, the settings before the chain's first hop
    added its beta (the call stores what it sent). A continuation carries the big values of these by reference."""
    stored: bool = True
    """Whether the last model call stored its turn (every call since the transcript store does)."""
    replies: list[dict[str, Any]] = []
    """This run's replies (and the last few of the runs before it, after ``reply_offset`` others)."""
    reply_offset: int = 0
    """Replies before ``replies``, over the whole run."""
    replies_head: str | None = None
    """The chain of every reply of the run in the store."""
    compactions: int = 0
    """Compaction replies over the whole run: they are replies, not iterations."""
    usage: Usage = Usage()
    tools: dict[str, ToolSpec] = {}
    """The tools a ``tool_use`` can run, by name."""
    registered: list[str] | None = None
    """The tools the workers registered (sorted), when they said."""
    search_attributes: bool = False
    """Whether the fleet registered the run's search attributes."""
    published: dict[str, Any] = {}
    """The search attribute values last written."""
    version: int = 0
    """The transcript version: it moves with every reply, tool results and applied edit."""
    queue: list[QueuedEdit] = []
    """Accepted edits waiting for the boundary, in the order accepted."""
    next_seq: int = 0
    outcomes: dict[int, EditOutcome] = {}
    stop: str | None = None
    """Why the run stops (a client's ``stop``, a hook, a spent budget); ``None`` while it goes on."""
    fork_points: list[str | None] = []
    """For each reply, the head of the history Claude saw when it wrote it; ``None`` for a compaction."""
    fork_offset: int = 0
    tools_from: dict[int, list[str]] = Field(default={}, exclude_if=lambda tools_from: not tools_from)
    """The registered tools the run could run from a reply number on, noted where an edit changed them, for its
    forks (``forking.py``). Left out of the carried JSON while empty."""
    recorded_used: list[int] = Field(default=[], exclude_if=lambda used: not used)
    """The entries of ``recorded_tool_results`` the run has answered a call with (``recorded_results.py``)."""
    budget: Budget | None = Field(default=None, exclude_if=lambda budget: budget is None)
    """The budget a person approved when the run's was spent (``budget_requests.py``); ``None``: the input's."""
    budget_requests: int = Field(default=0, exclude_if=lambda asked: not asked)
    """How many times the run has asked for more budget (its approvals are ``budget_1``, ``budget_2``, ...)."""
    started_at: datetime
    """When the first run of the chain started: the wall-clock budget counts from there."""
    continuations: int = 0
    turn_input_tokens: int = 0
    """The last turn's input tokens (cache reads and writes included), which ``auto_compact`` watches."""
    edits_applied: int = 0
    """Edits applied so far over the run chain: an edit's ``expected_version`` is judged against the ones that
    applied after it was accepted, not the run's own tool results."""
    input_trimmed: bool = False
    """Whether this continuation's input left the run's big parameters to the carried conversation."""
    # Left out of the carried JSON while empty, so a run without agents carries what it carried before them.
    children: list[ChildRun] = Field(default=[], exclude_if=lambda children: not children)
    """The child runs agent calls started (``subagents.py``), in the order started."""
    fallback_index: int | None = Field(default=None, exclude_if=lambda index: index is None)
    """The ``refusal_fallbacks`` entry every request starts at since a refusal moved the run down the chain
    (``fallbacks.py``); ``None`` for the run's own parameters. Left out of the carried JSON while unset."""

    @property
    def reply_count(self) -> int:
        """Replies over the whole run, compactions included: the number of the last reply."""
        return self.reply_offset + len(self.replies)

    @property
    def iterations(self) -> int:
        """Iterations of the runner loop over the whole run, as the SDK counts them: replies but compactions."""
        return self.reply_count - self.compactions

    @property
    def last_reply(self) -> dict[str, Any] | None:
        """The run's last reply (a compaction's included)."""
        return self.replies[-1] if self.replies else None

    @property
    def retry_queued(self) -> bool:
        """Whether a queued edit discards the last reply, whose tools must then not run."""
        return any(e.kind == "retry_turn" for e in self.queue)

    @property
    def message_queued(self) -> bool:
        """Whether a queued edit adds to the conversation, which keeps a finished turn going."""
        return any(adds_to_conversation(e.payload) for e in self.queue)
