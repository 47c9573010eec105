"""What a run leaves out of its activities' inputs, which its history holds every iteration (issue 14).

A model call's or a tool call's input names its run (for the live log, logs, spans and the tool's context), and the
activity knows that already: it is its own workflow id (``activity.info().workflow_id``). Leaving the id out saves
its bytes twice an iteration. That changes what a run sends, so it goes behind ``workflow.patched``: a run recorded
before sends the id on replay as it did.

Since ``LEAN_HISTORY_PATCH`` a model call's turn leaves out ``length`` (the call counts the stored messages itself),
which asks the call for a lean result (``agent_runner/contract/lean.py``): what every reply says anyway (``stored``,
``attempt`` 1, the reply's ``type``, ``role``, ``stop_sequence: null``, ``stop_reason: tool_use``) stays out of the
history, and the text and thinking blocks over ``RESULT_INLINE_LIMIT`` of a reply the run goes on from (``tool_use``,
``pause_turn``) are stored apart, as tool results are, so a long reply costs the history a placeholder. The run puts
the reply back whole (``whole_output``) before reading it.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.lean import full_output
    from agent_runner.contract.types import CreateMessageOutput, ModelTurn

INPUTS_WITHOUT_RUN_ID_PATCH = "activity-inputs-without-run-id"
"""``workflow.patched`` id of leaving ``run_id`` out of ``CreateMessageInput`` and ``RunToolInput`` (the activity
reads its own)."""


def input_run_id() -> str:
    """The ``run_id`` of a model or tool call's input: empty (the activity reads its own), unless recorded with it."""
    return "" if workflow.patched(INPUTS_WITHOUT_RUN_ID_PATCH) else workflow.info().workflow_id


LEAN_HISTORY_PATCH = "lean-iteration-history"
"""``workflow.patched`` id of lean model calls: the turn without ``length``, the result lean (``contract/lean.py``)."""


def lean_turn(turn: ModelTurn) -> tuple[ModelTurn, bool]:
    """``turn`` as this run sends it, and whether its call answers lean (not for runs recorded before the patch)."""
    if not workflow.patched(LEAN_HISTORY_PATCH):
        return turn, False
    return turn.model_copy(update={"length": None}), True


def whole_output(output: CreateMessageOutput, lean: bool) -> CreateMessageOutput:
    """The call's result as the run reads it: a lean one put back whole (``full_output``)."""
    return full_output(output) if lean else output
