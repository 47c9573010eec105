"""A conversation that outlives its run: ``Run.send`` continues an ended run in a new run (issue 13).

The ended run answers ``SEND_POINT_QUERY`` with what a continuation needs, and the client starts a new run whose
input names it in ``continue_from``: the old run's conversation (its transcript by reference, its request parameters
as the run last sent them, its place on the server-side thread), usage, refusal-fallback pin and the tools it could
run when it ended (its ``add_tools`` and ``remove_tools`` applied: the conversation goes on with the tools it ended
with). The new run starts
from that conversation with its own ``messages`` joined to it, so on a thread its first turn is a ``continue`` that
sends only the new message. The old run is left as it is (its fork points stay available); the new one counts its
own iterations.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import copy
from typing import Any

from agent_runner.contract.continuation import ContinueFrom
from agent_runner.contract.conversation import Conversation
from agent_runner.contract.types import ToolSpec, Usage


def send_point(
    run_id: str, conversation: Conversation, usage: Usage, fallback_index: int | None, tools: dict[str, ToolSpec]
) -> dict[str, Any]:
    """An ended run's ``continue_from``: its ``conversation`` (``carry.sent_conversation``).

    The tool set goes by name: the new run looks the tools up again, as any run does, so a worker's newer
    registration counts. The tools of MCP servers are left out, since the new run lists its servers afresh.
    """
    point = ContinueFrom(
        run_id=run_id,
        conversation=conversation,
        usage=usage,
        fallback_index=fallback_index,
        tools=[name for name, tool in tools.items() if tool.mcp is None],
    )
    return point.model_dump(mode="json")


def continued_conversation(point: ContinueFrom, messages: list[dict[str, Any]]) -> Conversation:
    """The conversation a new run starts from: the ended run's, with ``messages`` after it.

    A user message joins the last message when that is the user's (tool results the run never sent, for instance),
    so the history never holds two user messages in a row.
    """
    conversation = point.conversation.model_copy(deep=True)
    for message in messages:
        content: Any = copy.deepcopy(message.get("content"))
        conversation.join_user_content([{"type": "text", "text": content}] if isinstance(content, str) else content)
    return conversation
