"""The conversation a run's result carries: what its history alone cannot show of how the conversation ended.

A model call's input names the history it sent (``head`` and ``pending``) and its result is the reply, so an ended
run's conversation can be read from its history without a worker, up to the last reply. What came after no model
call saw: the tool results of a reply cut off by ``max_iterations``, a message injected last, the input of a run that
ended before its first call. The result carries the conversation then (by reference, as the transcript query gives
it), and only then, so a run that ended on Claude's reply returns what it always did.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.conversation import Conversation
    from agent_runner.contract.types import HeldTranscript

RESULT_TRANSCRIPT_PATCH = "run-result-carries-unsent-messages"
"""``workflow.patched`` id of a result carrying the conversation when it ends with messages no model call stored;
runs recorded before return their result without it."""


def result_transcript(conversation: Conversation | None) -> HeldTranscript | None:
    """The conversation for the run's result, when it ends with messages no model call stored; else ``None``."""
    if conversation is None or not conversation.transcript.pending:
        return None
    if not workflow.patched(RESULT_TRANSCRIPT_PATCH):
        return None
    transcript = conversation.transcript
    return HeldTranscript(head=transcript.head, pending=list(transcript.pending))
