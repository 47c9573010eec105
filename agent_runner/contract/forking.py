"""A forked run's ``forked_from`` input: the run and reply it was forked from, and the tools it runs (issue 13).

The workflow's side (noting the run's tools, which a fork point names) is ``workflows/forking.py``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ForkedFrom(BaseModel):
    """A run's ``forked_from`` input: the run and reply it was forked from (``FORK_POINT_QUERY``'s answer)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    """The run forked."""
    iteration: int
    """The reply number whose request the fork's first request is."""
    tools: list[str] | None = None
    """The registered tools the run could run when it sent that request (MCP servers' tools left out: the fork
    lists its servers afresh); ``None`` when they were the ones its input names."""


def forked_from_problems(raw: object) -> list[str]:
    """What is wrong with a run's ``forked_from`` (empty when nothing is)."""
    if raw is None:
        return []
    try:
        ForkedFrom.model_validate(raw)
    except ValueError as e:
        return [
            f"`forked_from` is not what a run's fork point named ({e.__class__.__name__}); fork a run with "
            "`Run.fork` or `agent-runner fork`."
        ]
    return []
