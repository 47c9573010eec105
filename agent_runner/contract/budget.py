"""Budgets that end a run gracefully: tokens, cost and a wall-clock deadline, besides ``max_iterations``.

A budget is checked at each iteration boundary, so a run never stops in the middle of a turn: when one is spent the
run ends with status ``budget_exhausted`` and names the budget. With ``summarize`` it first makes one last request
with ``tool_choice: none`` and a user note, so Claude answers with what it has instead of being cut off. ``none``
rather than a forced tool: the newest models (Opus 5.5, Sonnet 5.5) refuse ``tool_choice`` ``any`` / ``tool`` with a
400, and ``auto`` / ``none`` are what every model takes.

Rather than end, a run can negotiate (``on_spent="ask"``): Claude sums up its progress and estimates what finishing
would take, and the run waits, durably and without a worker, for a person to approve more (the ``budget_N``
approval, with the new limits as its input) or to deny it (the run ends with that summary). With ``advise`` Claude
reads what is left of each limit with every turn's tool results, so it can pace itself before anything runs out.

Prices are given with the run (per million tokens), never built in, since they change and differ by model.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent_runner.contract.errors import validation_summary
from agent_runner.contract.types import Usage

BUDGET_APPROVAL = "budget"
"""The ``name`` of the ``PendingApproval`` a run asking for more budget waits on (its id: ``budget_<n>``)."""


def is_budget_request(tool_use_id: str, name: str = BUDGET_APPROVAL) -> bool:
    """Whether the approval ``tool_use_id`` (of the tool ``name``) is a run's request for more budget, not a call."""
    return name == BUDGET_APPROVAL and re.fullmatch(r"budget_[0-9]+", tool_use_id) is not None


def suggested_limits(budget: Mapping[str, Any]) -> dict[str, Any]:
    """Limits to offer for a budget request: twice its token and cost limits, else 20,000 output tokens."""
    doubled = {k: budget[k] * 2 for k in ("max_input_tokens", "max_output_tokens", "max_cost_usd") if budget.get(k)}
    return doubled or {"max_output_tokens": 20000}


class Prices(BaseModel):
    """US dollars per million tokens, as on the model's price list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float
    output: float
    cache_write: float = 0.0
    cache_read: float = 0.0

    def cost(self, usage: Usage) -> float:
        """What ``usage`` costs."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_creation_input_tokens * self.cache_write
            + usage.cache_read_input_tokens * self.cache_read
        ) / 1_000_000


class Budget(BaseModel):
    """Limits a run ends at, gracefully, at the next iteration boundary."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_input_tokens: int | None = None
    """Input tokens over all replies (cache reads and writes included)."""
    max_output_tokens: int | None = None
    max_cost_usd: float | None = None
    """Needs ``prices``."""
    prices: Prices | None = None
    timeout: timedelta | None = None
    """Wall-clock time from the run's start."""
    summarize: bool = False
    """When a budget is spent, make one last request without tools so Claude can sum up."""
    on_spent: Literal["end", "ask"] = "end"
    """``ask``: when a budget is spent, Claude sums up and estimates what finishing needs, and the run waits for a
    person to approve new limits (``Run.approve("budget_N", input={...})``) or to deny them (the run ends there)."""
    advise: bool = False
    """Tell Claude what is left of each limit: a text block after every turn's tool results (in the transcript)."""
    policy: str | None = None
    """With ``on_spent="ask"``: a budget policy the workers registered (``@budget_policy``) decides first; it gives
    new limits, leaves the decision to a person (``None``) or ends the run (``StopRun``)."""

    @model_validator(mode="after")
    def _cost_needs_prices(self) -> Budget:
        if self.max_cost_usd is not None and self.prices is None:
            raise ValueError("`max_cost_usd` needs `prices` (US dollars per million input and output tokens)")
        if self.policy is not None and self.on_spent != "ask":
            raise ValueError('`policy` decides requests for more budget: it needs `on_spent: "ask"`')
        return self

    def spent(self, usage: Usage, started: datetime, now: datetime) -> str | None:
        """Which budget is spent, in words, or ``None``."""
        input_tokens = usage.all_input_tokens
        if self.max_input_tokens is not None and input_tokens >= self.max_input_tokens:
            return f"input token budget ({input_tokens} of {self.max_input_tokens})"
        if self.max_output_tokens is not None and usage.output_tokens >= self.max_output_tokens:
            return f"output token budget ({usage.output_tokens} of {self.max_output_tokens})"
        if self.max_cost_usd is not None and self.prices is not None:
            cost = self.prices.cost(usage)
            if cost >= self.max_cost_usd:
                return f"cost budget (${cost:.4f} of ${self.max_cost_usd:.4f})"
        if self.timeout is not None and now - started >= self.timeout:
            return f"time budget ({self.timeout})"
        return None

    def left(self, usage: Usage, started: datetime, now: datetime) -> dict[str, Any]:
        """What is left of each limit the budget sets (none below zero), keyed as the budget's fields."""
        left: dict[str, Any] = {}
        if self.max_input_tokens is not None:
            left["max_input_tokens"] = max(self.max_input_tokens - usage.all_input_tokens, 0)
        if self.max_output_tokens is not None:
            left["max_output_tokens"] = max(self.max_output_tokens - usage.output_tokens, 0)
        if self.max_cost_usd is not None and self.prices is not None:
            left["max_cost_usd"] = max(self.max_cost_usd - self.prices.cost(usage), 0.0)
        if self.timeout is not None:
            left["timeout"] = max(self.timeout - (now - started), timedelta(0))
        return left

    def advice(self, usage: Usage, started: datetime, now: datetime) -> str | None:
        """The note ``advise`` gives Claude: what is left of each limit, or ``None`` when the budget sets none."""
        left = self.left_in_words(usage, started, now)
        return f"Budget left for this task: {left}. Pace your work to finish within it." if left else None

    def left_in_words(self, usage: Usage, started: datetime, now: datetime) -> str | None:
        """What is left of each limit, in words (``15 of 50 output tokens; 0:59:58 of 1:00:00``); ``None``: none."""
        left = self.left(usage, started, now)
        parts = []
        if "max_input_tokens" in left:
            parts.append(f"{left['max_input_tokens']:,} of {self.max_input_tokens:,} input tokens")
        if "max_output_tokens" in left:
            parts.append(f"{left['max_output_tokens']:,} of {self.max_output_tokens:,} output tokens")
        if "max_cost_usd" in left:
            parts.append(f"${left['max_cost_usd']:.4f} of ${self.max_cost_usd:.4f}")
        if "timeout" in left:
            parts.append(f"{_seconds(left['timeout'])} of {_seconds(self.timeout)}")
        return "; ".join(parts) or None

    def with_limits(self, limits: Mapping[str, Any]) -> Budget:
        """This budget with ``limits`` (some of its fields, as JSON) in place of its own; the rest kept.

        Raises:
            ValueError: (pydantic's ``ValidationError``) the result is no budget.
        """
        return Budget.model_validate({**self.model_dump(exclude_none=True), **limits})

    def extended(self, limits: dict[str, Any], usage: Usage, started: datetime, now: datetime) -> Budget:
        """This budget with ``limits`` (some of its fields) changed, for a run to go on with.

        Raises:
            ValueError: ``limits`` is empty, is not budget fields, or leaves a budget spent; the message says what to
                give instead.
        """
        example = 'for instance {"max_output_tokens": 20000}'
        if not limits:
            raise ValueError(f"Approve a budget request with the new limits as its input, {example}.")
        try:
            budget = self.with_limits(limits)
        except ValidationError as e:
            problem = validation_summary(e, whole="limits")
            raise ValueError(f"The new limits are not a budget ({problem}); give budget fields, {example}.") from None
        spent = budget.spent(usage, started, now)
        if spent is not None:
            raise ValueError(f"With these limits the {spent} is still spent: give limits above what the run has spent.")
        return budget


