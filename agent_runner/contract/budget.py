"""Budgets that end a run gracefully: tokens, cost and a wall-clock deadline, besides ``max_iterations``.

A budget is checked at each iteration boundary, so a run never stops in the middle of a turn: when one is spent the
run ends with status ``budget_exhausted`` and names the budget. With ``summarize`` it first makes one last request
with ``tool_choice: none`` and a user note, so Claude answers with what it has instead of being cut off. ``none``
rather than a forced tool: the newest models (Opus 5.5, Sonnet 5.5) refuse ``tool_choice`` ``any`` / ``tool`` with a
400, and ``auto`` / ``none`` are what every model takes.

Prices are given with the run (per million tokens), never built in, since they change and differ by model.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_runner.contract.types import Usage


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

    @model_validator(mode="after")
    def _cost_needs_prices(self) -> Budget:
        if self.max_cost_usd is not None and self.prices is None:
            raise ValueError("`max_cost_usd` needs `prices` (US dollars per million input and output tokens)")
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
