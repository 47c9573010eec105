"""What a run's result carries for readers without a worker: what its history alone cannot show of how it ended.

A model call's input names the history it sent (``head`` and ``pending``) and its result is the reply, so an ended
run's conversation can be read from its history without a worker, up to the last reply. What came after no model
call saw: the tool results of a reply cut off by ``max_iterations``, a message injected last, the input of a run that
ended before its first call. The result carries the conversation then (by reference, as the transcript query gives
it), and only then, so a run that ended on Claude's reply returns what it always did. It carries the run's last
status too (what the ``status`` query answered as it ended: transcript version, cost, child runs), which no history
event holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.conversation import Conversation
    from agent_runner.contract.types import HeldTranscript, RunStatus
    from agent_runner.workflows.queries import status_of

from agent_runner.workflows.patches import implied, since

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView

RESULT_TRANSCRIPT_PATCH = "run-result-carries-unsent-messages"
"""``workflow.patched`` id of a result carrying the conversation when it ends with messages no model call stored;
runs recorded before return their result without it."""


def result_transcript(conversation: Conversation | None) -> HeldTranscript | None:
    """The conversation for the run's result, when it ends with messages no model call stored; else ``None``."""
    if conversation is None or not conversation.transcript.pending:
        return None
    if not implied(RESULT_TRANSCRIPT_PATCH):
        return None
    transcript = conversation.transcript
    return HeldTranscript(head=transcript.head, pending=list(transcript.pending))


RESULT_STATUS_PATCH = "run-result-carries-its-last-status"
"""``workflow.patched`` id of a result carrying the run's last status (``RunResult.last_status``); runs recorded
before return their result without it."""


def result_status(run: RunView) -> RunStatus | None:
    """The run's status as it ends, for its result: what the ``status`` query would answer (``queries.py``)."""
    if not since(RESULT_STATUS_PATCH):
        return None
    return status_of(run)