def _seconds(duration: timedelta | None) -> str:
    """``duration`` in whole seconds, as ``str(timedelta)`` writes it (``0:05:00``)."""
    return str(timedelta(seconds=int(duration.total_seconds()))) if duration is not None else "0:00:00"


class HistoryLimits(BaseModel):
    """When a run continues as new, besides Temporal's own suggestion: its history's size, events and messages.

    Temporal ends a run whose history reaches 50 MiB or 51,200 events, and takes at most 2,000 updates and 10,000
    signals per execution; continuing as new at an iteration boundary starts a fresh history with the run's state.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    events: int = Field(default=20_000, ge=10)
    history_bytes: int = Field(default=20_000_000, ge=10_000)
    updates: int = Field(default=1_500, ge=1)
    """Edits, approvals and steps received (Workflow Streams polls count in ``events``)."""
    signals: int = Field(default=8_000, ge=1)


class AutoCompact(BaseModel):
    """Compact the history when a turn's input passes a threshold (the SDK's ``compaction_control``, durably)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_tokens: int = Field(ge=1)
    """Compact before the next turn once a reply's input (cache reads and writes included) reached this."""
    compaction: dict[str, Any] = {"type": "summarize"}
    """The request's ``compaction`` field, as the SDK's ``BetaCompactionConfigParam`` (for instance
    ``{"instructions": "..."}``); its ``type``, which the API requires, is ``summarize`` when not given."""
    keep_recent_turns: int = Field(default=0, ge=0, strict=True)
    """Keep the last this many turns verbatim after the summary (``Compact.keep_recent_turns``); while the history
    has no older turns, no compaction is sent."""
    background: bool = False
    """Let the run go on while the summary is written (``Compact.background``): the turn that passed the threshold
    is not held up by the compaction."""

    @field_validator("compaction")
    @classmethod
    def _typed(cls, compaction: dict[str, Any]) -> dict[str, Any]:
        # Filled in, not refused: runs started with `{}` (the default before) go on, and send what the API takes.
        return compaction if "type" in compaction else {"type": "summarize", **compaction}


class BudgetRequest(BaseModel):
    """What a budget policy decides on: a run whose budget is spent, and Claude's summary of where it stands."""

    policy: str
    """The policy asked (the run's ``budget.policy``)."""
    run_id: str
    spent: str
    """Which budget is spent, in words: ``output token budget (30 of 25)``."""
    budget: dict[str, Any]
    """The run's budget as it stands (JSON, fields at their defaults left out)."""
    usage: Usage
    """What the run has spent so far, the summary turn included."""
    iterations: int
    reply: dict[str, Any]
    """Claude's summary reply (the Messages API's shape)."""

    @property
    def summary(self) -> str:
        """The summary reply's text."""
        return "".join(str(b.get("text", "")) for b in self.reply.get("content") or [] if b.get("type") == "text")


class BudgetDecision(BaseModel):
    """A budget policy's answer: new limits, the run's end, or neither (a person decides)."""

    limits: dict[str, Any] | None = None
    stop: str | None = None
