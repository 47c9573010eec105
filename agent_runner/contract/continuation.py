"""A run's ``continue_from`` input: the ended run whose conversation a new run goes on with (``Run.send``).

How the new run starts from it is ``workflows/continuation.py``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from agent_runner.contract.conversation import Conversation
from agent_runner.contract.types import SEND_POINT_QUERY, Usage


class ContinueFrom(BaseModel):
    """A run's ``continue_from`` input: the ended run a new run goes on from (``SEND_POINT_QUERY``'s answer)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    """The run continued."""
    conversation: Conversation
    """Its conversation when it ended, the transcript by reference."""
    usage: Usage = Usage()
    """Its usage (and that of the runs it continued), which the new run adds to."""
    fallback_index: int | None = None
    """The refusal-fallback entry it was pinned to (``workflows/fallbacks.py``)."""
    tools: list[str] | None = None
    """The registered tools it could run when it ended (its ``tools`` with ``add_tools`` and ``remove_tools``
    applied), which the new run runs instead of its input's; ``None`` from a run that did not say."""


def continue_from_problems(raw: object, messages: object) -> list[str]:
    """What is wrong with a run's ``continue_from`` (empty when nothing is): its new ``messages`` are the user's."""
    if raw is None:
        return []
    problems: list[str] = []
    try:
        ContinueFrom.model_validate(raw)
    except ValueError as e:
        problems.append(
            f"`continue_from` is not what a run's `{SEND_POINT_QUERY}` query answered ({e.__class__.__name__}); "
            "continue a run with `Run.send` or `agent-runner send`."
        )
    if isinstance(messages, list) and any(not isinstance(m, dict) or m.get("role") != "user" for m in messages):
        problems.append("With `continue_from`, `messages` are the new user messages only.")
    return problems
